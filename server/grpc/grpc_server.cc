#include "server/grpc/grpc_server.h"

#include <fstream>
#include <mutex>
#include <sstream>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/service_type.h>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/core/stream_pump.h"
#include "server/grpc/grpc_service.h"
#include "server/grpc/grpc_status_interceptor.h"

namespace kvserve::server {

namespace {
constexpr char kServiceName[] = "kvserve.v1.KvServe";

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  if (in) ss << in.rdbuf();
  if (!in || ss.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("gRPC: cannot read the TLS ", what, " ", path));
  }
  return ss.str();
}

// Insecure, TLS, or mutual TLS (client certificates required and checked against the CA).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> Credentials(const GrpcServerOptions& o) {
  if (o.tls_cert_path.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  KVS_ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(o.tls_cert_path, "certificate"));
  KVS_ASSIGN_OR_RETURN(pair.private_key, ReadPem(o.tls_key_path, "key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.tls_client_ca_path.empty()) {
    KVS_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(o.tls_client_ca_path, "client CA"));
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}
}  // namespace

struct GrpcServer::Impl {
  Frontend& frontend;
  GrpcServerOptions options;
  base::Logger logger;
  StreamPump pump;
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<grpc::Server> server;
  std::once_flag shutdown;

  Impl(Frontend& f, GrpcServerOptions o, base::Logger l)
      : frontend(f), options(std::move(o)), logger(std::move(l)) {}
};

GrpcServer::GrpcServer(Frontend& frontend, GrpcServerOptions options, base::Logger logger)
    : impl_(std::make_unique<Impl>(frontend, std::move(options), std::move(logger))) {}

GrpcServer::~GrpcServer() { Shutdown(std::chrono::milliseconds(0)); }

absl::StatusOr<int> GrpcServer::Start() {
  // Both are process-wide switches of the gRPC library, read when a server is built.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  impl_->service = MakeKvServeService(impl_->frontend, impl_->pump);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = absl::StrCat(impl_->options.host, ":", impl_->options.port);
  KVS_ASSIGN_OR_RETURN(auto credentials, Credentials(impl_->options));
  builder.AddListeningPort(address, credentials, &port);
  builder.RegisterService(impl_->service.get());
  if (impl_->options.on_status) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
    interceptors.push_back(MakeGrpcStatusInterceptorFactory(impl_->options.on_status));
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
  }
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<uint64_t>(impl_->options.max_message_bytes, INT32_MAX)));
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("gRPC: cannot listen on ", address, " (in use? set server.grpc_port)"));
  }
  SetServing(true);
  return port;
}

void GrpcServer::SetServing(bool serving) {
  if (impl_->server == nullptr) return;
  if (auto* health = impl_->server->GetHealthCheckService()) {
    health->SetServingStatus(serving);  // every service, including "" (the whole server)
    health->SetServingStatus(kServiceName, serving);
  }
}

void GrpcServer::Shutdown(std::chrono::milliseconds grace) {
  std::call_once(impl_->shutdown, [this, grace] {
    if (impl_->server != nullptr) {
      impl_->server->Shutdown(std::chrono::system_clock::now() + grace);
      impl_->server->Wait();
    }
    // After Shutdown no call is left, so nothing schedules on the pump any more.
    impl_->pump.Stop();
  });
}

}  // namespace kvserve::server
