// The kvserve.v1.KvServe service on gRPC's callback API: no thread is pinned per call.
// Streaming calls (Generate, Chat) are ServerWriteReactors with one write in flight;
// Complete is a unary reactor that collects the whole generation first. Both are driven
// by the StreamPump when their generation has output, and by OnWriteDone. OnCancel
// aborts the request in the engine and the call ends with CANCELLED.
#pragma once

#include <memory>

#include "server/core/frontend.h"
#include "server/core/stream_pump.h"

namespace grpc {
class Service;
}

namespace kvserve::server {

// `frontend` and `pump` must outlive the returned service and every call it serves
// (grpc::Server::Shutdown waits for the calls).
std::unique_ptr<grpc::Service> MakeKvServeService(Frontend& frontend, StreamPump& pump);

}  // namespace kvserve::server
