// Identity kinds (server/auth/credentials.h).
#include "server/auth/credentials.h"

#include "absl/strings/match.h"

namespace cgacct {

bool HasIdentityKind(absl::string_view identity) {
  for (const char* kind : kIdentityKinds) {
    if (absl::StartsWith(identity, kind) &&
        identity.size() > absl::string_view(kind).size())
      return true;
  }
  return false;
}

}  // namespace cgacct
