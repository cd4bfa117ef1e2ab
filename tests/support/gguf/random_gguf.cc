#include "tests/support/gguf/random_gguf.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "gguf/gguf_writer.h"
#include "model/gguf_export.h"
#include "model/model_config.h"
#include "quant/block_type.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/gguf_vocab_io.h"
#include "tokenizer/tokenizer_config.h"

namespace kvserve::testing {
namespace {

constexpr int kPoolRows = 64;

// kPoolRows quantized random rows of `cols` elements per (type, cols).
class RowPool {
 public:
  const std::vector<std::byte>& Rows(quant::BlockType type, int64_t cols, int64_t* row_bytes) {
    *row_bytes = *quant::RowBytes(type, cols);
    auto key = std::make_pair(static_cast<uint32_t>(type), cols);
    auto it = pools_.find(key);
    if (it != pools_.end()) return it->second;
    std::mt19937 rng(static_cast<uint32_t>(cols * 131 + static_cast<int64_t>(type)));
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> values(static_cast<size_t>(kPoolRows * cols));
    for (float& v : values) v = normal(rng);
    std::vector<std::byte> rows(static_cast<size_t>(kPoolRows * *row_bytes));
    quant::QuantizeRows(type, values.data(), kPoolRows, cols, rows.data());
    return pools_.emplace(key, std::move(rows)).first->second;
  }

 private:
  std::map<std::pair<uint32_t, int64_t>, std::vector<std::byte>> pools_;
};

}  // namespace

absl::StatusOr<uint64_t> WriteRandomGguf(const RandomGgufSpec& s, const std::string& path) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kLlama;
  c.hidden_size = s.hidden;
  c.num_layers = s.layers;
  c.tie_word_embeddings = s.tied;
  gguf::GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetU32("general.quantization_version", 2);
  w.SetU32("llama.context_length", static_cast<uint32_t>(s.context));
  w.SetU32("llama.embedding_length", static_cast<uint32_t>(s.hidden));
  w.SetU32("llama.block_count", static_cast<uint32_t>(s.layers));
  w.SetU32("llama.feed_forward_length", static_cast<uint32_t>(s.intermediate));
  w.SetU32("llama.attention.head_count", static_cast<uint32_t>(s.heads));
  w.SetU32("llama.attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  w.SetU32("llama.attention.key_length", static_cast<uint32_t>(s.head_dim));
  w.SetU32("llama.attention.value_length", static_cast<uint32_t>(s.head_dim));
  w.SetF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.SetF32("llama.rope.freq_base", static_cast<float>(s.rope_theta));
  if (!s.tokenizer_json.empty()) {
    std::ifstream in(s.tokenizer_json);
    std::ostringstream text;
    text << in.rdbuf();
    // tokenizer_config.json beside it, when there is one, brings the chat template.
    std::ifstream cfg_in(std::filesystem::path(s.tokenizer_json).parent_path() /
                         "tokenizer_config.json");
    std::ostringstream cfg_text;
    cfg_text << cfg_in.rdbuf();
    KVS_ASSIGN_OR_RETURN(tokenizer::TokenizerDirConfig tc,
                         tokenizer::ParseTokenizerDirConfig(cfg_text.str(), ""));
    KVS_ASSIGN_OR_RETURN(tokenizer::GgufVocab vocab,
                         tokenizer::GgufVocabFromTokenizerJson(text.str(), tc));
    KVS_RETURN_IF_ERROR(tokenizer::PadGgufVocab(vocab, s.vocab));
    tokenizer::WriteGgufVocab(vocab, w);
  }
  RowPool pool;
  int tensor = 0;
  auto matrix = [&](const std::string& name, int layer, int64_t rows,
                    int64_t cols) -> absl::Status {
    KVS_ASSIGN_OR_RETURN(quant::BlockType t, model::GgufMatrixType(s.type, c, name, layer, cols));
    int64_t row_bytes = 0;
    const std::vector<std::byte>& src = pool.Rows(t, cols, &row_bytes);
    std::vector<std::byte> data(static_cast<size_t>(rows * row_bytes));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t from = (r + tensor) % kPoolRows;
      std::copy_n(src.begin() + from * row_bytes, row_bytes, data.begin() + r * row_bytes);
    }
    ++tensor;
    w.AddTensor(name, t, {cols, rows}, std::move(data));
    return absl::OkStatus();
  };
  auto ones = [&](const std::string& name, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n), 1.0f);
    std::vector<std::byte> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    w.AddTensor(name, quant::BlockType::kF32, {n}, std::move(bytes));
  };
  KVS_RETURN_IF_ERROR(matrix("token_embd.weight", -1, s.vocab, s.hidden));
  ones("output_norm.weight", s.hidden);
  if (!s.tied) KVS_RETURN_IF_ERROR(matrix("output.weight", -1, s.vocab, s.hidden));
  const int64_t q = static_cast<int64_t>(s.heads) * s.head_dim,
                kv = static_cast<int64_t>(s.kv_heads) * s.head_dim;
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = absl::StrCat("blk.", i, ".");
    ones(p + "attn_norm.weight", s.hidden);
    ones(p + "ffn_norm.weight", s.hidden);
    KVS_RETURN_IF_ERROR(matrix(p + "attn_q.weight", i, q, s.hidden));
    KVS_RETURN_IF_ERROR(matrix(p + "attn_k.weight", i, kv, s.hidden));
    KVS_RETURN_IF_ERROR(matrix(p + "attn_v.weight", i, kv, s.hidden));
    KVS_RETURN_IF_ERROR(matrix(p + "attn_output.weight", i, s.hidden, q));
    KVS_RETURN_IF_ERROR(matrix(p + "ffn_gate.weight", i, s.intermediate, s.hidden));
    KVS_RETURN_IF_ERROR(matrix(p + "ffn_up.weight", i, s.intermediate, s.hidden));
    KVS_RETURN_IF_ERROR(matrix(p + "ffn_down.weight", i, s.hidden, s.intermediate));
  }
  KVS_ASSIGN_OR_RETURN(std::vector<std::string> written, w.Write(path));
  uint64_t bytes = 0;
  for (const std::string& f : written) bytes += std::filesystem::file_size(f);
  return bytes;
}

}  // namespace kvserve::testing
