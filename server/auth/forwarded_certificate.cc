// Names of a certificate passed on by a front proxy
// (server/auth/forwarded_certificate.h), read with OpenSSL's X.509 parser:
// the library gRPC itself verifies and reads certificates with in
// Debian's build.
#include "server/auth/forwarded_certificate.h"

#include <arpa/inet.h>
#include <openssl/asn1.h>
#include <openssl/crypto.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace cgacct {
namespace {

struct X509Free {
  void operator()(X509* cert) const { X509_free(cert); }
};
struct GeneralNamesFree {
  void operator()(GENERAL_NAMES* names) const { GENERAL_NAMES_free(names); }
};

absl::Status Invalid(absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(kForwardedClientCertKey, " metadata: ", why));
}

// `string` in UTF-8 (ASN1_STRING_to_UTF8, as gRPC), or "" if it cannot be
// converted or holds a NUL byte.
std::string Utf8Of(const ASN1_STRING* string) {
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, string);
  if (n < 0) return "";
  std::string out(reinterpret_cast<const char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  if (out.find('\0') != std::string::npos) return "";
  return out;
}

// An IP SAN's 4 or 16 bytes in inet_ntop's text, else "".
std::string IpOf(const ASN1_OCTET_STRING* ip) {
  char text[INET6_ADDRSTRLEN] = {};
  const int n = ASN1_STRING_length(ip);
  const unsigned char* bytes = ASN1_STRING_get0_data(ip);
  if (n == 4 && inet_ntop(AF_INET, bytes, text, sizeof(text)) != nullptr)
    return text;
  if (n == 16 && inet_ntop(AF_INET6, bytes, text, sizeof(text)) != nullptr)
    return text;
  return "";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ForwardedCertificateNames(
    absl::string_view base64_der) {
  if (base64_der.size() > kMaxForwardedCertBytes * 4 / 3 + 4) {
    return Invalid(absl::StrCat("over ", kMaxForwardedCertBytes,
                                " bytes of certificate"));
  }
  std::string der;
  if (base64_der.empty() || !absl::Base64Unescape(base64_der, &der) ||
      der.empty()) {
    return Invalid("not base64 of a DER certificate");
  }
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  const unsigned char* const end = p + der.size();
  std::unique_ptr<X509, X509Free> cert(
      d2i_X509(nullptr, &p, static_cast<long>(der.size())));
  if (cert == nullptr || p != end)
    return Invalid("not one DER X.509 certificate");

  std::vector<std::string> uris, dns, emails, ips;
  std::unique_ptr<GENERAL_NAMES, GeneralNamesFree> sans(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(
          cert.get(), NID_subject_alt_name, nullptr, nullptr)));
  const int nr_sans = sans == nullptr ? 0 : sk_GENERAL_NAME_num(sans.get());
  for (int i = 0; i < nr_sans; ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans.get(), i);
    std::string text;
    switch (name->type) {
      case GEN_URI:
        if (!(text = Utf8Of(name->d.uniformResourceIdentifier)).empty())
          uris.push_back(absl::StrCat("uri:", text));
        break;
      case GEN_DNS:
        if (!(text = Utf8Of(name->d.dNSName)).empty())
          dns.push_back(absl::StrCat("dns:", text));
        break;
      case GEN_EMAIL:
        if (!(text = Utf8Of(name->d.rfc822Name)).empty())
          emails.push_back(absl::StrCat("email:", text));
        break;
      case GEN_IPADD:
        if (!(text = IpOf(name->d.iPAddress)).empty())
          ips.push_back(absl::StrCat("ip:", text));
        break;
      default:
        break;
    }
  }
  std::vector<std::string> out;
  // A SPIFFE ID is the one URI SAN of its certificate (server/rpc/peer.cc).
  if (uris.size() == 1) out.push_back(std::move(uris.front()));
  for (auto* kind : {&dns, &emails, &ips}) {
    for (std::string& name : *kind) out.push_back(std::move(name));
  }
  const X509_NAME* subject = X509_get_subject_name(cert.get());
  const int cn = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (cn >= 0) {
    const std::string text = Utf8Of(
        X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, cn)));
    if (!text.empty()) out.push_back(absl::StrCat("cn:", text));
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const std::vector<std::string>>>
ForwardedCertificateCache::Names(absl::string_view base64_der) {
  {
    absl::MutexLock l(&mu_);
    auto it = names_.find(base64_der);
    if (it != names_.end()) return it->second;
  }
  absl::StatusOr<std::vector<std::string>> names =
      ForwardedCertificateNames(base64_der);
  if (!names.ok()) return names.status();
  auto shared =
      std::make_shared<const std::vector<std::string>>(*std::move(names));
  absl::MutexLock l(&mu_);
  if (names_.size() >= capacity_) names_.clear();
  names_.emplace(std::string(base64_der), shared);
  return shared;
}

}  // namespace cgacct
