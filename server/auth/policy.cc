// The authorization policy (server/auth/policy.h).
#include "server/auth/policy.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/group_path.h"
#include "server/auth/config_text.h"
#include "server/auth/credentials.h"
#include "server/common/read_file.h"

namespace cgacct {

using auth_internal::ConfigLine;
using auth_internal::IsWord;
using auth_internal::Quote;

absl::StatusOr<AuthzPolicy> AuthzPolicy::Parse(absl::string_view text) {
  AuthzPolicy policy;
  for (const ConfigLine& line : auth_internal::ConfigLines(text)) {
    const std::vector<absl::string_view>& words = line.words;
    auto bad = [&line](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line.number, ": ", what,
                       " (want \"IDENTITY admin\", \"IDENTITY ro PATH\" or "
                       "\"IDENTITY rw PATH\")"));
    };
    if (!IsWord(words[0])) return bad("identity has non-printable bytes");
    if (!HasIdentityKind(words[0])) {
      return bad(absl::StrCat(
          "identity ", Quote(words[0]),
          " names no kind: write uri:, dns:, email:, ip:, cn: or token: "
          "before the name"));
    }
    Principal& p = policy.principals_[words[0]];
    p.identity = std::string(words[0]);
    if (words.size() == 2 && words[1] == "admin") {
      p.admin = true;
      continue;
    }
    if (words.size() != 3) return bad(absl::StrCat(words.size(), " words"));
    if (words[1] != "ro" && words[1] != "rw") {
      return bad(
          absl::StrCat("right ", Quote(words[1]), " is not admin, ro or rw"));
    }
    if (absl::Status s = ValidateGroupPath(words[2], "subtree"); !s.ok()) {
      return bad(s.message());
    }
    p.grants.push_back(Grant{std::string(words[2]), words[1] == "rw"});
  }
  return policy;
}

absl::StatusOr<AuthzPolicy> AuthzPolicy::LoadFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<AuthzPolicy> policy = Parse(*text);
  if (!policy.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", policy.status().message()));
  }
  return policy;
}

const Principal* AuthzPolicy::Find(absl::string_view identity) const {
  auto it = principals_.find(identity);
  return it == principals_.end() ? nullptr : &it->second;
}

}  // namespace cgacct
