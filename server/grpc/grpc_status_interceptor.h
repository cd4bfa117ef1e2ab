// A gRPC server interceptor that reports the status every call ends with, so that the
// metrics count gRPC errors by code in one place instead of in each reactor.
#pragma once

#include <functional>
#include <memory>
#include <string_view>

#include <grpcpp/support/server_interceptor.h>

namespace kvserve::server {

// `method` is the full method name for the services this server registers
// (kvserve.v1.KvServe, grpc.health.v1.Health, server reflection) and "unknown" for anything
// else, so it is safe as a metrics label. `code` is the grpc::StatusCode value.
using GrpcStatusHook = std::function<void(std::string_view method, int code)>;

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcStatusInterceptorFactory(
    GrpcStatusHook hook);

// The bounded method label for a call's full method name (exposed for tests).
std::string_view GrpcMethodLabel(const char* method);

}  // namespace kvserve::server
