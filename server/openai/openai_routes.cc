#include "server/openai/openai_routes.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/core/generation_output.h"
#include "server/http/connection_watch.h"
#include "server/http/sse.h"
#include "server/openai/embeddings_api.h"
#include "server/openai/openai_request_parser.h"
#include "server/openai/openai_response_writer.h"
#include "server/openai/sse_liveness.h"
#include "server/openai/wakeup_binding.h"

namespace kvserve::server {
namespace {

using std::chrono::milliseconds;

constexpr std::string_view kSseContentType = "text/event-stream";

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse StatusResponse(const absl::Status& status) {
  return ErrorResponse(ToHttpError(status));
}

int64_t UnixSeconds(const base::Clock& wall) { return wall.now_ns() / 1'000'000'000; }

// Streams one generation as SSE. Lives as long as the HTTP response (shared by the
// content provider and its end callback); only the connection's thread calls Next().
// Waiting, keep-alives and liveness probes: sse_liveness.h.
class SseStream {
 public:
  // `deadline_ns` (options.clock time; 0: none): the request's `timeout`.
  SseStream(std::unique_ptr<Generation> generation, std::optional<int> socket_fd, ResponseMeta meta,
            bool chat, bool logprobs, bool include_usage, bool continuous_usage,
            const OpenAiRoutesOptions& options, base::Nanos deadline_ns)
      : deadline_ns_(deadline_ns),
        liveness_(std::move(generation), socket_fd, options.sse, *options.clock),
        meta_(std::move(meta)),
        chat_(chat),
        logprobs_(logprobs),
        include_usage_(include_usage),
        continuous_usage_(continuous_usage),
        options_(options),
        text_offsets_(liveness_.generation().num_choices(), 0) {}

  StreamStep Next(std::string& out) {
    if (finished_) return StreamStep::kDone;
    Generation& generation = liveness_.generation();
    const bool usage_null = include_usage_ && !continuous_usage_;
    if (!started_) {
      started_ = true;
      if (chat_) {
        for (int i = 0; i < generation.num_choices(); ++i) {
          AppendSseEvent(ChatRoleChunkJson(meta_, i, usage_null), out);
        }
      }
    }
    if (!liveness_.PollOrWait(out, deadline_ns_, deltas_)) return StreamStep::kCancel;
    for (const ChoiceDelta& d : deltas_) {
      if (d.finish == engine::FinishReason::kError) {
        // The status line is long gone: report the failure in-band, as vLLM does.
        AppendSseEvent(ErrorJson(MakeHttpError(d.unavailable ? 503 : 500,
                                               d.error.empty() ? "generation failed" : d.error)),
                       out);
        continue;
      }
      UsageSummary usage;
      if (continuous_usage_) usage = generation.usage();
      const UsageSummary* usage_ptr = continuous_usage_ ? &usage : nullptr;
      if (chat_) {
        AppendSseEvent(ChatChunkJson(meta_, d, logprobs_, usage_ptr, usage_null), out);
      } else {
        int64_t& offset = text_offsets_[d.index];
        AppendSseEvent(CompletionChunkJson(meta_, d, logprobs_, offset, usage_ptr, usage_null),
                       out);
        offset += static_cast<int64_t>(d.text.size());
      }
    }
    if (generation.done()) {
      if (include_usage_) AppendSseEvent(UsageChunkJson(meta_, chat_, generation.usage()), out);
      out.append(kSseDone);
      finished_ = true;
      return StreamStep::kDone;
    }
    if (deadline_ns_ != 0 && options_.clock->now_ns() >= deadline_ns_) {
      // Past the request's `timeout`: what was generated is already out; end in-band.
      generation.Abort();
      AppendSseEvent(
          ErrorJson(MakeHttpError(504, "the request's timeout expired; generation stopped")), out);
      if (include_usage_) AppendSseEvent(UsageChunkJson(meta_, chat_, generation.usage()), out);
      out.append(kSseDone);
      finished_ = true;
      return StreamStep::kDone;
    }
    liveness_.KeepAlive(out);
    return StreamStep::kMore;
  }

  // The response is over (SseLiveness::End).
  void End(bool completed) { liveness_.End(completed); }

 private:
  const base::Nanos deadline_ns_;  // 0: no timeout
  SseLiveness liveness_;           // owns the generation
  ResponseMeta meta_;
  bool chat_;
  bool logprobs_;
  bool include_usage_;
  bool continuous_usage_;
  const OpenAiRoutesOptions& options_;
  std::vector<int64_t> text_offsets_;
  std::vector<ChoiceDelta> deltas_;
  bool started_ = false;
  bool finished_ = false;
};

class Routes {
 public:
  Routes(Frontend& frontend, OpenAiRoutesOptions options)
      : frontend_(frontend), options_(std::move(options)) {
    KVS_CHECK(options_.clock != nullptr && options_.wall_clock != nullptr, "clocks are required");
  }

  // The handlers own the routes object (it lives as long as the server's handlers).
  static void Register(HttpServer& http, std::shared_ptr<Routes> self) {
    http.Post("/v1/completions", [self](const HttpRequest& r) { return self->Generate(r, false); });
    http.Post("/v1/chat/completions",
              [self](const HttpRequest& r) { return self->Generate(r, true); });
    http.Get("/v1/models", [self](const HttpRequest& r) { return self->Models(r); });
    http.Post("/v1/embeddings", [self](const HttpRequest& r) { return self->Embeddings(r); });
    http.Post("/tokenize", [self](const HttpRequest& r) { return self->Tokenize(r); });
    http.Post("/detokenize", [self](const HttpRequest& r) { return self->Detokenize(r); });
    http.Get("/health", [self](const HttpRequest&) { return self->Health(); });
    http.Get("/ready", [self](const HttpRequest&) { return self->Ready(); });
    http.Get("/version", [self](const HttpRequest&) { return self->Version(); });
    http.Get("/metrics", [self](const HttpRequest& r) { return self->Metrics(r); });
  }

 private:
  // Authentication and the drain gate of every guarded route.
  absl::StatusOr<const config::TenantConfig*> Admit(const HttpRequest& req) {
    KVS_ASSIGN_OR_RETURN(const config::TenantConfig* tenant,
                         frontend_.Authenticate(req.header("Authorization")));
    KVS_RETURN_IF_ERROR(frontend_.CheckAccepting());
    return tenant;
  }

  HttpResponse Generate(const HttpRequest& req, bool chat) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    auto parsed = chat ? ParseChatRequest(req.body) : ParseCompletionRequest(req.body);
    if (!parsed.ok()) return StatusResponse(parsed.status());
    auto generation = frontend_.Generate(parsed->request, *tenant);
    if (!generation.ok()) return StatusResponse(generation.status());

    const std::string request_id = (*generation)->id();
    const RateLimitState rate_limit = (*generation)->rate_limit();
    // `model` echoes what was asked for: a LoRA adapter's name (vLLM's and OpenAI's
    // convention), else the served model's (Generate has resolved any other name to a 404).
    const std::string& asked = parsed->request.model;
    ResponseMeta meta{request_id, UnixSeconds(*options_.wall_clock),
                      asked.empty() ? frontend_.options().model_name : asked,
                      parsed->return_token_ids};
    const bool logprobs = parsed->request.return_logprobs;
    const base::Nanos deadline_ns =
        parsed->timeout_seconds
            ? options_.clock->now_ns() + static_cast<base::Nanos>(*parsed->timeout_seconds * 1e9)
            : 0;
    // The connection's socket, to notice a client that hangs up mid-generation.
    const std::optional<int> socket_fd =
        options_.watch_connections && req.find_socket ? req.find_socket() : std::nullopt;
    if (parsed->stream) {
      auto stream = std::make_shared<SseStream>(std::move(*generation), socket_fd, std::move(meta),
                                                chat, logprobs, parsed->include_usage,
                                                parsed->continuous_usage, options_, deadline_ns);
      HttpResponse r;
      r.content_type = std::string(kSseContentType);
      r.headers.emplace_back("Cache-Control", "no-cache");
      r.headers.emplace_back("X-Request-Id", request_id);
      for (auto& h : RateLimitHeaders(rate_limit)) r.headers.push_back(std::move(h));
      r.next_chunk = [stream](std::string& out) { return stream->Next(out); };
      r.on_stream_end = [stream](bool completed) { stream->End(completed); };
      return r;
    }

    Generation& gen = **generation;
    ChoiceAccumulator acc(gen.num_choices());
    std::vector<ChoiceDelta> deltas;
    {
      ConnectionWaiter waiter(socket_fd);
      WakeupBinding binding(gen, waiter);
      for (;;) {
        deltas.clear();
        gen.Poll(milliseconds(0), deltas);
        for (auto& d : deltas) acc.Add(std::move(d));
        if (gen.done()) break;
        milliseconds wait(1000);
        if (deadline_ns != 0) {
          const base::Nanos left = deadline_ns - options_.clock->now_ns();
          if (left <= 0) {
            gen.Abort();
            return ErrorResponse(
                MakeHttpError(504, "the request's timeout expired before the generation ended"));
          }
          wait = std::min(wait,
                          std::chrono::duration_cast<milliseconds>(std::chrono::nanoseconds(left)) +
                              milliseconds(1));
        }
        if (deltas.empty() && waiter.Wait(wait) == ConnectionWaiter::Wake::kPeerClosed) {
          gen.Abort();
          // Nobody reads this; 499 is what proxies log for a client that closed first.
          return ErrorResponse(MakeHttpError(499, "client closed the connection"));
        }
      }
    }
    if (const ChoiceResult* failed = acc.first_error()) {
      return ErrorResponse(MakeHttpError(failed->unavailable ? 503 : 500, failed->error.empty()
                                                                              ? "generation failed"
                                                                              : failed->error));
    }
    const UsageSummary usage = gen.usage();
    HttpResponse r =
        JsonResponse(200, chat ? ChatResponseJson(meta, acc.results(), usage, logprobs)
                               : CompletionResponseJson(meta, acc.results(), usage, logprobs));
    r.headers.emplace_back("X-Request-Id", request_id);
    for (auto& h : RateLimitHeaders(rate_limit)) r.headers.push_back(std::move(h));
    return r;
  }

  // /v1/embeddings (embeddings_api.h): one engine request per input, run to the end.
  HttpResponse Embeddings(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    auto parsed = ParseEmbeddingsRequest(req.body, frontend_.options().embedding);
    if (!parsed.ok()) return StatusResponse(parsed.status());
    auto generation = frontend_.Generate(parsed->request, *tenant);
    if (!generation.ok()) return StatusResponse(generation.status());
    Generation& gen = **generation;
    ChoiceAccumulator acc(gen.num_choices());
    std::vector<ChoiceDelta> deltas;
    while (!gen.done()) {
      deltas.clear();
      gen.Poll(milliseconds(100), deltas);
      for (auto& d : deltas) acc.Add(std::move(d));
    }
    for (const ChoiceResult& c : acc.results()) {
      if (c.finish == engine::FinishReason::kError || c.embedding.empty()) {
        return ErrorResponse(
            MakeHttpError(500, c.error.empty() ? "the embedding was not computed" : c.error));
      }
    }
    HttpResponse r = JsonResponse(
        200, EmbeddingsResponseJson(frontend_.options().model_name, acc.results(), gen.usage(),
                                    parsed->base64, frontend_.options().embedding.normalize));
    r.headers.emplace_back("X-Request-Id", gen.id());
    for (auto& h : RateLimitHeaders(gen.rate_limit())) r.headers.push_back(std::move(h));
    return r;
  }

  HttpResponse Models(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    return JsonResponse(200, ModelsJson(frontend_.options(), frontend_.VisibleAdapters(*tenant)));
  }

  HttpResponse Tokenize(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    auto parsed = ParseTokenizeRequest(req.body);
    if (!parsed.ok()) return StatusResponse(parsed.status());
    auto result = frontend_.Tokenize(*parsed);
    if (!result.ok()) return StatusResponse(result.status());
    return JsonResponse(200, TokenizeResponseJson(*result));
  }

  HttpResponse Detokenize(const HttpRequest& req) {
    auto tenant = Admit(req);
    if (!tenant.ok()) return StatusResponse(tenant.status());
    auto parsed = ParseDetokenizeRequest(req.body);
    if (!parsed.ok()) return StatusResponse(parsed.status());
    auto text = frontend_.Detokenize(*parsed);
    if (!text.ok()) return StatusResponse(text.status());
    return JsonResponse(200, DetokenizeResponseJson(*text));
  }

  // Empty 200 while the engine runs (as vLLM); 503 with a JSON status once it died.
  HttpResponse Health() {
    if (!frontend_.alive()) return JsonResponse(503, R"({"status":"engine stopped"})");
    HttpResponse r;
    r.content_type = "text/plain";
    return r;
  }

  HttpResponse Ready() {
    if (frontend_.ready()) return JsonResponse(200, R"({"status":"ready"})");
    return JsonResponse(
        503, frontend_.draining() ? R"({"status":"draining"})" : R"({"status":"unavailable"})");
  }

  HttpResponse Version() { return JsonResponse(200, VersionJson(frontend_.options().version)); }

  HttpResponse Metrics(const HttpRequest& req) {
    if (options_.metrics_key) {
      if (absl::Status st = options_.metrics_key->Check(req.header("Authorization")); !st.ok()) {
        return StatusResponse(st);
      }
    }
    HttpResponse r;
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (options_.metrics_text) r.body = options_.metrics_text();
    return r;
  }

  Frontend& frontend_;
  const OpenAiRoutesOptions options_;
};

}  // namespace

HttpResponse ErrorResponse(const HttpError& error) {
  HttpResponse r;
  r.status = error.status;
  r.body = ErrorJson(error);
  r.headers = error.headers;
  const bool has_retry = std::any_of(r.headers.begin(), r.headers.end(),
                                     [](const auto& h) { return h.first == "retry-after"; });
  if (error.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  if ((error.status == 429 || error.status == 503) && !has_retry)
    r.headers.emplace_back("Retry-After", "1");
  return r;
}

void RegisterOpenAiRoutes(HttpServer& http, Frontend& frontend, OpenAiRoutesOptions options) {
  Routes::Register(http, std::make_shared<Routes>(frontend, std::move(options)));
}

}  // namespace kvserve::server
