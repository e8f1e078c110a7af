// Test certificates made at test time by the real openssl CLI (Debian's
// openssl package, installed by deploy/install-deps.sh): CAs, a server
// certificate for localhost/127.0.0.1 and client certificates, in a fresh
// temporary directory removed at the end.
#ifndef CGACCT_TESTS_SERVER_TEST_CERTS_H_
#define CGACCT_TESTS_SERVER_TEST_CERTS_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace cgacct {
namespace test_util {

class TestCerts {
 public:
  // Makes the temporary directory; ok() is false if that failed.
  TestCerts() {
    char tmpl[] = "/tmp/cgacct-certs-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
  }
  ~TestCerts() {
    if (!dir_.empty()) Run("rm -rf '" + dir_ + "'");
  }
  TestCerts(const TestCerts&) = delete;
  TestCerts& operator=(const TestCerts&) = delete;

  bool ok() const { return !dir_.empty(); }
  const std::string& dir() const { return dir_; }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // A self-signed CA: NAME.key, NAME.pem. Returns the openssl exit status
  // (0 = made).
  int MakeCa(const std::string& name) {
    return Run("openssl req -x509 -newkey ec -pkeyopt "
               "ec_paramgen_curve:prime256v1 -nodes -days 2 -subj '/CN=" +
               name + "' -addext 'basicConstraints=critical,CA:TRUE' "
               "-addext 'keyUsage=critical,keyCertSign,cRLSign' -keyout '" +
               Path(name + ".key") + "' -out '" + Path(name + ".pem") + "'");
  }

  // A leaf NAME.key, NAME.pem signed by CA `ca`, with subject CN=`cn` and
  // `san` ("DNS:x,URI:spiffe://y"; empty = no SAN), for `usage`
  // ("serverAuth" or "clientAuth").
  int MakeLeaf(const std::string& name, const std::string& ca,
               const std::string& cn, const std::string& san,
               const std::string& usage) {
    const std::string ext = Path(name + ".ext");
    {
      std::ofstream out(ext);
      out << "basicConstraints=CA:FALSE\n"
          << "keyUsage=critical,digitalSignature,keyEncipherment\n"
          << "extendedKeyUsage=" << usage << "\n";
      if (!san.empty()) out << "subjectAltName=" << san << "\n";
    }
    int rc = Run("openssl req -new -newkey ec -pkeyopt "
                 "ec_paramgen_curve:prime256v1 -nodes -subj '/CN=" +
                 cn + "' -keyout '" + Path(name + ".key") + "' -out '" +
                 Path(name + ".csr") + "'");
    if (rc != 0) return rc;
    return Run("openssl x509 -req -days 2 -in '" + Path(name + ".csr") +
               "' -CA '" + Path(ca + ".pem") + "' -CAkey '" +
               Path(ca + ".key") + "' -set_serial " +
               std::to_string(++serial_) + " -extfile '" + ext + "' -out '" +
               Path(name + ".pem") + "'");
  }

  // The server leaf most tests use: CN=localhost, DNS:localhost and
  // IP:127.0.0.1.
  int MakeServer(const std::string& name, const std::string& ca) {
    return MakeLeaf(name, ca, "localhost", "DNS:localhost,IP:127.0.0.1",
                    "serverAuth");
  }

  std::string Read(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }
  void Write(const std::string& name, const std::string& text) const {
    // Written aside and renamed: a watcher never reads half a file.
    const std::string tmp = Path(name + ".tmp");
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
    }
    std::rename(tmp.c_str(), Path(name).c_str());
  }
  void Copy(const std::string& from, const std::string& to) const {
    Write(to, Read(from));
  }

 private:
  static int Run(const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str());
  }

  std::string dir_;
  int serial_ = 1000;
};

}  // namespace test_util
}  // namespace cgacct

#endif  // CGACCT_TESTS_SERVER_TEST_CERTS_H_
