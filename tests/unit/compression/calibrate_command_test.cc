// `kvserve calibrate` (app/calibrate_command) end to end on the random llama_f32 fixture and
// tests/fixtures/calibration_text.txt: it writes a stats file that loads and matches the
// model, and refuses bad switches and short texts with usage errors.
#include "app/calibrate_command.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "app/cli.h"
#include "tests/unit/run_cli.h"
#include "compression/key_basis.h"
#include "compression/triattention_stats.h"
#include "model/model_config.h"

namespace kvserve::app {
namespace {

namespace fs = std::filesystem;

using testing::RunKvserve;

const std::string kFixture = std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/llama_f32";
const std::string kText = std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/calibration_text.txt";

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("kvs_calibrate_test_" + std::to_string(::getpid()) + "_" + name)).string();
}

TEST(CalibrateCommand, ParsesItsSwitches) {
  auto p = ParseArgs({"calibrate", "--model", "/m", "--text", "t.txt", "--out=o.bin", "--max-tokens", "1000",
                      "--window", "64"});
  ASSERT_TRUE(p.ok()) << p.status();
  auto o = ParseCalibrateOptions(*p);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->text_path, "t.txt");
  EXPECT_EQ(o->out_path, "o.bin");
  EXPECT_EQ(o->max_tokens, 1000);
  EXPECT_EQ(o->window, 64);
  auto d = ParseCalibrateOptions(*ParseArgs({"calibrate", "--text", "t", "--out", "o"}));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->max_tokens, 32768) << "the paper's calibration length by default";
}

TEST(CalibrateCommand, WritesStatsThatMatchTheModel) {
  const std::string out = TempPath("stats.bin");
  const std::string basis_out = TempPath("key_basis.bin");
  auto r = RunKvserve({"calibrate", "--model", kFixture, "--text", kText, "--out", out, "--max-tokens", "3000",
                       "--window", "128", "--threads", "1", "--key-basis-out", basis_out});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_NE(r.err.find("[calibrate] 3000 text tokens"), std::string::npos) << r.err;
  auto stats = compression::LoadStats(out);
  ASSERT_TRUE(stats.ok()) << stats.status();
  auto cfg = model::LoadModelConfig(kFixture);
  ASSERT_TRUE(cfg.ok());
  EXPECT_TRUE(compression::CheckCompatible(*stats, *cfg, model::RopeInvFreq(*cfg)).ok());
  EXPECT_GE(stats->num_tokens, 3000);
  EXPECT_NE(stats->source.find("calibration_text.txt"), std::string::npos) << stats->source;
  fs::remove(out);
  // The low-rank key basis of the same pass: every key and query row counted, for this model.
  auto basis = compression::LoadKeyBasis(basis_out);
  ASSERT_TRUE(basis.ok()) << basis.status();
  EXPECT_TRUE(compression::CheckCompatible(*basis, *cfg, model::RopeInvFreq(*cfg)).ok());
  EXPECT_EQ(basis->num_tokens, stats->num_tokens);
  EXPECT_NE(r.err.find("post-RoPE key PCA"), std::string::npos) << r.err;
  fs::remove(basis_out);
}

TEST(CalibrateCommand, RefusesShortTextsUnlessAskedForLess) {
  const std::string text = TempPath("short.txt");
  std::ofstream(text) << "A short text of a few words.";
  const std::string out = TempPath("never.bin");
  auto r = RunKvserve({"calibrate", "--model", kFixture, "--text", text, "--out", out});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("fewer than the 32768"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--max-tokens"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  fs::remove(text);
}

TEST(CalibrateCommand, BadInvocationsAreUsageErrors) {
  EXPECT_EQ(RunKvserve({"calibrate", "--out", "x"}).code, kExitUsage);  // no --text
  EXPECT_EQ(RunKvserve({"calibrate", "--text", kText}).code, kExitUsage);  // no --out
  auto r = RunKvserve({"calibrate", "--text", kText, "--out", "x", "--max-tokens", "lots"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--max-tokens=lots: not a number"), std::string::npos) << r.err;
  EXPECT_EQ(RunKvserve({"calibrate", "--text", kText, "--out", "x", "--window", "1"}).code, kExitUsage);
  r = RunKvserve({"calibrate", "--model", kFixture, "--text", TempPath("missing.txt"), "--out", "x"});
  EXPECT_EQ(r.code, kExitFailure);
  EXPECT_NE(r.err.find("cannot open"), std::string::npos) << r.err;
  r = RunKvserve({"help"});
  EXPECT_NE(r.out.find("kvserve calibrate --model DIR --text FILE --out FILE"), std::string::npos) << r.out;
}

// The shipped statistics of the bundled model load and still match its config.
TEST(CalibrateCommand, BundledModelStatsMatchTheBundledModel) {
  const std::string dir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
  if (!fs::exists(dir + "/triattention_stats.bin")) GTEST_SKIP() << "no bundled stats yet";
  auto stats = compression::LoadStats(dir + "/triattention_stats.bin");
  ASSERT_TRUE(stats.ok()) << stats.status();
  auto cfg = model::LoadModelConfig(dir);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(compression::CheckCompatible(*stats, *cfg, model::RopeInvFreq(*cfg)).ok());
  EXPECT_GE(stats->num_tokens, 32768);
}

}  // namespace
}  // namespace kvserve::app
