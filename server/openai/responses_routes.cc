#include "server/openai/responses_routes.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"
#include "server/http/connection_watch.h"
#include "server/http/sse.h"
#include "server/openai/openai_request_parser.h"
#include "server/openai/openai_routes.h"
#include "server/openai/responses_events.h"
#include "server/openai/responses_request.h"
#include "server/openai/sse_liveness.h"
#include "server/openai/wakeup_binding.h"

namespace kvserve::server {
namespace {

using std::chrono::milliseconds;

HttpResponse StatusResponse(const absl::Status& status) {
  return ErrorResponse(ToHttpError(status));
}

HttpResponse JsonResponse(std::string body) {
  HttpResponse r;
  r.body = std::move(body);
  return r;
}

std::string TenantName(const config::TenantConfig* tenant) {
  return tenant == nullptr ? "" : tenant->name;
}

// The id in "/v1/responses/{id}" or "/v1/responses/{id}/cancel".
std::string PathId(const std::string& path) {
  constexpr std::string_view kPrefix = "/v1/responses/";
  std::string_view rest = path;
  if (rest.starts_with(kPrefix)) rest.remove_prefix(kPrefix.size());
  return std::string(rest.substr(0, rest.find('/')));
}

// What a finished response leaves in the store (when the request asked for it).
struct StorePlan {
  ResponseStore* store = nullptr;  // null: do not store
  std::string tenant;
  std::string conversation_json;  // the request's conversation, without instructions
};

void Store(const StorePlan& plan, const std::string& id, const ResponsesEventWriter& writer,
           std::string response_json) {
  if (plan.store == nullptr) return;
  nlohmann::json conversation = nlohmann::json::parse(plan.conversation_json, nullptr, false);
  nlohmann::json output = nlohmann::json::parse(writer.AssistantMessagesJson(), nullptr, false);
  if (!conversation.is_array() || !output.is_array()) return;
  for (auto& m : output) conversation.push_back(std::move(m));
  plan.store->Put(id, {std::move(response_json),
                       conversation.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                       plan.tenant});
}

// One streaming response: Responses events over SSE. Only the connection's thread calls
// Next(). Waits, keep-alives and liveness probes as the chat stream (sse_liveness.h), with
// the same intervals.
class ResponsesSseStream {
 public:
  ResponsesSseStream(std::unique_ptr<Generation> generation, std::optional<int> socket_fd,
                     ResponseHeader header, StorePlan plan, const ResponsesRoutesOptions& options)
      : liveness_(std::move(generation), socket_fd, options.sse, *options.clock),
        writer_(header),
        id_(header.id),
        plan_(std::move(plan)) {}

  StreamStep Next(std::string& out) {
    if (finished_) return StreamStep::kDone;
    Generation& generation = liveness_.generation();
    if (!started_) {
      started_ = true;
      writer_.Start(out);
    }
    if (!liveness_.PollOrWait(out, /*deadline_ns=*/0, deltas_)) return StreamStep::kCancel;
    for (const ChoiceDelta& d : deltas_) {
      if (d.finish == engine::FinishReason::kError) {
        writer_.Fail(d.error.empty() ? "generation failed" : d.error, &out);
        generation.Abort();
        finished_ = true;
        return StreamStep::kDone;
      }
      writer_.Add(d, &out);
    }
    if (generation.done()) {
      Store(plan_, id_, writer_, writer_.Finish(generation.usage(), &out));
      finished_ = true;
      return StreamStep::kDone;
    }
    liveness_.KeepAlive(out);
    return StreamStep::kMore;
  }

  // The response is over (SseLiveness::End).
  void End(bool completed) { liveness_.End(completed); }

 private:
  SseLiveness liveness_;  // owns the generation
  ResponsesEventWriter writer_;
  const std::string id_;
  const StorePlan plan_;
  std::vector<ChoiceDelta> deltas_;
  bool started_ = false;
  bool finished_ = false;
};

class ResponsesRoutes {
 public:
  ResponsesRoutes(Frontend& frontend, ResponsesRoutesOptions options)
      : frontend_(frontend), options_(std::move(options)), store_(options_.store, options_.clock) {
    KVS_CHECK(options_.clock != nullptr && options_.wall_clock != nullptr, "clocks are required");
  }

  static void Register(HttpServer& http, std::shared_ptr<ResponsesRoutes> self) {
    http.Post("/v1/responses", [self](const HttpRequest& r) { return self->Create(r); });
    constexpr char kId[] = "/v1/responses/([A-Za-z0-9_.:-]+)";
    http.Route("GET", kId, "/v1/responses/{id}",
               [self](const HttpRequest& r) { return self->Retrieve(r); });
    http.Route("DELETE", kId, "/v1/responses/{id}",
               [self](const HttpRequest& r) { return self->Delete(r); });
    http.Route("POST", absl::StrCat(kId, "/cancel"), "/v1/responses/{id}/cancel",
               [self](const HttpRequest& r) { return self->Cancel(r); });
  }

 private:
  absl::StatusOr<const config::TenantConfig*> Admit(const HttpRequest& req) {
    KVS_ASSIGN_OR_RETURN(const config::TenantConfig* tenant,
                         frontend_.Authenticate(req.header("Authorization")));
    KVS_RETURN_IF_ERROR(frontend_.CheckAccepting());
    return tenant;
  }

  // The caller's stored response, or a 404 (another tenant's reads as absent).
  absl::StatusOr<StoredResponse> Find(const std::string& id, const config::TenantConfig* tenant) {
    std::optional<StoredResponse> s = store_.Get(id);
    if (!s || s->tenant != TenantName(tenant)) {
      return absl::NotFoundError(absl::StrCat("no stored response '", id,
                                              "' (never stored, deleted, or expired after ",
                                              store_.options().ttl_ns / 1'000'000'000, " s)"));
    }
    return *s;
  }

  HttpResponse Create(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    const std::string tenant_name = TenantName(*tenant);
    ConversationLookup lookup;
    if (store_.enabled()) {
      lookup = [&](const std::string& id) -> std::optional<std::string> {
        std::optional<StoredResponse> s = store_.Get(id);
        if (!s || s->tenant != tenant_name) return std::nullopt;
        return s->messages_json;
      };
    }
    auto parsed = ParseResponsesRequest(req.body, lookup);
    if (!parsed.ok()) return StatusResponse(parsed.status());
    if (parsed->store_requested && !store_.enabled()) {
      return StatusResponse(FieldError(
          "store", "the response store is off (server.responses_store_max_entries is 0)"));
    }
    auto chat = ParseChatRequest(parsed->chat_body);
    if (!chat.ok()) return StatusResponse(ToResponsesError(chat.status()));
    auto generation = frontend_.Generate(chat->request, *tenant);
    if (!generation.ok()) return StatusResponse(ToResponsesError(generation.status()));

    ResponseHeader header{
        absl::StrCat("resp_", absl::StripPrefix((*generation)->id(), "chatcmpl-")),
        options_.wall_clock->now_ns() / 1'000'000'000, frontend_.options().model_name,
        parsed->echo_json};
    StorePlan plan;
    if (parsed->store && store_.enabled()) plan = {&store_, tenant_name, parsed->conversation_json};
    const RateLimitState rate_limit = (*generation)->rate_limit();
    const std::optional<int> socket_fd =
        options_.watch_connections && req.find_socket ? req.find_socket() : std::nullopt;

    HttpResponse r;
    r.headers.emplace_back("X-Request-Id", header.id);
    for (auto& h : RateLimitHeaders(rate_limit)) r.headers.push_back(std::move(h));
    if (parsed->stream) {
      auto stream = std::make_shared<ResponsesSseStream>(
          std::move(*generation), socket_fd, std::move(header), std::move(plan), options_);
      r.content_type = "text/event-stream";
      r.headers.emplace_back("Cache-Control", "no-cache");
      r.next_chunk = [stream](std::string& out) { return stream->Next(out); };
      r.on_stream_end = [stream](bool completed) { stream->End(completed); };
      return r;
    }

    Generation& gen = **generation;
    ResponsesEventWriter writer(header);
    std::vector<ChoiceDelta> deltas;
    ConnectionWaiter waiter(socket_fd);
    WakeupBinding binding(gen, waiter);
    for (;;) {
      deltas.clear();
      gen.Poll(milliseconds(0), deltas);
      for (const ChoiceDelta& d : deltas) {
        if (d.finish == engine::FinishReason::kError) {
          gen.Abort();
          return ErrorResponse(MakeHttpError(500, d.error.empty() ? "generation failed" : d.error));
        }
        writer.Add(d, nullptr);
      }
      if (gen.done()) break;
      if (deltas.empty() &&
          waiter.Wait(milliseconds(1000)) == ConnectionWaiter::Wake::kPeerClosed) {
        gen.Abort();
        return ErrorResponse(MakeHttpError(499, "client closed the connection"));
      }
    }
    r.body = writer.Finish(gen.usage(), nullptr);
    Store(plan, header.id, writer, r.body);
    return r;
  }

  HttpResponse Retrieve(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    auto s = Find(PathId(req.path), *tenant);
    if (!s.ok()) return StatusResponse(s.status());
    return JsonResponse(std::move(s->response_json));
  }

  HttpResponse Delete(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    const std::string id = PathId(req.path);
    auto s = Find(id, *tenant);
    if (!s.ok()) return StatusResponse(s.status());
    store_.Erase(id);
    nlohmann::json j = {{"id", id}, {"object", "response.deleted"}, {"deleted", true}};
    return JsonResponse(j.dump());
  }

  HttpResponse Cancel(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    const std::string id = PathId(req.path);
    auto s = Find(id, *tenant);
    if (!s.ok()) return StatusResponse(s.status());
    return ErrorResponse(MakeHttpError(
        400, absl::StrCat(
                 "response '", id,
                 "' cannot be cancelled: only background responses can be, and background is not "
                 "implemented (a stored response has already finished)")));
  }

  Frontend& frontend_;
  const ResponsesRoutesOptions options_;
  ResponseStore store_;
};

}  // namespace

void RegisterResponsesRoutes(HttpServer& http, Frontend& frontend, ResponsesRoutesOptions options) {
  ResponsesRoutes::Register(http, std::make_shared<ResponsesRoutes>(frontend, std::move(options)));
}

}  // namespace kvserve::server
