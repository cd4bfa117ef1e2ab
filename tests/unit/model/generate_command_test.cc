// `kvserve generate` (app/generate_command, app/model_dir) end to end on the random
// llama_f32 fixture, which ships a 300-token byte-fallback tokenizer. The bundled model's
// smoke check (real English) lives in kvs_tiny_golden_test.
#include "app/generate_command.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/cli.h"
#include "tests/unit/run_cli.h"
#include "app/model_dir.h"
#include "gtest/gtest.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::app {
namespace {

namespace fs = std::filesystem;

using testing::RunKvserve;

const std::string kFixture = model::testing::FixtureDir("llama_f32");

TEST(GenerateCommand, ParsesItsSwitches) {
  auto p = ParseArgs({"generate", "--prompt", "in the beginning", "--max-tokens=5", "--temperature", "0.5",
                      "--seed", "7", "--model", "/m"});
  ASSERT_TRUE(p.ok()) << p.status();
  auto o = ParseGenerateOptions(*p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->prompt, "in the beginning");
  EXPECT_EQ(o->max_tokens, 5);
  EXPECT_FLOAT_EQ(o->temperature, 0.5f);
  EXPECT_EQ(o->seed, 7u);
  ASSERT_EQ(p->overrides.size(), 1u);
  EXPECT_EQ(p->overrides[0], (std::pair<std::string, std::string>{"model.path", "/m"}));
}

TEST(GenerateCommand, BadSwitchesAreUsageErrors) {
  EXPECT_EQ(RunKvserve({"generate", "--max-tokens", "3"}).code, kExitUsage);  // no prompt
  auto r = RunKvserve({"generate", "--prompt", "x", "--max-tokens", "many"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--max-tokens=many: not a number"), std::string::npos) << r.err;
  EXPECT_EQ(RunKvserve({"generate", "--prompt", "x", "--temperature", "-1"}).code, kExitUsage);
  EXPECT_EQ(RunKvserve({"generate", "--prompt"}).code, kExitUsage);  // value missing
  r = RunKvserve({"generate", "--promt", "x"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("did you mean --prompt"), std::string::npos) << r.err;
  // Switches belong to their command.
  EXPECT_EQ(RunKvserve({"config", "--prompt", "x"}).code, kExitUsage);
}

TEST(GenerateCommand, CompletesOnTheFixtureDeterministically) {
  auto a = RunKvserve({"generate", "--model", kFixture, "--prompt", "hello world", "--max-tokens", "12", "--seed", "3",
                "--temperature", "1"});
  ASSERT_EQ(a.code, kExitOk) << a.err;
  EXPECT_NE(a.err.find("12 tokens"), std::string::npos) << a.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(a.out.back(), '\n');
  auto b = RunKvserve({"generate", "--model", kFixture, "--prompt", "hello world", "--max-tokens", "12", "--seed", "3",
                "--temperature", "1", "--threads", "1"});
  ASSERT_EQ(b.code, kExitOk) << b.err;
  EXPECT_EQ(a.out, b.out);  // same seed, same text, whatever the thread count
  auto greedy = RunKvserve({"generate", "--model", kFixture, "--prompt", "hello world", "--max-tokens", "12",
                     "--temperature", "0", "--seed", "99"});
  auto greedy2 = RunKvserve({"generate", "--model", kFixture, "--prompt", "hello world", "--max-tokens", "12",
                      "--temperature", "0", "--seed", "1"});
  ASSERT_EQ(greedy.code, kExitOk) << greedy.err;
  EXPECT_EQ(greedy.out, greedy2.out);  // greedy ignores the seed
}

TEST(GenerateCommand, ContextLimitIsAUsageError) {
  auto r = RunKvserve({"generate", "--model", kFixture, "--prompt", "hello", "--max-tokens", "1000"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("exceeds the model's context of 256 tokens"), std::string::npos) << r.err;
}

TEST(GenerateCommand, MissingModelIsARuntimeError) {
  auto r = RunKvserve({"generate", "--model", "/nonexistent/model", "--prompt", "x"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("model.path=/nonexistent/model: not a directory"), std::string::npos) << r.err;
  // A directory with a config but no tokenizer.
  r = RunKvserve({"generate", "--model", model::testing::FixtureDir("qwen2_bf16"), "--prompt", "x"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
}

class ModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("model_dir_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "build" / "bin");
  }
  void TearDown() override { fs::remove_all(root_); }
  void MakeModel(const fs::path& dir) {
    fs::create_directories(dir);
    std::ofstream(dir / "config.json") << "{}";
  }
  fs::path root_;
};

TEST_F(ModelDirTest, ExplicitPathWins) {
  MakeModel(root_ / "mine");
  auto d = ResolveModelDir((root_ / "mine").string(), (root_ / "build" / "bin" / "kvserve").string());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(*d, (root_ / "mine").string());
  fs::create_directories(root_ / "empty");
  auto e = ResolveModelDir((root_ / "empty").string(), "kvserve");
  EXPECT_EQ(e.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(e.status().message()).find("no config.json"), std::string::npos);
}

TEST_F(ModelDirTest, BundledModelRelativeToTheBinary) {
  const std::string exe = (root_ / "build" / "bin" / "kvserve").string();
  auto missing = ResolveModelDir("", exe);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(std::string(missing.status().message()).find((root_ / "models" / "kvs-tiny").string()), std::string::npos)
      << missing.status();
  MakeModel(root_ / "models" / "kvs-tiny");
  auto found = ResolveModelDir("", exe);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, (root_ / "models" / "kvs-tiny").string());
  // An installed layout: <prefix>/bin/kvserve and <prefix>/models/kvs-tiny.
  MakeModel(root_ / "build" / "models" / "kvs-tiny");
  fs::remove_all(root_ / "models");
  auto installed = ResolveModelDir("", exe);
  ASSERT_TRUE(installed.ok()) << installed.status();
  EXPECT_EQ(*installed, (root_ / "build" / "models" / "kvs-tiny").string());
}

TEST(ExecutablePath, PrefersProcSelfExe) {
  const std::string p = ExecutablePath("whatever");
  EXPECT_NE(p, "whatever");
  EXPECT_TRUE(fs::exists(p));
}

}  // namespace
}  // namespace kvserve::app
