#include "client/cli/wire_names.h"

namespace cgacct::cli {

std::optional<v1::FlushMode> ParseFlushMode(absl::string_view name) {
  if (name == "exact") return v1::FLUSH_MODE_EXACT;
  if (name == "threshold") return v1::FLUSH_MODE_THRESHOLD;
  if (name == "none") return v1::FLUSH_MODE_NONE;
  return std::nullopt;
}

std::optional<v1::PageKind> ParsePageKind(absl::string_view name) {
  if (name == "anon") return v1::PAGE_KIND_ANON;
  if (name == "file") return v1::PAGE_KIND_FILE;
  return std::nullopt;
}

}  // namespace cgacct::cli
