// cgacct::client::MakeChannel: the gRPC channel to a cgacctd, with the
// credentials its access control wants, built from file names as the
// daemon's and cgacctctl's flags take them (docs/DESIGN.md §4.11), so that
// an application does not assemble gRPC credentials by hand.
//
//   plaintext       nothing set
//   TLS             tls_ca_file (the server is verified against it;
//                   tls_server_name overrides the name checked)
//   mTLS            ... plus tls_cert_file and tls_key_file
//   bearer token    token or token_file: "authorization: Bearer TOKEN" on
//                   every call, over TLS, or without tls_ca_file over a
//                   local connection only (gRPC's LOCAL_TCP credentials: a
//                   loopback target), which is where cgacctd accepts
//                   plaintext tokens (--tokens_file)
//
// Every channel also gets the Python client's channel defaults, so that it
// is back within a session lease after an outage: reconnect backoff 100 ms
// growing to 1 s (gRPC's default grows to 120 s), at least 1 s per
// connection attempt, the target re-resolved at most every 0.5 s.
//
// Errors (INVALID_ARGUMENT naming the field): a file that cannot be read or
// is empty, tls_cert_file without tls_key_file or the reverse, token and
// token_file both set, an empty target. Files are read once, when the
// channel or factory is made (a rotated certificate needs a new one).
//
// Thread safety: the functions are thread-safe; a ChannelFactory may be
// called from any number of threads; a grpc::Channel is thread-safe.
#ifndef CGACCT_CHANNEL_H_
#define CGACCT_CHANNEL_H_

#include <functional>
#include <memory>
#include <string>

#include <grpcpp/channel.h>

#include "cgacct/status.h"

namespace cgacct::client {

struct ConnectOptions {
  // PEM CA bundle cgacctd's certificate is checked against; set = TLS.
  std::string tls_ca_file;
  // PEM client certificate and its key (mTLS; both or neither).
  std::string tls_cert_file;
  std::string tls_key_file;
  // Name to check the server's certificate against (default: the target's
  // host).
  std::string tls_server_name;
  // A bearer token, given inline or as a file holding it (whitespace around
  // it ignored); at most one of the two.
  std::string token;
  std::string token_file;
  // A private subchannel pool, so that this channel gets its own TCP
  // connection (gRPC otherwise shares one between channels with equal
  // arguments).
  bool own_connection = false;
};

// Makes a channel to a target ("host:port", any gRPC target string).
using ChannelFactory =
    std::function<std::shared_ptr<grpc::Channel>(const std::string& target)>;

// Reads `options`' files once and returns a factory of channels with those
// credentials. Does not connect.
Result<ChannelFactory> MakeChannelFactory(const ConnectOptions& options);

// MakeChannelFactory(options)(target). Does not connect.
Result<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const ConnectOptions& options = {});

}  // namespace cgacct::client

#endif  // CGACCT_CHANNEL_H_
