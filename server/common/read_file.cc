// ReadFile() (server/common/read_file.h).
#include "server/common/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace cgacct {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

absl::Status CannotRead(const std::string& path, int error) {
  return absl::NotFoundError(
      absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
}

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) return CannotRead(path, errno);
  std::string out;
  char buf[8192];
  for (;;) {
    const size_t n = std::fread(buf, 1, sizeof buf, file.get());
    out.append(buf, n);
    if (out.size() > kMaxConfigFileBytes) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is over ", kMaxConfigFileBytes,
                       " bytes; a configuration file is expected"));
    }
    if (n < sizeof buf) break;
  }
  // A directory opens on Linux but fails to read (EISDIR).
  if (std::ferror(file.get())) return CannotRead(path, errno);
  return out;
}

}  // namespace cgacct
