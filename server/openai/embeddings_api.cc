#include "server/openai/embeddings_api.h"

#include <cmath>
#include <cstring>

#include "absl/strings/escaping.h"
#include "base/check.h"
#include "server/errors/error_mapping.h"
#include "server/openai/openai_json_fields.h"

namespace kvserve::server {

using json = OpenAiJson;

absl::StatusOr<EmbeddingsRequest> ParseEmbeddingsRequest(std::string_view body,
                                                         const config::EmbeddingConfig& config) {
  KVS_ASSIGN_OR_RETURN(json j, ParseObject(body));
  EmbeddingsRequest out;
  GenerationRequest& r = out.request;
  r.kind = RequestKind::kCompletion;
  const json* input = Member(j, "input");
  if (input == nullptr) return FieldError("input", "is required");
  if (input->is_string()) {
    r.prompts.push_back(PromptInput{input->get<std::string>(), {}, false});
  } else if (input->is_array() && !input->empty() && (*input)[0].is_number_integer()) {
    KVS_ASSIGN_OR_RETURN(auto ids, AsTokenIds(*input, "input"));
    r.prompts.push_back(PromptInput{{}, std::move(ids), true});
  } else if (input->is_array() && !input->empty()) {
    for (const json& e : *input) {
      if (e.is_string()) {
        r.prompts.push_back(PromptInput{e.get<std::string>(), {}, false});
      } else if (e.is_array()) {
        KVS_ASSIGN_OR_RETURN(auto ids, AsTokenIds(e, "input"));
        r.prompts.push_back(PromptInput{{}, std::move(ids), true});
      } else {
        return TypeError("input", "a string, an array of strings or token ids", e);
      }
    }
  } else {
    return TypeError("input", "a non-empty string, array of strings or token ids", *input);
  }
  for (const PromptInput& p : r.prompts) {
    if (p.is_token_ids ? p.token_ids.empty() : p.text.empty())
      return FieldError("input", "must not contain an empty input");
  }
  if (const json* dims = Member(j, "dimensions"); dims != nullptr && !dims->is_null()) {
    return FieldError("dimensions", "is not supported: the embedding has the model's hidden size");
  }
  KVS_ASSIGN_OR_RETURN(auto format, GetString(j, "encoding_format"));
  if (format && *format != "float" && *format != "base64") {
    return FieldError("encoding_format", "must be \"float\" or \"base64\"");
  }
  out.base64 = format && *format == "base64";
  KVS_ASSIGN_OR_RETURN(auto model, GetString(j, "model"));
  if (model) r.model = *model;
  KVS_ASSIGN_OR_RETURN(auto user, GetString(j, "user"));  // accepted, unused
  (void)user;
  for (const auto& [key, value] : j.items()) {
    if (key != "input" && key != "model" && key != "encoding_format" && key != "dimensions" &&
        key != "user") {
      return FieldError(key, "is not an /v1/embeddings member");
    }
  }
  r.max_tokens = 1;  // the token sampled after the prefill is discarded
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  r.sampling.embed = config.pooling == config::EmbeddingPooling::kMean ? scheduler::Pooling::kMean
                                                                       : scheduler::Pooling::kLast;
  return out;
}

std::string EmbeddingsResponseJson(const std::string& model,
                                   const std::vector<ChoiceResult>& choices,
                                   const UsageSummary& usage, bool base64, bool normalize) {
  json data = json::array();
  for (const ChoiceResult& c : choices) {
    std::vector<float> v = c.embedding;
    if (normalize) {
      double sq = 0.0;
      for (float x : v) sq += static_cast<double>(x) * x;
      const double norm = std::sqrt(sq);
      if (norm > 0.0) {
        for (float& x : v) x = static_cast<float>(x / norm);
      }
    }
    json item = {{"object", "embedding"}, {"index", c.index}};
    if (base64) {
      // OpenAI's base64 encoding: the float32 array's bytes (little-endian hosts only, as ours).
      std::string bytes(v.size() * sizeof(float), '\0');
      if (!v.empty()) std::memcpy(bytes.data(), v.data(), bytes.size());
      item["embedding"] = absl::Base64Escape(bytes);
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  json j = {
      {"object", "list"},
      {"data", std::move(data)},
      {"model", model},
      {"usage", {{"prompt_tokens", usage.prompt_tokens}, {"total_tokens", usage.prompt_tokens}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvserve::server
