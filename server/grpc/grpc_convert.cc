#include "server/grpc/grpc_convert.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "config/fields.h"
#include "server/errors/error_mapping.h"
#include "server/grpc/grpc_chat_tools.h"

namespace kvserve::server {
namespace {

absl::Status ApplySampling(const v1::SamplingParams& p, GenerationRequest& r) {
  if (p.has_max_tokens()) r.max_tokens = p.max_tokens();
  if (p.has_temperature()) r.sampling.temperature = p.temperature();
  if (p.has_top_p()) r.sampling.top_p = p.top_p();
  if (p.has_top_k()) r.sampling.top_k = p.top_k() < 0 ? 0 : p.top_k();
  if (p.has_min_p()) r.sampling.min_p = p.min_p();
  if (p.has_seed()) r.sampling.seed = p.seed();
  if (p.has_presence_penalty()) r.sampling.presence_penalty = p.presence_penalty();
  if (p.has_frequency_penalty()) r.sampling.frequency_penalty = p.frequency_penalty();
  if (p.has_repetition_penalty()) r.sampling.repetition_penalty = p.repetition_penalty();
  r.stop.assign(p.stop().begin(), p.stop().end());
  r.stop_token_ids.assign(p.stop_token_ids().begin(), p.stop_token_ids().end());
  if (p.has_n()) r.n = p.n();
  if (p.has_logprobs()) {
    r.sampling.logprobs = p.logprobs();
    r.return_logprobs = true;
  }
  r.ignore_eos = p.ignore_eos();
  if (p.has_min_tokens()) r.min_tokens = p.min_tokens();
  r.include_stop_str_in_output = p.include_stop_str_in_output();
  r.sampling.allowed_token_ids.assign(p.allowed_token_ids().begin(), p.allowed_token_ids().end());
  for (const std::string& w : p.bad_words()) {
    if (w.empty()) return FieldError("bad_words", "words must not be empty");
    r.bad_words.push_back(w);
  }
  if (p.has_truncate_prompt_tokens()) r.truncate_prompt_tokens = p.truncate_prompt_tokens();
  if (p.has_best_of()) r.best_of = p.best_of();
  if (p.logit_bias_size() > scheduler::kMaxLogitBias) {
    return FieldError("logit_bias", absl::StrCat("at most ", scheduler::kMaxLogitBias, " entries"));
  }
  for (const auto& [token, bias] : p.logit_bias()) {
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return FieldError("logit_bias", absl::StrCat("biases must be in [-100, 100], got ", bias));
    }
    r.sampling.logit_bias.push_back({token, bias});
  }
  if (p.has_structured()) {
    using Kind = structured::GrammarSpec::Kind;
    const v1::StructuredOutput& so = p.structured();
    switch (so.kind_case()) {
      case v1::StructuredOutput::kJsonSchema:
        r.grammar = structured::GrammarSpec{Kind::kJsonSchema, so.json_schema(), {}, "sampling.structured.json_schema"};
        break;
      case v1::StructuredOutput::kJsonObject:
        if (so.json_object()) r.grammar = structured::GrammarSpec{Kind::kJsonObject, "", {}, "sampling.structured.json_object"};
        break;
      case v1::StructuredOutput::kRegex:
        r.grammar = structured::GrammarSpec{Kind::kRegex, so.regex(), {}, "sampling.structured.regex"};
        break;
      case v1::StructuredOutput::kChoice:
        r.grammar = structured::GrammarSpec{Kind::kChoice, "", {so.choice().choices().begin(), so.choice().choices().end()},
                                            "sampling.structured.choice"};
        break;
      case v1::StructuredOutput::kGrammar:
        r.grammar = structured::GrammarSpec{Kind::kGrammar, so.grammar(), {}, "sampling.structured.grammar"};
        break;
      default:
        break;
    }
  }
  // Proto maps iterate in no fixed order; sorted entries keep requests reproducible.
  std::sort(r.sampling.logit_bias.begin(), r.sampling.logit_bias.end(),
            [](const auto& a, const auto& b) { return a.token < b.token; });
  return absl::OkStatus();
}

// The ranges are checked by the engine (INVALID_ARGUMENT naming speculative.<field>).
absl::Status ApplySpeculative(const v1::Speculative& s, engine::SpeculativeRequest& out) {
  if (s.method() == "none") {
    out.method = config::SpeculativeMethod::kNone;
  } else if (s.method() == "ngram") {
    out.method = config::SpeculativeMethod::kNgram;
  } else if (s.method() == "draft") {
    out.method = config::SpeculativeMethod::kDraft;  // the engine refuses it without a draft model
  } else if (!s.method().empty()) {
    return FieldError("speculative.method",
                      absl::StrCat("unknown method '", s.method(), "'; expected none|ngram|draft"));
  }
  if (s.has_num_tokens()) out.num_tokens = s.num_tokens();
  if (s.has_ngram_min()) out.ngram_min = s.ngram_min();
  if (s.has_ngram_max()) out.ngram_max = s.ngram_max();
  return absl::OkStatus();
}

absl::Status ApplyCompression(const v1::KvCompression& c, engine::CompressionRequest& out) {
  if (!c.policy().empty()) {
    auto policy = config::ParseCompressionPolicy(c.policy());
    if (!policy) {
      return FieldError("kv_compression.policy",
                        absl::StrCat("unknown policy '", c.policy(),
                                     "'; expected full|triattention|streamingllm|snapkv|h2o|auto"));
    }
    out.policy = *policy;
  }
  if (c.has_budget()) out.budget = c.budget();
  if (c.has_ratio()) out.ratio = c.ratio();
  if (c.has_divide_length()) out.divide_length = c.divide_length();
  if (c.has_window()) out.window = c.window();
  if (c.has_sinks()) out.sinks = c.sinks();
  if (c.has_protect_prompt()) out.protect_prompt = c.protect_prompt();
  out.audit = c.audit();
  auto dtype = [](const std::string& name, const char* field) -> absl::StatusOr<config::KvDtype> {
    auto d = config::ParseKvDtype(name);
    if (!d) {
      return FieldError(field, absl::StrCat("unknown KV dtype '", name, "'; expected fp32|fp16|bf16|fp8_e4m3|int8|int4"));
    }
    return *d;
  };
  if (!c.kv_dtype().empty()) {
    KVS_ASSIGN_OR_RETURN(out.k_dtype, dtype(c.kv_dtype(), "kv_compression.kv_dtype"));
    out.v_dtype = out.k_dtype;
  }
  if (!c.k_dtype().empty()) {
    KVS_ASSIGN_OR_RETURN(out.k_dtype, dtype(c.k_dtype(), "kv_compression.k_dtype"));
  }
  if (!c.v_dtype().empty()) {
    KVS_ASSIGN_OR_RETURN(out.v_dtype, dtype(c.v_dtype(), "kv_compression.v_dtype"));
  }
  // Sorted by name so that errors and the resolved order do not depend on map iteration.
  std::vector<std::pair<std::string, int64_t>> demote(c.demote().begin(), c.demote().end());
  std::sort(demote.begin(), demote.end());
  for (const auto& [name, tokens] : demote) {
    const std::string field = absl::StrCat("kv_compression.demote.", name);
    if (tokens < 0 || tokens > INT32_MAX) return FieldError(field, "must be a token count in [0, 2^31)");
    if (name == "lowrank") {  // the low-rank key tier (cache.lowrank_key_rank)
      out.demote_lowrank = tokens;
      continue;
    }
    KVS_ASSIGN_OR_RETURN(config::KvDtype d, dtype(name, field.c_str()));
    out.demote.emplace_back(d, tokens);
  }
  return absl::OkStatus();
}

// proto3 strings must be UTF-8, but one token can be a fragment of a character: every
// byte that does not belong to a well-formed sequence becomes U+FFFD.
std::string SanitizeUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = len > 0 && i + len <= s.size() && !(len == 2 && c < 0xC2) && !(len == 4 && c > 0xF4);
    for (size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && len == 3) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
    }
    if (ok && len == 4) {
      const unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
    }
    if (ok) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

void ToProto(const LogprobEntry& e, v1::TokenLogprob* out) {
  out->set_token_id(e.token_id);
  out->set_token(SanitizeUtf8(e.token));
  out->set_logprob(e.logprob);
  for (const auto& t : e.top) {
    v1::TopLogprob* top = out->add_top();
    top->set_token_id(t.token_id);
    top->set_token(SanitizeUtf8(t.token));
    top->set_logprob(t.logprob);
  }
}

// "tool_calls" when a chat sample ended by itself after calling tools (as the HTTP API says).
std::string FinishName(engine::FinishReason r, bool called_tools) {
  if (called_tools && r == engine::FinishReason::kStop) return "tool_calls";
  return std::string(engine::Name(r));
}

}  // namespace

absl::StatusOr<GenerationRequest> FromProto(const v1::GenerateRequest& request) {
  GenerationRequest r;
  r.kind = RequestKind::kCompletion;
  r.model = request.model();
  switch (request.prompt_kind_case()) {
    case v1::GenerateRequest::kPrompt:
      r.prompts.push_back(PromptInput{request.prompt(), {}, false});
      break;
    case v1::GenerateRequest::kPromptTokenIds:
      r.prompts.push_back(PromptInput{{}, {request.prompt_token_ids().ids().begin(),
                                           request.prompt_token_ids().ids().end()}, true});
      break;
    default: return FieldError("prompt", "is required (prompt or prompt_token_ids)");
  }
  KVS_RETURN_IF_ERROR(ApplySampling(request.sampling(), r));
  KVS_RETURN_IF_ERROR(ApplyCompression(request.kv_compression(), r.compression));
  KVS_RETURN_IF_ERROR(ApplySpeculative(request.speculative(), r.speculative));
  if (request.priority() != 0) r.priority = request.priority();
  r.cache_salt = request.cache_salt();
  r.caller_request_id = request.request_id();
  return r;
}

absl::StatusOr<GenerationRequest> FromProto(const v1::ChatRequest& request) {
  GenerationRequest r;
  r.kind = RequestKind::kChat;
  r.model = request.model();
  KVS_RETURN_IF_ERROR(ApplyChatTools(request, r));  // messages, tools, tool_choice
  KVS_RETURN_IF_ERROR(ApplySampling(request.sampling(), r));
  KVS_RETURN_IF_ERROR(ApplyCompression(request.kv_compression(), r.compression));
  KVS_RETURN_IF_ERROR(ApplySpeculative(request.speculative(), r.speculative));
  if (request.priority() != 0) r.priority = request.priority();
  r.cache_salt = request.cache_salt();
  r.caller_request_id = request.request_id();
  return r;
}

TokenizeRequest FromProto(const v1::TokenizeRequest& request) {
  TokenizeRequest r;
  r.model = request.model();
  if (request.input_case() == v1::TokenizeRequest::kMessages) {
    r.use_messages = true;
    for (const auto& m : request.messages().messages()) {
      r.messages.emplace_back(m.role(), m.content());
    }
  } else {
    r.prompt = request.prompt();
  }
  if (request.has_add_special_tokens()) r.add_special_tokens = request.add_special_tokens();
  return r;
}

DetokenizeRequest FromProto(const v1::DetokenizeRequest& request) {
  DetokenizeRequest r;
  r.model = request.model();
  r.tokens.assign(request.tokens().begin(), request.tokens().end());
  return r;
}

void ToProto(const std::string& request_id, const ChoiceDelta& d, v1::GenerateChunk* chunk) {
  chunk->set_request_id(request_id);
  chunk->set_index(d.index);
  chunk->set_text(d.text);
  if (!d.reasoning.empty()) chunk->set_reasoning(d.reasoning);
  for (int32_t id : d.token_ids) chunk->add_token_ids(id);
  for (const auto& lp : d.logprobs) ToProto(lp, chunk->add_logprobs());
  ToProto(d.tool_calls, chunk->mutable_tool_calls());
  if (d.finish) chunk->set_finish_reason(FinishName(*d.finish, !d.tool_calls.empty()));
}

void ToProto(const UsageSummary& u, v1::Usage* out) {
  out->set_prompt_tokens(u.prompt_tokens);
  out->set_completion_tokens(u.completion_tokens);
  out->set_total_tokens(u.total_tokens());
  out->set_cached_prompt_tokens(u.cached_prompt_tokens);
  out->set_speculative_draft_tokens(u.spec_draft_tokens);
  out->set_speculative_accepted_tokens(u.spec_accepted_tokens);
  v1::CompressionSummary* c = out->mutable_kv_compression();
  c->set_policy(u.compression.policy);
  c->set_budget(u.compression.budget);
  c->set_rounds(u.compression.rounds);
  c->set_evicted_tokens(u.compression.evicted_tokens);
  c->set_evicted_prompt_tokens(u.compression.evicted_prompt_tokens);
  c->set_peak_kv_tokens(u.compression.peak_kv_tokens);
  c->set_compression_ratio(u.compression.compression_ratio);
  c->set_demoted_tokens(u.compression.demoted_tokens);
  c->set_peak_kv_bytes(u.compression.peak_kv_bytes);
  c->set_kv_bytes_per_token(u.compression.kv_bytes_per_token);
  c->set_compressed_layers(u.compression.compressed_layers);
  for (const auto& r : u.compression.audit) {
    v1::EvictionRound* round = c->add_audit();
    round->set_round(r.round);
    round->set_at_token(r.at_token);
    for (int64_t p : r.positions) round->add_positions(p);
    round->set_token_ids_hash(r.token_ids_hash);
  }
}

void ToProto(const ChoiceResult& result, v1::Completion* out) {
  out->set_index(result.index);
  out->set_text(result.text);
  if (!result.reasoning.empty()) out->set_reasoning(result.reasoning);
  for (int32_t id : result.token_ids) out->add_token_ids(id);
  ToProto(result.tool_calls, out->mutable_tool_calls());
  out->set_finish_reason(FinishName(result.finish, !result.tool_calls.empty()));
  for (const auto& lp : result.logprobs) ToProto(lp, out->add_logprobs());
}

void ToProto(const FrontendOptions& options, v1::ListModelsResponse* out,
             const std::vector<engine::AdapterCard>& adapters) {
  v1::ModelCard* card = out->add_models();
  card->set_id(options.model_name);
  card->set_created(options.created_unix);
  card->set_owned_by("kvserve");
  card->set_max_model_len(static_cast<int32_t>(options.max_model_len));
  card->set_root(options.model_name);
  for (const engine::AdapterCard& a : adapters) {
    v1::ModelCard* c = out->add_models();
    c->set_id(a.name);
    c->set_created(options.created_unix);
    c->set_owned_by("kvserve");
    c->set_max_model_len(static_cast<int32_t>(options.max_model_len));
    c->set_parent(options.model_name);
    c->set_root(a.path);
  }
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(ToGrpcCode(status)), std::string(status.message()));
}

}  // namespace kvserve::server
