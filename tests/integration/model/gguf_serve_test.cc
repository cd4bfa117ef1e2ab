// GGUF files served by the real daemon (`kvserve serve --model FILE.gguf`), as a user runs it:
//  * the bundled model exported by `kvserve export-gguf` (F32) serves the same greedy text
//    as its Hugging Face directory, with the tokenizer and chat template read from the file;
//    the Q4_K_M export serves completions and chat completions under the file's stem;
//  * a 300 M-parameter random Q4_K_M file keeps its weights quantized: peak resident memory
//    (VmHWM, loading included) stays within
//        1.1 x file bytes + the KV pools (cache.kv_bytes + host_swap_bytes) + kFixedOverhead
//    (the repacked panels hold 4.625 bits per Q4_K weight against the file's 4.5, the
//    embedding stays mapped, and each tensor's pages leave the resident set once packed);
//  * a truncated file is refused at start-up, naming it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/integration/server/server_process.h"
#include "tests/support/gguf/random_gguf.h"

namespace kvserve::server::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kKvBytes = 64ull << 20;
constexpr uint64_t kSwapBytes = 32ull << 20;
constexpr uint64_t kFixedOverhead = 256ull
                                    << 20;  // as checkpoint_rss_test: process, servers, scratch

std::string Bundled() { return std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny"; }

class GgufServe : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kvserve_gguf_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `kvserve export-gguf`; returns the output path.
  std::string Export(const std::string& type, const std::string& name) {
    const std::string out = (dir_ / name).string();
    const std::string cmd = std::string(KVSERVE_SERVER_BIN) + " export-gguf --model " + Bundled() +
                            " --out " + out + " --type " + type + " > /dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return out;
  }

  std::unique_ptr<ServerProcess> Serve(const std::string& model, std::string* error) {
    const json config = {{"model", {{"path", model}}},
                         {"engine", {{"threads", 1}}},
                         {"cache", {{"kv_bytes", kKvBytes}, {"host_swap_bytes", kSwapBytes}}},
                         {"scheduler", {{"max_num_batched_tokens", 256}, {"max_num_seqs", 4}}},
                         {"server", {{"host", "127.0.0.1"}, {"http_port", 0}, {"grpc_port", 0}}}};
    return ServerProcess::Start(
        {KVSERVE_SERVER_BIN, "serve", "--config", WriteTempFile("gguf.json", config.dump())},
        std::chrono::milliseconds(240000), error);
  }

  static json Post(ServerProcess& server, const std::string& path, const json& body) {
    httplib::Client http(server.host(), server.http_port());
    http.set_read_timeout(120, 0);
    auto res = http.Post(path, body.dump(), "application/json");
    EXPECT_TRUE(res) << httplib::to_string(res.error());
    if (!res) return json();
    EXPECT_EQ(res->status, 200) << res->body;
    return json::parse(res->body, nullptr, false);
  }

  fs::path dir_;
};

TEST_F(GgufServe, ExportedBundledModelServesItsGreedyTextAndChat) {
  const std::string f32 = Export("F32", "kvs-tiny.gguf");
  const std::string q4 = Export("Q4_K_M", "kvs-tiny-q4km.gguf");
  const json req = {
      {"prompt", "In the beginning"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}};
  std::string error;
  std::string want;
  {
    auto hf = Serve(Bundled(), &error);
    ASSERT_NE(hf, nullptr) << error;
    want = Post(*hf, "/v1/completions", req)["choices"][0]["text"].get<std::string>();
  }
  {
    auto server = Serve(f32, &error);
    ASSERT_NE(server, nullptr) << error;
    const json got = Post(*server, "/v1/completions", req);
    EXPECT_EQ(got["choices"][0]["text"].get<std::string>(), want);
    EXPECT_EQ(got["model"].get<std::string>(), "kvs-tiny");
  }
  auto server = Serve(q4, &error);
  ASSERT_NE(server, nullptr) << error;
  const json done = Post(*server, "/v1/completions", req);
  EXPECT_EQ(done["usage"]["completion_tokens"].get<int>(), 24) << done.dump();
  const json chat =
      Post(*server, "/v1/chat/completions",
           {{"messages", {{{"role", "user"}, {"content", "Who are you?"}}}}, {"max_tokens", 8}});
  EXPECT_GT(chat["usage"]["prompt_tokens"].get<int>(), 4)
      << chat.dump();  // the template's turn markers
  EXPECT_EQ(chat["model"].get<std::string>(), "kvs-tiny-q4km");
  const std::string log = server->stderr_text();
  EXPECT_EQ(log.find("error"), std::string::npos) << log;
}

TEST_F(GgufServe, TruncatedFileIsRefusedNamingIt) {
  const std::string f32 = Export("Q8_0", "whole.gguf");
  const std::string cut = (dir_ / "cut.gguf").string();
  {
    std::ifstream in(f32, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary)
        .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  std::string error;
  auto server = Serve(cut, &error);
  EXPECT_EQ(server, nullptr);
  EXPECT_NE(error.find("cut.gguf"), std::string::npos) << error;
}

TEST_F(GgufServe, QuantizedWeightsStayQuantizedInMemory) {
  kvserve::testing::RandomGgufSpec spec;
  spec.hidden = 1024, spec.intermediate = 3072, spec.layers = 24, spec.heads = 16,
  spec.kv_heads = 8;
  spec.head_dim = 64, spec.vocab = 2048, spec.type = "Q4_K_M";
  spec.tokenizer_json = Bundled() + "/tokenizer.json";
  const std::string path = (dir_ / "random-q4km.gguf").string();
  auto file_bytes = kvserve::testing::WriteRandomGguf(spec, path);
  ASSERT_TRUE(file_bytes.ok()) << file_bytes.status();
  std::string error;
  auto server = Serve(path, &error);
  ASSERT_NE(server, nullptr) << error;
  const json done = Post(*server, "/v1/completions",
                         {{"prompt", "In the beginning"},
                          {"max_tokens", 8},
                          {"temperature", 0},
                          {"ignore_eos", true}});
  EXPECT_EQ(done["usage"]["completion_tokens"].get<int>(), 8) << done.dump();
  std::istringstream status([&] {
    std::ifstream in("/proc/" + std::to_string(server->pid()) + "/status");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }());
  double hwm = 0;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) hwm = std::atof(line.c_str() + 6) * 1024;
  }
  const double bound = 1.1 * static_cast<double>(*file_bytes) +
                       static_cast<double>(kKvBytes + kSwapBytes + kFixedOverhead);
  std::cout << "Q4_K_M GGUF " << *file_bytes / (1 << 20) << " MiB: peak RSS " << hwm / (1 << 20)
            << " MiB, bound " << bound / (1 << 20) << " MiB\n";
  EXPECT_GT(hwm, 0);
  EXPECT_LE(hwm, bound) << server->stderr_text();
}

}  // namespace
}  // namespace kvserve::server::testing
