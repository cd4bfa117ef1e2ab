// A GGUF written by the repository's Python exporter (tools/export_gguf, a separate
// implementation of the format) reads back: the bundled kvs-tiny model is exported at test
// time and its metadata and tensors are checked against config.json and model.safetensors,
// read here directly (JSON header + raw bytes), not through gguf/ or model/.
#include <cstdlib>
#include <fstream>
#include <string>

#include "gguf/gguf_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/unit/gguf/gguf_test_util.h"

namespace kvserve::gguf {
namespace {

using namespace kvserve::gguf::testing;  // NOLINT
using nlohmann::json;

const std::string kModel = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";

// The raw bytes of a tensor of a single-file safetensors checkpoint, and its dtype.
std::pair<std::string, std::string> SafetensorsBytes(const std::string& file,
                                                     const std::string& name) {
  const std::string all = ReadFile(file);
  uint64_t n = 0;
  std::memcpy(&n, all.data(), 8);
  const json header = json::parse(all.substr(8, n));
  const auto& e = header.at(name);
  const uint64_t begin = e["data_offsets"][0];
  const uint64_t end = e["data_offsets"][1];
  return {e["dtype"].get<std::string>(), all.substr(8 + n + begin, end - begin)};
}

std::string AsString(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

TEST(GgufExport, ReadsWhatThePythonExporterWrote) {
  TempDir dir;
  const std::string out = dir.File("kvs-tiny.gguf");
  const std::string cmd = std::string(KVSERVE_PYTHON3) + " " + KVSERVE_SOURCE_DIR +
                          "/tools/export_gguf/export_gguf.py " + kModel + " " + out + " > " +
                          dir.File("log") + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir.File("log"));

  std::ifstream config_in(kModel + "/config.json");
  const json config = json::parse(config_in);
  auto m = GgufModel::Open(out);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m->GetString("general.architecture"), "llama");
  EXPECT_EQ(*m->GetInt("llama.block_count"), config["num_hidden_layers"].get<int64_t>());
  EXPECT_EQ(*m->GetInt("llama.embedding_length"), config["hidden_size"].get<int64_t>());
  EXPECT_EQ(*m->GetInt("llama.feed_forward_length"), config["intermediate_size"].get<int64_t>());
  EXPECT_EQ(*m->GetInt("llama.attention.head_count"), config["num_attention_heads"].get<int64_t>());
  EXPECT_EQ(*m->GetInt("llama.attention.head_count_kv"),
            config["num_key_value_heads"].get<int64_t>());
  EXPECT_EQ(*m->GetFloat("llama.attention.layer_norm_rms_epsilon"),
            double{static_cast<float>(config["rms_norm_eps"].get<double>())});
  EXPECT_EQ(*m->GetString("tokenizer.ggml.model"), "llama");
  const int64_t vocab = config["vocab_size"].get<int64_t>();
  EXPECT_EQ(static_cast<int64_t>(m->GetStrings("tokenizer.ggml.tokens")->size()), vocab);
  EXPECT_EQ(static_cast<int64_t>(m->GetFloats("tokenizer.ggml.scores")->size()), vocab);
  EXPECT_EQ(static_cast<int64_t>(m->GetInts("tokenizer.ggml.token_type")->size()), vocab);
  EXPECT_EQ(*m->GetInt("tokenizer.ggml.bos_token_id"), config["bos_token_id"].get<int64_t>());

  // Tied embeddings: no output.weight; 9 tensors per layer + token_embd + output_norm.
  const int64_t layers = config["num_hidden_layers"].get<int64_t>();
  EXPECT_EQ(static_cast<int64_t>(m->TensorNames().size()), 9 * layers + 2);
  EXPECT_FALSE(m->Contains("output.weight"));
  const int64_t d = config["hidden_size"].get<int64_t>();
  const int64_t kv_dim =
      config["num_key_value_heads"].get<int64_t>() * config["head_dim"].get<int64_t>();
  const std::string st = kModel + "/model.safetensors";
  struct Check {
    std::string gguf, hf;
    std::vector<int64_t> ne;
  };
  for (const Check& c : std::vector<Check>{
           {"token_embd.weight", "model.embed_tokens.weight", {d, vocab}},
           {"output_norm.weight", "model.norm.weight", {d}},
           {"blk.0.attn_v.weight", "model.layers.0.self_attn.v_proj.weight", {d, kv_dim}},
           {"blk.3.ffn_down.weight",
            "model.layers.3.mlp.down_proj.weight",
            {config["intermediate_size"].get<int64_t>(), d}}}) {
    SCOPED_TRACE(c.gguf);
    auto t = m->FindTensor(c.gguf);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->info->type, quant::BlockType::kF32);
    EXPECT_EQ(t->info->ne, c.ne);  // PyTorch [out, in] is ne = {in, out}
    const auto [dtype, bytes] = SafetensorsBytes(st, c.hf);
    ASSERT_EQ(dtype, "F32");
    EXPECT_TRUE(AsString(t->file->Bytes(*t->info)) == bytes);
  }
  // q_proj is stored with its rotary halves interleaved per head: same bytes, other order.
  auto q = m->FindTensor("blk.0.attn_q.weight");
  ASSERT_TRUE(q.ok());
  const auto [qtype, qbytes] = SafetensorsBytes(st, "model.layers.0.self_attn.q_proj.weight");
  const std::string stored = AsString(q->file->Bytes(*q->info));
  EXPECT_EQ(stored.size(), qbytes.size());
  EXPECT_FALSE(stored == qbytes);
}

}  // namespace
}  // namespace kvserve::gguf
