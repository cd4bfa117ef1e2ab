#include "server/core/frontend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "server/core/tool_choice_grammar.h"
#include "server/errors/error_mapping.h"

namespace kvserve::server {

Frontend::Frontend(engine::EngineClient& engine, const TextCodec& codec, Authenticator auth,
                   FrontendOptions options, base::Logger logger, std::unique_ptr<TenantRateLimiter> limiter)
    : engine_(engine),
      codec_(codec),
      auth_(std::move(auth)),
      options_(std::move(options)),
      logger_(std::move(logger)),
      ids_(options_.id_seed),
      limiter_(std::move(limiter)) {
  if (auto trie = codec_.token_trie()) grammars_ = std::make_unique<structured::GrammarCache>(std::move(trie));
}

namespace {

// A grammar compile error: the message starts with the precise path ("<field>...: why"), which
// becomes the error's `param`.
absl::Status GrammarError(const structured::GrammarSpec& spec, const absl::Status& status) {
  const std::string_view msg = base::AsStd(status.message());
  const size_t colon = msg.find(": ");
  if (msg.starts_with(spec.field) && colon != std::string_view::npos) {
    return FieldError(msg.substr(0, colon), msg.substr(colon + 2));
  }
  return FieldError(spec.field, msg);
}

}  // namespace

absl::StatusOr<const config::TenantConfig*> Frontend::Authenticate(
    std::string_view authorization) const {
  return auth_.Authenticate(authorization);
}

absl::Status Frontend::CheckAccepting() const {
  if (draining()) return absl::UnavailableError("the server is shutting down; not accepting new requests");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Generation>> Frontend::Generate(const GenerationRequest& request,
                                                               const config::TenantConfig* tenant) {
  KVS_RETURN_IF_ERROR(CheckAccepting());
  const std::string tenant_name = tenant == nullptr ? std::string() : tenant->name;
  std::string id = request.caller_request_id;
  if (id.empty()) id = ids_.Next(request.kind == RequestKind::kChat ? "chatcmpl-" : "cmpl-");

  const chat::ChatFormats& formats = options_.chat_formats;
  if (request.kind == RequestKind::kChat && request.chat.tool_choice == ToolChoice::kAuto &&
      formats.tools == chat::ToolCallFormat::kNone) {
    return FieldError("tool_choice",
                      "\"auto\" needs the model's tool-call format, and none was detected in its chat template; "
                      "set model.tool_call_parser (hermes|llama3_json|mistral) or send tool_choice \"none\"");
  }
  // The output's grammar: a structured output, or what a named / "required" tool_choice needs.
  KVS_ASSIGN_OR_RETURN(std::optional<structured::GrammarSpec> spec, ToolChoiceGrammar(request, formats.tools));
  if (!spec) spec = request.grammar;
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  if (spec) {
    if (grammars_ == nullptr) {
      return FieldError(spec->field, "structured outputs need the tokenizer's vocabulary, which this "
                                     "server's codec does not provide");
    }
    auto compiled = grammars_->Get(*spec);
    if (!compiled.ok()) return GrammarError(*spec, compiled.status());
    grammar = *std::move(compiled);
  }
  KVS_ASSIGN_OR_RETURN(
      std::vector<PreparedPrompt> prepared,
      BuildRequests(request, tenant, codec_,
                    {options_.model_name, options_.max_model_len, options_.limits,
                     engine_.serves_adapters()
                         ? std::function<bool(const std::string&)>(
                               [this](const std::string& name) { return engine_.HasAdapter(name); })
                         : nullptr},
                    id));

  // Rate limits, once the input tokens are known (the prompts are shared by the n samples:
  // counted once each, as usage.prompt_tokens counts them).
  int64_t input_tokens = 0;
  for (const PreparedPrompt& p : prepared) input_tokens += static_cast<int64_t>(p.spec.prompt_tokens.size());
  RateLimitState rate_limit;
  if (limiter_ != nullptr) {
    auto admitted = limiter_->Admit(tenant, input_tokens, request.kind == RequestKind::kChat ? "messages" : "prompt");
    if (!admitted.ok()) {
      logger_.req_info(id, "rejected: %s", admitted.status().ToString());
      return admitted.status();
    }
    rate_limit = *admitted;
  }
  // Until the generation exists, a failure gives the admission back.
  auto release = [&] {
    if (limiter_ != nullptr) limiter_->Release(tenant, input_tokens);
  };

  std::optional<RequestRegistry::Registration> registration = registry_.Add(id, tenant_name);
  if (!registration) {
    release();
    return FieldError("request_id", absl::StrCat("'", id, "' is already in use"));
  }

  for (PreparedPrompt& p : prepared) p.spec.sampling.grammar = grammar;
  std::vector<std::unique_ptr<StreamConsumer>> parts;
  const bool logprobs = request.return_logprobs;
  for (size_t i = 0; i < prepared.size(); ++i) {
    PreparedPrompt& p = prepared[i];
    StreamConsumer::Options opts;
    opts.engine_request_id = p.spec.request_id;
    opts.n = p.spec.n;  // samples run (best_of)
    opts.choices = static_cast<int>(request.n);
    opts.first_choice_index = static_cast<int>(i * request.n);
    opts.stop = request.stop;
    opts.include_stop_str = request.include_stop_str_in_output;
    opts.min_tokens = static_cast<int>(request.min_tokens);
    opts.logprobs = logprobs;
    opts.top_logprobs = request.sampling.logprobs;
    opts.skip_special_tokens = request.skip_special_tokens;
    opts.echo_text = std::move(p.echo_text);
    opts.echo_logprobs = request.echo && logprobs;
    opts.prompt_logprobs = static_cast<int>(request.prompt_logprobs.value_or(-1));
    opts.prompt_ids = p.spec.prompt_tokens;
    opts.at_text_start = request.kind == RequestKind::kChat;
    const bool named_tool = request.chat.tool_choice == ToolChoice::kNamed;
    const bool required_tool = request.chat.tool_choice == ToolChoice::kRequired;
    if (request.kind == RequestKind::kChat &&
        (formats.reasoning || request.chat.tool_choice == ToolChoice::kAuto || named_tool || required_tool)) {
      chat::ChatOutputConfig out;
      out.split_reasoning = formats.reasoning;
      out.markers = formats.markers;
      out.starts_in_reasoning =
          formats.reasoning && chat::ReasoningSplitter::PromptOpensReasoning(p.chat_prompt_text, formats.markers);
      out.tools = request.chat.tool_choice == ToolChoice::kAuto ? formats.tools : chat::ToolCallFormat::kNone;
      out.call_id_prefix = absl::StrCat("call_", absl::StripPrefix(id, "chatcmpl-"), "_");
      out.max_tool_calls = request.chat.parallel_tool_calls ? 0 : 1;
      if (named_tool) {
        // The grammar makes the whole output the function's arguments (vLLM does the same).
        out.split_reasoning = false;
        out.tools = chat::ToolCallFormat::kNone;
        out.forced_tool_name = request.chat.tool_choice_name;
      }
      if (required_tool) {
        // The grammar makes the whole output tool calls in the model's format, from the first
        // token (no reasoning block first).
        out.split_reasoning = false;
        out.tools = formats.tools;
      }
      opts.chat_output = std::move(out);
      opts.include_reasoning = request.chat.include_reasoning;
    }
    const std::string adapter = p.spec.lora;
    auto stream = engine_.Submit(std::move(p.spec));
    // The adapter was unloaded after the check: the same 404 as an unknown model.
    if (!stream.ok() && !adapter.empty() && absl::IsNotFound(stream.status())) {
      stream = ModelNotFound(adapter);
    }
    if (!stream.ok()) {
      for (auto& part : parts) part->Abort();
      logger_.req_info(id, "rejected: %s", stream.status().ToString());
      // Parts already submitted ran (and are aborted): the admission stands unless none did.
      if (parts.empty()) release();
      return stream.status();
    }
    parts.push_back(std::make_unique<StreamConsumer>(codec_, engine_, std::move(*stream), std::move(opts)));
  }
  if (logger_.enabled(base::LogLevel::kDebug)) {
    logger_.log(base::LogLevel::kDebug, id,
                absl::StrCat("accepted tenant=", tenant_name.empty() ? "-" : tenant_name,
                             " prompts=", parts.size(), " n=", request.n));
  }
  const int num_choices = static_cast<int>(parts.size() * request.n);
  auto generation = std::make_unique<Generation>(std::move(id), num_choices, std::move(parts), engine_,
                                                 std::move(*registration));
  generation->set_rate_limit(rate_limit);
  if (limiter_ != nullptr && rate_limit.tokens.limit > 0) {
    // The limiter outlives every generation (as the registry does: both belong to this object).
    generation->set_on_end([limiter = limiter_.get(), tenant](const UsageSummary& usage) {
      limiter->Reconcile(tenant, usage.completion_tokens);
    });
  }
  return generation;
}

absl::StatusOr<TokenizeResult> Frontend::Tokenize(const TokenizeRequest& request) const {
  KVS_RETURN_IF_ERROR(CheckAccepting());
  KVS_RETURN_IF_ERROR(CheckModel(request.model, options_.model_name));
  TokenizeResult result;
  if (request.use_messages) {
    if (request.messages.empty()) return FieldError("messages", "must contain at least one message");
    KVS_ASSIGN_OR_RETURN(ChatPrompt prompt, codec_.EncodeChat(request.messages, request.chat));
    result.tokens = std::move(prompt.ids);
  } else {
    KVS_ASSIGN_OR_RETURN(result.tokens, codec_.Encode(request.prompt, request.add_special_tokens));
  }
  if (request.return_token_strs) {
    for (int32_t id : result.tokens) result.token_strs.push_back(codec_.TokenText(id));
  }
  result.max_model_len = options_.max_model_len;
  return result;
}

absl::StatusOr<std::string> Frontend::Detokenize(const DetokenizeRequest& request) const {
  KVS_RETURN_IF_ERROR(CheckAccepting());
  KVS_RETURN_IF_ERROR(CheckModel(request.model, options_.model_name));
  for (int32_t id : request.tokens) {
    if (id < 0 || id >= codec_.vocab_size()) {
      return FieldError("tokens", absl::StrCat("token id ", id, " is outside the vocabulary [0, ",
                                               codec_.vocab_size(), ")"));
    }
  }
  return codec_.Decode(request.tokens, /*skip_special_tokens=*/false);
}

bool Frontend::Abort(std::string_view request_id, const config::TenantConfig* tenant) {
  return registry_.Abort(request_id, tenant == nullptr ? std::string_view() : std::string_view(tenant->name));
}

std::vector<engine::AdapterCard> Frontend::VisibleAdapters(
    const config::TenantConfig* tenant) const {
  std::vector<engine::AdapterCard> out;
  if (!engine_.serves_adapters()) return out;
  for (engine::AdapterCard& a : engine_.ListAdapters()) {
    if (tenant != nullptr && !tenant->adapters.empty() &&
        std::find(tenant->adapters.begin(), tenant->adapters.end(), a.name) ==
            tenant->adapters.end()) {
      continue;
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace kvserve::server
