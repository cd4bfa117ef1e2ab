#include "server/grpc/grpc_service.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "base/check.h"
#include "kvserve/v1/kvserve.grpc.pb.h"
#include "server/errors/error_mapping.h"
#include "server/errors/rate_limit_status.h"
#include "server/grpc/grpc_convert.h"

namespace kvserve::server {
namespace {

using std::chrono::milliseconds;
using v1::GenerateChunk;

std::string Authorization(const grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// The status of a call refused before it starts. A tenant rate-limit refusal (RESOURCE_EXHAUSTED)
// also sends the retry delay as trailing metadata: `retry-after` in whole seconds plus the
// x-ratelimit-* entries the HTTP API sends as headers (its message says the delay too).
grpc::Status Refusal(grpc::CallbackServerContext* ctx, const absl::Status& status) {
  if (std::optional<RateLimitState> limited = RateLimitStateOf(status)) {
    for (const auto& [key, value] : RateLimitHeaders(*limited))
      ctx->AddTrailingMetadata(key, value);
  }
  return ToGrpcStatus(status);
}

// A streaming call that fails before it starts.
class ErrorWriteReactor final : public grpc::ServerWriteReactor<GenerateChunk> {
 public:
  explicit ErrorWriteReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

// Coalesces wake-ups: at most one pending Schedule per call. Shared with the wake-up
// function so that the engine thread never holds the last reference to a reactor.
struct WakeState {
  std::atomic<bool> scheduled{false};
};

// Installs the generation's wake-up: engine push → pump.Schedule(target).
template <typename Reactor>
void WireWakeup(const std::shared_ptr<Reactor>& reactor, Generation& generation, StreamPump& pump,
                const std::shared_ptr<WakeState>& wake) {
  std::weak_ptr<Pumpable> weak = reactor;
  generation.SetWakeup([weak, &pump, wake] {
    if (!wake->scheduled.exchange(true)) pump.Schedule(weak);
  });
}

// What the streaming (Generate, Chat) and unary (Complete) reactors share: the Generation,
// its wake-up wiring, self-ownership until OnDone, and cancellation. A subclass implements
// Advance(): decide under mu_, then act outside it.
//
// The reactor owns itself (self_) until OnDone; the pump holds it weakly, so the engine
// thread never holds the last reference.
template <typename GrpcReactor>
class GenerationReactor : public GrpcReactor, public Pumpable {
 public:
  void Pump() final {
    wake_->scheduled.store(false);
    Advance();
  }

  void OnCancel() final {
    generation_->Abort();
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
    }
    Advance();
  }

  void OnDone() final {
    generation_->SetWakeup(nullptr);
    std::shared_ptr<GenerationReactor> keep;
    {
      std::lock_guard<std::mutex> lock(mu_);
      keep = std::move(self_);
    }
    // `keep` may be the last reference: this object is destroyed on return.
  }

 protected:
  explicit GenerationReactor(std::unique_ptr<Generation> generation)
      : generation_(std::move(generation)), wake_(std::make_shared<WakeState>()) {}

  // Second half of construction, once a shared_ptr owns `reactor`: take ownership of
  // itself, install the wake-up, and handle output that arrived before the wake-up existed.
  static GrpcReactor* Launch(std::shared_ptr<GenerationReactor> reactor, StreamPump& pump) {
    reactor->self_ = reactor;
    WireWakeup(reactor, *reactor->generation_, pump, reactor->wake_);
    reactor->Advance();
    return reactor.get();
  }

  virtual void Advance() = 0;

  std::unique_ptr<Generation> generation_;
  std::shared_ptr<WakeState> wake_;
  std::shared_ptr<GenerationReactor> self_;
  std::mutex mu_;
  bool cancelled_ = false;
};

// Generate and Chat: one chunk per delta, one write in flight, usage on the last chunk.
//
//   Advance(): [lock] decide: write next chunk | finish | nothing  [unlock] perform
//   triggers:  pump (engine output), OnWriteDone, OnCancel
class GenerateReactor final : public GenerationReactor<grpc::ServerWriteReactor<GenerateChunk>> {
 public:
  static grpc::ServerWriteReactor<GenerateChunk>* Start(std::unique_ptr<Generation> generation,
                                                        StreamPump& pump) {
    return Launch(std::shared_ptr<GenerateReactor>(new GenerateReactor(std::move(generation))),
                  pump);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      write_in_flight_ = false;
      if (!ok) cancelled_ = true;  // the client is gone
    }
    if (!ok) generation_->Abort();
    Advance();
  }

 private:
  explicit GenerateReactor(std::unique_ptr<Generation> generation)
      : GenerationReactor(std::move(generation)) {}

  void Advance() override {
    enum { kNothing, kWrite, kFinish } action = kNothing;
    grpc::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || write_in_flight_) return;
      if (cancelled_) {
        finished_ = true;
        action = kFinish;
        status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      } else {
        if (pending_.empty()) FillLocked();
        if (!pending_.empty()) {
          current_ = std::move(pending_.front());
          pending_.pop_front();
          write_in_flight_ = true;
          action = kWrite;
        } else if (generation_->done()) {
          finished_ = true;
          action = kFinish;
          status = error_.empty() ? grpc::Status::OK
                                  : grpc::Status(unavailable_ ? grpc::StatusCode::UNAVAILABLE
                                                              : grpc::StatusCode::INTERNAL,
                                                 error_);
        }
      }
    }
    // Initiations run outside the lock: the reactions they cause take it again.
    if (action == kWrite) StartWrite(&current_);
    if (action == kFinish) Finish(std::move(status));
  }

  void FillLocked() {
    deltas_.clear();
    generation_->Poll(milliseconds(0), deltas_);
    for (const ChoiceDelta& d : deltas_) {
      if (d.finish == engine::FinishReason::kError && error_.empty()) {
        error_ = d.error.empty() ? "generation failed" : d.error;
        unavailable_ = d.unavailable;
      }
      ToProto(generation_->id(), d, &pending_.emplace_back());
    }
    if (generation_->done() && !usage_sent_) {
      usage_sent_ = true;
      if (pending_.empty()) pending_.emplace_back().set_request_id(generation_->id());
      ToProto(generation_->usage(), pending_.back().mutable_usage());
    }
  }

  std::deque<GenerateChunk> pending_;
  GenerateChunk current_;  // the message being written; untouched while write_in_flight_
  std::vector<ChoiceDelta> deltas_;
  std::string error_;
  bool unavailable_ = false;  // the error is a stage's failure: UNAVAILABLE
  bool write_in_flight_ = false;
  bool finished_ = false;
  bool usage_sent_ = false;
};

// Complete: collects the generation, then answers once.
class CompleteReactor final : public GenerationReactor<grpc::ServerUnaryReactor> {
 public:
  static grpc::ServerUnaryReactor* Start(std::unique_ptr<Generation> generation, std::string model,
                                         v1::CompleteResponse* response, StreamPump& pump) {
    return Launch(std::shared_ptr<CompleteReactor>(
                      new CompleteReactor(std::move(generation), std::move(model), response)),
                  pump);
  }

 private:
  CompleteReactor(std::unique_ptr<Generation> generation, std::string model,
                  v1::CompleteResponse* response)
      : GenerationReactor(std::move(generation)),
        model_(std::move(model)),
        response_(response),
        acc_(generation_->num_choices()) {}

  void Advance() override {
    grpc::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_) return;
      if (cancelled_) {
        status = grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      } else {
        deltas_.clear();
        generation_->Poll(milliseconds(0), deltas_);
        for (auto& d : deltas_) acc_.Add(std::move(d));
        if (!generation_->done()) return;
        if (const ChoiceResult* failed = acc_.first_error()) {
          status = grpc::Status(
              failed->unavailable ? grpc::StatusCode::UNAVAILABLE : grpc::StatusCode::INTERNAL,
              failed->error.empty() ? "generation failed" : failed->error);
        } else {
          response_->set_request_id(generation_->id());
          response_->set_model(model_);
          for (const auto& c : acc_.results()) ToProto(c, response_->add_choices());
          ToProto(generation_->usage(), response_->mutable_usage());
        }
      }
      finished_ = true;
    }
    Finish(std::move(status));
  }

  std::string model_;
  v1::CompleteResponse* response_;
  ChoiceAccumulator acc_;
  std::vector<ChoiceDelta> deltas_;
  bool finished_ = false;
};

class KvServeService final : public v1::KvServe::CallbackService {
 public:
  KvServeService(Frontend& frontend, StreamPump& pump) : frontend_(frontend), pump_(pump) {}

  grpc::ServerWriteReactor<GenerateChunk>* Generate(grpc::CallbackServerContext* ctx,
                                                    const v1::GenerateRequest* request) override {
    return StartStream(ctx, Streamable(FromProto(*request)));
  }

  grpc::ServerWriteReactor<GenerateChunk>* Chat(grpc::CallbackServerContext* ctx,
                                                const v1::ChatRequest* request) override {
    return StartStream(ctx, Streamable(FromProto(*request)));
  }

  grpc::ServerUnaryReactor* Complete(grpc::CallbackServerContext* ctx,
                                     const v1::GenerateRequest* request,
                                     v1::CompleteResponse* response) override {
    auto generation = StartGeneration(ctx, FromProto(*request));
    if (!generation.ok()) return Done(ctx, Refusal(ctx, generation.status()));
    return CompleteReactor::Start(std::move(*generation), frontend_.options().model_name, response,
                                  pump_);
  }

  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* ctx,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override {
    auto tenant = Admit(ctx);
    if (!tenant.ok()) return Done(ctx, ToGrpcStatus(tenant.status()));
    auto result = frontend_.Tokenize(FromProto(*request));
    if (!result.ok()) return Done(ctx, ToGrpcStatus(result.status()));
    for (int32_t id : result->tokens) response->add_tokens(id);
    response->set_count(static_cast<int32_t>(result->tokens.size()));
    response->set_max_model_len(static_cast<int32_t>(result->max_model_len));
    return Done(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* ctx,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override {
    auto tenant = Admit(ctx);
    if (!tenant.ok()) return Done(ctx, ToGrpcStatus(tenant.status()));
    auto text = frontend_.Detokenize(FromProto(*request));
    if (!text.ok()) return Done(ctx, ToGrpcStatus(text.status()));
    response->set_prompt(*text);
    return Done(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* ctx,
                                       const v1::ListModelsRequest*,
                                       v1::ListModelsResponse* response) override {
    auto tenant = Admit(ctx);
    if (!tenant.ok()) return Done(ctx, ToGrpcStatus(tenant.status()));
    ToProto(frontend_.options(), response, frontend_.VisibleAdapters(*tenant));
    return Done(ctx, grpc::Status::OK);
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* ctx, const v1::AbortRequest* request,
                                  v1::AbortResponse* response) override {
    // Aborting is allowed while draining: it only makes the drain shorter.
    auto tenant = frontend_.Authenticate(Authorization(ctx));
    if (!tenant.ok()) return Done(ctx, ToGrpcStatus(tenant.status()));
    response->set_found(frontend_.Abort(request->request_id(), *tenant));
    return Done(ctx, grpc::Status::OK);
  }

 private:
  absl::StatusOr<const config::TenantConfig*> Admit(grpc::CallbackServerContext* ctx) {
    KVS_ASSIGN_OR_RETURN(const config::TenantConfig* tenant,
                         frontend_.Authenticate(Authorization(ctx)));
    KVS_RETURN_IF_ERROR(frontend_.CheckAccepting());
    return tenant;
  }

  absl::StatusOr<std::unique_ptr<Generation>> StartGeneration(
      grpc::CallbackServerContext* ctx, absl::StatusOr<GenerationRequest> request) {
    KVS_ASSIGN_OR_RETURN(const config::TenantConfig* tenant, Admit(ctx));
    if (!request.ok()) return request.status();
    return frontend_.Generate(*request, tenant);
  }

  // best_of > n knows its samples only at the end: only Complete (unary) takes it.
  static absl::StatusOr<GenerationRequest> Streamable(absl::StatusOr<GenerationRequest> request) {
    if (request.ok() && request->best_of && *request->best_of > request->n) {
      return FieldError("best_of", "cannot be streamed (best_of > n): use Complete");
    }
    return request;
  }

  grpc::ServerWriteReactor<GenerateChunk>* StartStream(grpc::CallbackServerContext* ctx,
                                                       absl::StatusOr<GenerationRequest> request) {
    auto generation = StartGeneration(ctx, std::move(request));
    if (!generation.ok()) return new ErrorWriteReactor(Refusal(ctx, generation.status()));
    return GenerateReactor::Start(std::move(*generation), pump_);
  }

  static grpc::ServerUnaryReactor* Done(grpc::CallbackServerContext* ctx, grpc::Status status) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(std::move(status));
    return reactor;
  }

  Frontend& frontend_;
  StreamPump& pump_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeKvServeService(Frontend& frontend, StreamPump& pump) {
  return std::make_unique<KvServeService>(frontend, pump);
}

}  // namespace kvserve::server
