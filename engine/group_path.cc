#include "engine/group_path.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cgacct {

std::string ShortPath(absl::string_view path) {
  constexpr size_t kShown = 128;
  if (path.size() <= kShown) return absl::CHexEscape(path);
  return absl::StrCat(absl::CHexEscape(path.substr(0, kShown)), "... (",
                      path.size(), " bytes)");
}

std::string QuotePath(absl::string_view path) {
  return absl::StrCat("\"", ShortPath(path), "\"");
}

absl::Status RootChargeError(absl::string_view field) {
  return absl::InvalidArgumentError(absl::StrCat(
      field,
      " \"/\": the root cannot be charged or uncharged directly; its usage "
      "is the sum of its children's (the kernel never charges the root "
      "memcg itself)"));
}

absl::Status ValidateGroupPath(absl::string_view path,
                               absl::string_view field) {
  if (path.size() > kMaxPathBytes)
    return absl::InvalidArgumentError(absl::StrCat(field, " ", QuotePath(path),
                                                   " is longer than ",
                                                   kMaxPathBytes, " bytes"));
  if (path.empty() || path[0] != '/')
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", QuotePath(path),
                     " must be an absolute cgroup path like /a/b"));
  if (path == "/") return absl::OkStatus();
  if (path.back() == '/')
    return absl::InvalidArgumentError(
        absl::StrCat(field, " ", QuotePath(path), " must not end with '/'"));
  size_t start = 1;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == absl::string_view::npos) end = path.size();
    absl::string_view segment = path.substr(start, end - start);
    if (segment.empty() || segment.size() > 255)
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", QuotePath(path),
                       ": each segment must be 1 to 255 characters"));
    if (segment == "." || segment == "..")
      return absl::InvalidArgumentError(
          absl::StrCat(field, " ", QuotePath(path),
                       ": segments '.' and '..' are not allowed"));
    for (char ch : segment) {
      const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
                      ch == '-';
      if (!ok)
        return absl::InvalidArgumentError(
            absl::StrCat(field, " ", QuotePath(path),
                         ": segments may use only [A-Za-z0-9._-]"));
    }
    start = end + 1;
  }
  return absl::OkStatus();
}

absl::string_view ParentPath(absl::string_view path) {
  size_t pos = path.rfind('/');
  return pos == 0 ? absl::string_view("/") : path.substr(0, pos);
}

absl::string_view LeafName(absl::string_view path) {
  return path.substr(path.rfind('/') + 1);
}

}  // namespace cgacct
