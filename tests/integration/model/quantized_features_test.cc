// The rest of the product on a quantized model (issue 37: "everything else keeps working on
// quantized models"), through the real daemon as a user runs it. The bundled model is exported
// by `kvserve export-gguf` as Q8_0 (the target) and Q4_K_M (the draft); `kvserve calibrate`
// measures TriAttention's statistics from the Q8_0 file, beside it, where the daemon finds them
// by default; one daemon then serves the Q8_0 file with the draft model and the prefix cache, and
// each feature is checked by what it must do, not by how:
//  * speculative decoding with a quantized draft drafts and accepts tokens, and its greedy
//    text equals the same daemon's without speculation (exactness, per request);
//  * triattention evicts tokens past its budget, reports them in the audit counters, and
//    `full` evicts none;
//  * the prefix cache serves a repeated prompt's blocks (cached_tokens > 0);
//  * a json_schema response parses and holds the schema's required key;
//  * embeddings come back with the model's width, finite and unit-length.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server/server_process.h"

namespace kvserve::server::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string Source(const std::string& rel) { return std::string(KVSERVE_SOURCE_DIR) + "/" + rel; }

class QuantizedFeatures : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kvserve_quant_features_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    target_ = (dir_ / "tiny-q8.gguf").string();
    draft_ = (dir_ / "tiny-q4km.gguf").string();
    // Where the daemon looks by default for a model given as one file: beside it.
    stats_ = (dir_ / "triattention_stats.bin").string();
    const std::string bin = KVSERVE_SERVER_BIN;
    for (const std::string& cmd : {bin + " export-gguf --model " + Source("models/kvs-tiny") +
                                       " --out " + target_ + " --type Q8_0",
                                   bin + " export-gguf --model " + Source("models/kvs-tiny") +
                                       " --out " + draft_ + " --type Q4_K_M",
                                   bin + " calibrate --model " + target_ + " --text " +
                                       Source("tests/fixtures/calibration_text.txt") + " --out " +
                                       stats_ + " --max-tokens 512"}) {
      ASSERT_EQ(std::system((cmd + " > /dev/null 2>&1").c_str()), 0) << cmd;
    }
    const json config = {{"model", {{"path", target_}}},
                         {"engine", {{"threads", 1}}},
                         {"cache", {{"kv_bytes", 32 << 20}, {"enable_prefix_caching", true}}},
                         {"speculative",
                          // The draft is the target's own model at 4.8 bits: as costly as the
                          // target, so the measured cost model would not draft; fixed costs make it
                          // draft (output is exact either way).
                          {{"draft_model", draft_},
                           {"draft_kv_bytes", 8 << 20},
                           {"row_cost", 0.05},
                           {"draft_guess_cost", 0.05}}},
                         {"scheduler", {{"max_num_batched_tokens", 256}, {"max_num_seqs", 4}}},
                         {"server", {{"host", "127.0.0.1"}, {"http_port", 0}, {"grpc_port", 0}}}};
    std::string error;
    server_ = ServerProcess::Start({KVSERVE_SERVER_BIN, "serve", "--config",
                                    WriteTempFile("quant_features.json", config.dump())},
                                   std::chrono::milliseconds(120000), &error)
                  .release();
    ASSERT_NE(server_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    fs::remove_all(dir_);
  }

  static json Post(const std::string& path, const json& body) {
    httplib::Client http(server_->host(), server_->http_port());
    http.set_read_timeout(120, 0);
    auto res = http.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << httplib::to_string(res.error());
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  static inline fs::path dir_;
  static inline std::string target_, draft_, stats_;
  static inline ServerProcess* server_ = nullptr;
};

TEST_F(QuantizedFeatures, QuantizedDraftSpeculatesExactly) {
  ASSERT_NE(server_, nullptr);
  const json base = {{"prompt", "And it came to pass, when the king"},
                     {"max_tokens", 40},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  json plain = base;
  plain["speculative"] = {{"method", "none"}};
  json spec = base;
  spec["speculative"] = {{"method", "draft"}};
  const json want = Post("/v1/completions", plain);
  const json got = Post("/v1/completions", spec);
  EXPECT_EQ(got["choices"][0]["text"], want["choices"][0]["text"]);
  EXPECT_EQ(want["usage"]["speculative"]["draft_tokens"].get<int>(), 0) << want.dump();
  EXPECT_GT(got["usage"]["speculative"]["draft_tokens"].get<int>(), 0) << got.dump();
  EXPECT_GT(got["usage"]["speculative"]["accepted_tokens"].get<int>(), 0) << got.dump();
}

TEST_F(QuantizedFeatures, TriAttentionEvictsPastItsBudgetAndFullDoesNot) {
  ASSERT_NE(server_, nullptr);
  const json base = {{"prompt", "The absolute necessity of seeming like herself"},
                     {"max_tokens", 120},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  json tri = base;
  tri["kv_compression"] = {{"policy", "triattention"}, {"budget", 48}};
  json full = base;
  full["kv_compression"] = {{"policy", "full"}};
  const json t = Post("/v1/completions", tri)["usage"]["kv_compression"];
  const json f = Post("/v1/completions", full)["usage"]["kv_compression"];
  EXPECT_EQ(t["policy"], "triattention") << t.dump();
  EXPECT_GT(t["evicted_tokens"].get<int>(), 0) << t.dump();
  EXPECT_LE(t["peak_kv_tokens"].get<int>(), f["peak_kv_tokens"].get<int>()) << t.dump() << f.dump();
  EXPECT_GT(t["compression_ratio"].get<double>(), 1.0) << t.dump();
  EXPECT_EQ(f["evicted_tokens"].get<int>(), 0) << f.dump();
}

TEST_F(QuantizedFeatures, RepeatedPromptHitsThePrefixCache) {
  ASSERT_NE(server_, nullptr);
  std::string prompt;
  for (int i = 0; i < 12; ++i)
    prompt += "Anne had no Uppercross Hall before her, no landed estate. ";
  const json req = {{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}};
  const json first = Post("/v1/completions", req);
  const json second = Post("/v1/completions", req);
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0)
      << second.dump();
  EXPECT_EQ(second["choices"][0]["text"], first["choices"][0]["text"]);
}

TEST_F(QuantizedFeatures, JsonSchemaOutputParses) {
  ASSERT_NE(server_, nullptr);
  const json schema = {{"type", "object"},
                       {"properties", {{"name", {{"type", "string"}, {"maxLength", 12}}}}},
                       {"required", {"name"}},
                       {"additionalProperties", false}};
  const json got =
      Post("/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "Name a king."}}}},
            {"max_tokens", 48},
            {"temperature", 0},
            {"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "king"}, {"schema", schema}}}}}});
  const std::string text = got["choices"][0]["message"]["content"].get<std::string>();
  const json parsed = json::parse(text, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << text;
  ASSERT_TRUE(parsed.contains("name")) << text;
  EXPECT_TRUE(parsed["name"].is_string()) << text;
}

TEST_F(QuantizedFeatures, EmbeddingsHaveTheModelsWidth) {
  ASSERT_NE(server_, nullptr);
  const json got = Post("/v1/embeddings", {{"input", {"In the beginning", "Anne had no"}}});
  ASSERT_EQ(got["data"].size(), 2u) << got.dump();
  for (const json& d : got["data"]) {
    const auto& v = d["embedding"];
    ASSERT_EQ(v.size(), 192u);  // kvs-tiny's hidden size
    double norm = 0;
    for (const json& x : v) {
      ASSERT_TRUE(std::isfinite(x.get<double>()));
      norm += x.get<double>() * x.get<double>();
    }
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-3);
  }
  EXPECT_NE(got["data"][0]["embedding"], got["data"][1]["embedding"]);
}

}  // namespace
}  // namespace kvserve::server::testing
