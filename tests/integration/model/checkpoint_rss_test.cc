// A bf16 checkpoint of 304 M parameters (608 MB of safetensors, written at test time) served
// by `kvserve serve`: the weights stay bf16 and are packed once from the mapped file, so
// the daemon's peak resident memory (VmHWM, loading included) stays within
//
//   1.15 x checkpoint bytes + the KV pools (cache.kv_bytes + host_swap_bytes) + kFixedOverhead
//
// kFixedOverhead (docs/models.md, "Memory") covers the process itself (code, gRPC/HTTP
// runtime, tokenizer, threads) and the step scratch at this config's 256-row step. Before,
// fp32 copies of every projection sat beside the packed bf16 ones: about 3.2x the file.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server/server_process.h"

namespace kvserve::server::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kHidden = 1024, kLayers = 24, kHeads = 16, kKvHeads = 8, kHeadDim = 64, kInter = 3072;
constexpr int kVocab = 2048;  // the bundled tokenizer's
constexpr uint64_t kKvBytes = 64ull << 20;
constexpr uint64_t kSwapBytes = 32ull << 20;  // the host swap tier, also committed at start-up
constexpr uint64_t kFixedOverhead = 256ull << 20;

// Random bf16 weights, well scaled (|w| < 0.0625) so activations stay finite through 24
// layers; norms are 1. A xorshift stream: the values only need to be finite and varied.
class Bf16Writer {
 public:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    bool ones = false;
  };
  void Add(std::string name, std::vector<int64_t> shape, bool ones = false) {
    tensors_.push_back({std::move(name), std::move(shape), ones});
  }
  uint64_t Write(const std::string& path) {
    json header = json::object();
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      const uint64_t bytes = Elements(t) * 2;
      header[t.name] = {{"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary);
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    std::vector<uint16_t> buf;
    for (const Tensor& t : tensors_) {
      buf.resize(Elements(t));
      for (uint16_t& b : buf) b = t.ones ? 0x3f80 : Next();
      out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 2));
    }
    return 8 + text.size() + offset;
  }

 private:
  static uint64_t Elements(const Tensor& t) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    return n;
  }
  uint16_t Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    // sign | exponent 2^-8..2^-5 (|w| in [0.0039, 0.0625)) | mantissa
    const uint16_t sign = static_cast<uint16_t>((state_ >> 63) << 15);
    const uint16_t exponent = static_cast<uint16_t>(0x3b80 + ((state_ >> 20) & 0x3) * 0x80);
    return static_cast<uint16_t>(sign | exponent | ((state_ >> 30) & 0x7f));
  }
  std::vector<Tensor> tensors_;
  uint64_t state_ = 0x9e3779b97f4a7c15ull;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

long StatusKb(pid_t pid, const std::string& field) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

class CheckpointRss : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvserve_rss_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CheckpointRss, Bf16CheckpointServesWithinItsOwnSize) {
  const std::string tiny = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
  fs::copy_file(tiny + "/tokenizer.json", dir_ / "tokenizer.json");
  fs::copy_file(tiny + "/tokenizer_config.json", dir_ / "tokenizer_config.json");
  json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                 {"hidden_size", kHidden},               {"intermediate_size", kInter},
                 {"num_hidden_layers", kLayers},         {"num_attention_heads", kHeads},
                 {"num_key_value_heads", kKvHeads},      {"head_dim", kHeadDim},
                 {"vocab_size", kVocab},                 {"max_position_embeddings", 2048},
                 {"rms_norm_eps", 1e-5},                 {"tie_word_embeddings", true},
                 {"bos_token_id", 1},                    {"eos_token_id", 2},
                 {"torch_dtype", "bfloat16"}};
  std::ofstream(dir_ / "config.json") << config.dump(2);
  Bf16Writer w;
  w.Add("model.embed_tokens.weight", {kVocab, kHidden});
  w.Add("model.norm.weight", {kHidden}, true);
  for (int i = 0; i < kLayers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w.Add(p + "input_layernorm.weight", {kHidden}, true);
    w.Add(p + "self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden});
    w.Add(p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden});
    w.Add(p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden});
    w.Add(p + "self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim});
    w.Add(p + "post_attention_layernorm.weight", {kHidden}, true);
    w.Add(p + "mlp.gate_proj.weight", {kInter, kHidden});
    w.Add(p + "mlp.up_proj.weight", {kInter, kHidden});
    w.Add(p + "mlp.down_proj.weight", {kHidden, kInter});
  }
  const uint64_t file_bytes = w.Write((dir_ / "model.safetensors").string());
  const int64_t params = static_cast<int64_t>(kVocab) * kHidden + kHidden +
                         static_cast<int64_t>(kLayers) *
                             (2 * kHidden + kHidden * (kHeads + 2 * kKvHeads) * kHeadDim +
                              kHeads * kHeadDim * kHidden + 3 * static_cast<int64_t>(kHidden) * kInter);
  ASSERT_GE(params, 300'000'000);

  const json serve = {
      {"logging", {{"level", "info"}}},
      {"model", {{"path", dir_.string()}}},
      {"engine", {{"threads", 2}}},
      {"cache", {{"kv_bytes", kKvBytes}, {"host_swap_bytes", kSwapBytes}}},
      {"scheduler", {{"max_num_batched_tokens", 256}, {"max_num_seqs", 4}}},
      {"server", {{"host", "127.0.0.1"}, {"http_port", 0}, {"grpc_port", 0}}}};
  std::string error;
  auto server = ServerProcess::Start({KVSERVE_SERVER_BIN, "serve", "--config", WriteTempFile("rss.json", serve.dump())},
                                     std::chrono::milliseconds(240000), &error);
  ASSERT_NE(server, nullptr) << error;
  httplib::Client http(server->host(), server->http_port());
  http.set_read_timeout(120, 0);
  const json req = {{"model", dir_.filename().string()}, {"prompt", "In the beginning"}, {"max_tokens", 8},
                    {"temperature", 0}, {"ignore_eos", true}};
  auto res = http.Post("/v1/completions", req.dump(), "application/json");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  const json body = json::parse(res->body);
  EXPECT_EQ(body["usage"]["completion_tokens"].get<int>(), 8) << res->body;

  const double hwm = static_cast<double>(StatusKb(server->pid(), "VmHWM")) * 1024;
  const double bound = 1.15 * static_cast<double>(file_bytes) + static_cast<double>(kKvBytes + kSwapBytes + kFixedOverhead);
  std::cout << "checkpoint " << file_bytes / (1 << 20) << " MiB (" << params / 1000000 << " M params, bf16): "
            << "peak RSS " << hwm / (1 << 20) << " MiB, bound " << bound / (1 << 20) << " MiB; now RssAnon "
            << StatusKb(server->pid(), "RssAnon") / 1024 << " MiB, RssFile " << StatusKb(server->pid(), "RssFile") / 1024
            << " MiB\n";
  EXPECT_LE(hwm, bound) << server->stderr_text();
  const std::string log = server->stderr_text();
  EXPECT_NE(log.find("bf16 weights"), std::string::npos) << log;
  EXPECT_NE(log.find("started in"), std::string::npos) << log;
}

}  // namespace
}  // namespace kvserve::server::testing
