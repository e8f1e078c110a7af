// StateDirLock and AckedChangesFile (server/idempotency/state_dir.h).
#include "server/idempotency/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/idempotency/dedup_cache.h"

namespace cgacct {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// AckedChangesFile's layout: two records, at 0 and at kRecordBytes, each
// "CGACKED1", the count (64-bit little-endian) and the StableDigest of those
// 16 bytes. Count n goes to record n % 2.
constexpr size_t kRecordBytes = 512;
constexpr char kMagic[8] = {'C', 'G', 'A', 'C', 'K', 'E', 'D', '1'};
constexpr size_t kRecordUsed = 24;

uint64_t LoadLittleEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void StoreLittleEndian64(uint64_t v, char* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// One record holding `count`.
void FillRecord(uint64_t count, char (&record)[kRecordBytes]) {
  std::memset(record, 0, sizeof(record));
  std::memcpy(record, kMagic, sizeof(kMagic));
  StoreLittleEndian64(count, record + 8);
  StoreLittleEndian64(StableDigest(absl::string_view(record, 16)), record + 16);
}

std::optional<uint64_t> ParseRecord(const char* record) {
  if (std::memcmp(record, kMagic, sizeof(kMagic)) != 0) return std::nullopt;
  const uint64_t count = LoadLittleEndian64(record + 8);
  const uint64_t digest = LoadLittleEndian64(record + 16);
  if (digest != StableDigest(absl::string_view(record, 16)))
    return std::nullopt;
  return count;
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

UniqueFd::~UniqueFd() {
  if (fd_ >= 0) close(fd_);
}

absl::Status SyncDirectory(const std::string& dir) {
  UniqueFd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0 || fsync(fd.get()) != 0)
    return ErrnoError("cannot sync directory", dir);
  return absl::OkStatus();
}

absl::StatusOr<StateDirLock> StateDirLock::Acquire(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  // The holder, as its lock file says ("PID HOST").
  auto refused = [&](int fd) {
    std::string said;
    if (fd >= 0) {
      char holder[256] = {};
      const ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
      said.assign(holder, n > 0 ? static_cast<size_t>(n) : 0);
      absl::StripAsciiWhitespace(&said);
    }
    const size_t space = said.find(' ');
    const std::string pid = said.substr(0, space);
    const std::string host =
        space == std::string::npos ? "" : said.substr(space + 1);
    return absl::FailedPreconditionError(absl::StrCat(
        "state directory ", dir, " is in use by another cgacctd (",
        pid.empty() ? "pid unknown: its " + path + " was removed or emptied"
                    : absl::StrCat("pid ", pid),
        host.empty() ? "" : absl::StrCat(" on ", host),
        pid.empty() ? "" : absl::StrCat(", holding ", path),
        "): stop it first, or give this one another --state_dir"));
  };
  // The directory itself is locked: a lock file removed (or replaced) while
  // a daemon runs would let a second one lock the new file.
  UniqueFd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return ErrnoError("cannot open state directory", dir);
  if (flock(dir_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoError("cannot lock", dir);
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    return refused(fd.get());
  }
  // And the lock file, which names the holder (and is what cgacctd before
  // the directory lock took).
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return ErrnoError("cannot open lock file", path);
  if (flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return ErrnoError("cannot lock", path);
    return refused(fd.get());
  }
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  const std::string holder = absl::StrCat(getpid(), " ", host, "\n");
  if (ftruncate(fd.get(), 0) != 0 ||
      pwrite(fd.get(), holder.data(), holder.size(), 0) !=
          static_cast<ssize_t>(holder.size()))
    return ErrnoError("cannot write lock file", path);
  return StateDirLock(std::move(dir_fd), std::move(fd));
}

absl::StatusOr<AckedChangesFile> AckedChangesFile::Open(
    const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kFileName);
  UniqueFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  if (fd.get() < 0) return ErrnoError("cannot open", path);
  AckedChangesFile file(std::move(fd), path);
  char records[2 * kRecordBytes] = {};
  const ssize_t n = pread(file.fd_.get(), records, sizeof(records), 0);
  if (n < 0) return ErrnoError("cannot read", path);
  if (n == 0) {
    // New: Initialize() writes it before anything relies on it.
    file.state_ = State::kMissing;
    return file;
  }
  std::optional<uint64_t> best;
  for (int i = 0; i < 2; ++i) {
    if (static_cast<size_t>(n) < i * kRecordBytes + kRecordUsed) continue;
    const std::optional<uint64_t> count =
        ParseRecord(records + i * kRecordBytes);
    if (count.has_value() && (!best.has_value() || *count > *best))
      best = count;
  }
  file.state_ = best.has_value() ? State::kValid : State::kDamaged;
  file.count_ = best.value_or(0);
  return file;
}

absl::Status AckedChangesFile::Write(uint64_t count) {
  char record[kRecordBytes];
  FillRecord(count, record);
  const off_t offset = static_cast<off_t>((count % 2) * kRecordBytes);
  if (pwrite(fd_.get(), record, sizeof(record), offset) !=
      static_cast<ssize_t>(sizeof(record)))
    return ErrnoError("cannot write", path_);
  count_ = count;
  return absl::OkStatus();
}

absl::Status AckedChangesFile::Sync() {
  if (fdatasync(fd_.get()) != 0) return ErrnoError("cannot sync", path_);
  return absl::OkStatus();
}

absl::Status AckedChangesFile::Initialize(uint64_t count,
                                          const std::string& dir) {
  char records[2 * kRecordBytes];
  char record[kRecordBytes];
  FillRecord(count, record);
  std::memcpy(records, record, kRecordBytes);
  std::memcpy(records + kRecordBytes, record, kRecordBytes);
  if (pwrite(fd_.get(), records, sizeof(records), 0) !=
          static_cast<ssize_t>(sizeof(records)) ||
      fdatasync(fd_.get()) != 0)
    return ErrnoError("cannot write", path_);
  count_ = count;
  state_ = State::kValid;
  return SyncDirectory(dir);
}

}  // namespace cgacct
