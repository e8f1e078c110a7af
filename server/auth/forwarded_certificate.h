// The client certificate a trusted front proxy verified and passed on
// (docs/DESIGN.md §4.11 "Behind a front proxy").
//
// deploy/front-proxy/haproxy-mtls.cfg has HAProxy verify client
// certificates itself (its `ca-file`, `verify optional`) and put the one a
// client presented in the `x-cgacct-client-cert` request header as base64
// of its DER (HAProxy's `%[ssl_c_der,base64]`), after deleting any such
// header the client sent. cgacctd reads it only from a caller whose own,
// gRPC-verified certificate names a --trusted_proxies identity
// (server/auth/authorizer.h); it does not verify it again (the proxy did,
// against the CA it was given; cgacctd only sees the leaf).
//
// Thread safety: pure functions.
#ifndef CGACCT_SERVER_AUTH_FORWARDED_CERTIFICATE_H_
#define CGACCT_SERVER_AUTH_FORWARDED_CERTIFICATE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace cgacct {

// The metadata key (lower case, as HTTP/2 sends header names).
inline constexpr char kForwardedClientCertKey[] = "x-cgacct-client-cert";
// At most this many bytes of base64 are decoded (a certificate with a long
// chain of names is a few KiB; gRPC's 8 KiB metadata limit is below it).
inline constexpr size_t kMaxForwardedCertBytes = 16 * 1024;

// The typed names (server/auth/credentials.h) of the certificate whose DER
// `base64_der` encodes, in the order and with the rules gRPC's own
// verification gives a directly connected client (server/rpc/peer.cc):
// its URI SAN ("uri:", only when it has exactly one), its DNS, email and IP
// SANs ("dns:", "email:", "ip:" in inet_ntop's text), then the subject's CN
// ("cn:", the first). A name holding a NUL byte is left out.
// Errors: INVALID_ARGUMENT naming the metadata key when the value is not
// base64 (standard alphabet, padded or not), is over
// kMaxForwardedCertBytes, or is not one DER X.509 certificate with nothing
// after it.
absl::StatusOr<std::vector<std::string>> ForwardedCertificateNames(
    absl::string_view base64_der);

// ForwardedCertificateNames(), remembered per value: every call of a
// client through the proxy carries the same header, and parsing it (base64,
// d2i_X509, the SANs) on each one made cgacctd slow enough to queue a
// certificate holder's rapid-reset flood that HAProxy passes on (the attack
// round at d766e0f: 45-61 k calls, 1.2 GB, another tenant's charges timing
// out; the same flood with a token: 47 MB). At most `capacity` values are
// kept; past that the map starts again empty (values a proxy sends are its
// clients' certificates). Values that are not certificates are not kept.
// Thread safety: thread-safe (one mutex around a hash lookup).
class ForwardedCertificateCache {
 public:
  explicit ForwardedCertificateCache(size_t capacity = 4096)
      : capacity_(capacity) {}
  ForwardedCertificateCache(const ForwardedCertificateCache&) = delete;
  ForwardedCertificateCache& operator=(const ForwardedCertificateCache&) =
      delete;

  // As ForwardedCertificateNames(); errors likewise.
  absl::StatusOr<std::shared_ptr<const std::vector<std::string>>> Names(
      absl::string_view base64_der) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t capacity_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string,
                      std::shared_ptr<const std::vector<std::string>>>
      names_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_AUTH_FORWARDED_CERTIFICATE_H_
