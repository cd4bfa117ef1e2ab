// GrpcServer: the gRPC listener (pimpl over grpc::Server): the kvserve.v1.KvServe
// service, the standard grpc.health.v1.Health service (SERVING until the drain starts)
// and server reflection (so grpcurl and friends work without the .proto).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "base/logger.h"
#include "server/core/frontend.h"

namespace kvserve::server {

struct GrpcServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                           // 0: an ephemeral port
  uint64_t max_message_bytes = 8ull << 20;  // largest request message (server.max_body_bytes)
  // TLS when tls_cert_path is set (PEM files); with tls_client_ca_path, mutual TLS: clients
  // must present a certificate signed by that CA.
  std::string tls_cert_path;
  std::string tls_key_path;
  std::string tls_client_ca_path;
  // Every call's final status (method label, grpc::StatusCode value), for the metrics; may
  // be null. See grpc_status_interceptor.h.
  std::function<void(std::string_view method, int code)> on_status;
};

class GrpcServer {
 public:
  GrpcServer(Frontend& frontend, GrpcServerOptions options, base::Logger logger);
  ~GrpcServer();
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // Binds and starts serving; returns the bound port.
  absl::StatusOr<int> Start();
  // Health status of the server and of the kvserve.v1.KvServe service.
  void SetServing(bool serving);
  // Stops accepting calls; calls still running after `grace` are cancelled. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::server
