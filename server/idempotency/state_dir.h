// The two small files SqliteStateStore keeps beside its database in the
// state directory (docs/DESIGN.md §4.12):
//  - StateDirLock: exclusive flock(2)s of DIR itself and of DIR/cgacct.lock
//    (which names the holder) held while a store is open, so that a second
//    cgacctd on the same directory is refused (naming the holder) instead
//    of interleaving its writes, even when the lock file was removed
//    meanwhile; the kernel releases them when the holder exits, SIGKILL
//    included;
//  - AckedChangesFile, DIR/cgacct.acked: how many group changes the store
//    has acknowledged, written after each one commits. The database records
//    the same count in the change's own transaction, so a database that
//    comes back with fewer changes than were acknowledged (a WAL lost,
//    zeroed or truncated: SQLite silently ignores WAL frames that fail their
//    checksums) is detected at start. Written to the page cache, not synced
//    per change (a second fdatasync per change cost 5x the group changes'
//    throughput): a crash of the process keeps it; after a power loss it may
//    be behind the database by the changes of the last seconds, so those
//    are not checked then (it is never ahead: written after the commit).
//
// Thread safety: neither class is thread-safe; SqliteStateStore calls them
// under its mutex.
#ifndef CGACCT_SERVER_IDEMPOTENCY_STATE_DIR_H_
#define CGACCT_SERVER_IDEMPOTENCY_STATE_DIR_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cgacct {

// An open file descriptor, closed on destruction. Move-only.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd();
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// fsync(2) of directory `dir` (after creating or renaming a file in it).
// Errors: UNAVAILABLE naming the directory and errno.
absl::Status SyncDirectory(const std::string& dir);

class StateDirLock {
 public:
  static constexpr const char kFileName[] = "cgacct.lock";

  // Takes the lock of `dir` (which must exist) without waiting, and writes
  // "PID HOSTNAME" into the lock file. Errors: FAILED_PRECONDITION another
  // process holds it (the message names the directory and the holder's pid
  // and host as its lock file says); UNAVAILABLE the file cannot be opened.
  static absl::StatusOr<StateDirLock> Acquire(const std::string& dir);

  StateDirLock(StateDirLock&&) = default;
  StateDirLock& operator=(StateDirLock&&) = default;

 private:
  StateDirLock(UniqueFd dir_fd, UniqueFd fd)
      : dir_fd_(std::move(dir_fd)), fd_(std::move(fd)) {}
  UniqueFd dir_fd_;  // holds the directory's flock until closed
  UniqueFd fd_;      // holds the lock file's flock until closed
};

class AckedChangesFile {
 public:
  static constexpr const char kFileName[] = "cgacct.acked";

  // What the file said when opened.
  enum class State {
    kMissing,  // no file (or an empty one): created now
    kValid,    // count() holds the last written count
    kDamaged,  // neither of its two records passes its checksum
  };

  // Opens (creating it if missing) `dir`/cgacct.acked and reads it.
  // Errors: UNAVAILABLE for I/O errors, naming the file.
  static absl::StatusOr<AckedChangesFile> Open(const std::string& dir);

  AckedChangesFile(AckedChangesFile&&) = default;
  AckedChangesFile& operator=(AckedChangesFile&&) = default;

  State state() const { return state_; }
  // The count read at Open() (kValid), or the last one written.
  uint64_t count() const { return count_; }
  const std::string& path() const { return path_; }

  // Records `count` (pwrite of one of two alternating 512-byte records: a
  // torn write leaves the other, older record), not synced. Errors:
  // UNAVAILABLE naming the file and errno.
  absl::Status Write(uint64_t count);
  // fdatasync(2) of what Write() wrote. Errors: UNAVAILABLE.
  absl::Status Sync();
  // Writes `count` into both records, then syncs the file and `dir` (the
  // file's directory): for a new file, or one whose records are damaged.
  // Errors: UNAVAILABLE naming the file and errno.
  absl::Status Initialize(uint64_t count, const std::string& dir);

 private:
  AckedChangesFile(UniqueFd fd, std::string path)
      : fd_(std::move(fd)), path_(std::move(path)) {}

  UniqueFd fd_;
  std::string path_;
  State state_ = State::kMissing;
  uint64_t count_ = 0;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_STATE_DIR_H_
