// Groups::Impl: how a cgacct::client::Groups reaches the server, so that
// Groups::Open, Client::groups() and ClusterClient::groups() share one
// implementation (client/lib/groups.cc). Internal to the library (not
// installed).
//
// Thread safety: the functions are called from any thread at once; those
// given by Client and ClusterClient take their own locks.
#ifndef CGACCT_CLIENT_LIB_GROUPS_IMPL_H_
#define CGACCT_CLIENT_LIB_GROUPS_IMPL_H_

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "cgacct/groups.h"
#include "grpcpp/channel.h"

namespace cgacct::client {

struct Groups::Impl {
  CallOptions options;
  // The channels a unary call is sent over, in order: the next one after a
  // channel's attempts ended UNAVAILABLE or DEADLINE_EXCEEDED (a cluster's
  // nodes; one channel otherwise). A status that is not OK refuses the
  // call (a closed ClusterClient).
  std::function<Result<std::vector<std::shared_ptr<grpc::Channel>>>()>
      channels;
  // The channel a watch of `path` goes to (a cluster: its shard's owner).
  std::function<Result<std::shared_ptr<grpc::Channel>>(std::string_view path)>
      watch_channel;

  // An Impl over one channel.
  static std::unique_ptr<Impl> OneChannel(
      std::shared_ptr<grpc::Channel> channel, CallOptions options);
};

}  // namespace cgacct::client

#endif  // CGACCT_CLIENT_LIB_GROUPS_IMPL_H_
