// WatchEvents (docs/DESIGN.md §4.9): a server stream of one group's
// memory.events and memory.events.local, the current counts on subscribe,
// then the latest counts after every change, coalesced (a slow reader skips
// intermediate counts; one update buffer per stream, nothing queues).
//
// Thread safety: thread-safe.
#ifndef CGACCT_SERVER_RPC_WATCH_EVENTS_H_
#define CGACCT_SERVER_RPC_WATCH_EVENTS_H_

#include <grpcpp/grpcpp.h>

#include "server/events/events_hub.h"
#include "server/pipeline/pipeline.h"

namespace cgacct {

// A WatchEvents call of `context`, registered as a bidi stream on the
// server (the client sends one cgacct.v1.WatchEventsRequest as raw bytes
// and half-closes, as for a server stream). It passes the stages of every
// call (admission with a stream permit, shutdown and the deadline;
// authentication; the request read through one of the caller's read
// slots; decoding; validation; read access; the group resolved), then
// subscribes to `hub`. Ends NOT_FOUND when the group is deleted (the
// stream follows the group instance it subscribed to, even if the path is
// created again), CANCELLED when the client cancels, UNAVAILABLE when the
// server shuts down; refused before it starts with the stage's status, or
// UNAVAILABLE when `hub` is null.
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* StartWatchEvents(
    Pipeline& pipeline, EventsHub* hub, grpc::CallbackServerContext* context);

}  // namespace cgacct

#endif  // CGACCT_SERVER_RPC_WATCH_EVENTS_H_
