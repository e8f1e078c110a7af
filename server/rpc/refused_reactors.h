// Reactors of streaming calls refused before they started (admission,
// authentication, a request that failed its checks): each finishes at once
// with the refusal and deletes itself when gRPC is done with it.
//
// Thread safety: gRPC's reactor rules; nothing shared.
#ifndef CGACCT_SERVER_RPC_REFUSED_REACTORS_H_
#define CGACCT_SERVER_RPC_REFUSED_REACTORS_H_

#include <grpcpp/grpcpp.h>

namespace cgacct {

class RefusedBidiReactor final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  explicit RefusedBidiReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

class RefusedWriteReactor final
    : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  explicit RefusedWriteReactor(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_REFUSED_REACTORS_H_
