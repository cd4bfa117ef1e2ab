#include "server/grpc/grpc_status_interceptor.h"

#include <grpcpp/support/interceptor.h>
#include <grpcpp/support/status.h>

namespace kvserve::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class StatusInterceptor final : public grpc::experimental::Interceptor {
 public:
  StatusInterceptor(std::string_view method, const GrpcStatusHook* hook) : method_(method), hook_(hook) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      (*hook_)(method_, static_cast<int>(methods->GetSendStatus().error_code()));
    }
    methods->Proceed();
  }

 private:
  std::string_view method_;     // static storage (GrpcMethodLabel)
  const GrpcStatusHook* hook_;  // owned by the factory, which outlives every call
};

class StatusInterceptorFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit StatusInterceptorFactory(GrpcStatusHook hook) : hook_(std::move(hook)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    return new StatusInterceptor(GrpcMethodLabel(info->method()), &hook_);  // gRPC takes ownership
  }

 private:
  GrpcStatusHook hook_;
};

}  // namespace

std::string_view GrpcMethodLabel(const char* method) {
  // Every method of the registered services, as static strings: the label set stays bounded
  // whatever name a client sends.
  static constexpr std::string_view kKnown[] = {
      "/kvserve.v1.KvServe/Generate",
      "/kvserve.v1.KvServe/Complete",
      "/kvserve.v1.KvServe/Chat",
      "/kvserve.v1.KvServe/Tokenize",
      "/kvserve.v1.KvServe/Detokenize",
      "/kvserve.v1.KvServe/ListModels",
      "/kvserve.v1.KvServe/Abort",
      "/grpc.health.v1.Health/Check",
      "/grpc.health.v1.Health/Watch",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
  };
  if (method == nullptr) return "unknown";
  const std::string_view m(method);
  for (std::string_view k : kKnown) {
    if (m == k) return k;
  }
  return "unknown";
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> MakeGrpcStatusInterceptorFactory(
    GrpcStatusHook hook) {
  return std::make_unique<StatusInterceptorFactory>(std::move(hook));
}

}  // namespace kvserve::server
