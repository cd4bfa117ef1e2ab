// The bundled trained model (models/kvs-tiny) against its golden fixture
// (tests/fixtures/kvs_tiny_golden.json, PyTorch float64): top-20 logits at every prompt
// position within 1e-3, the 64-token greedy continuation identical token for token, and the
// `kvserve generate` smoke check (completion words found in /usr/share/dict/words).
#include <cctype>
#include <set>
#include <sstream>

#include "app/cli.h"
#include "tests/unit/model/model_test_util.h"
#include "tests/unit/run_cli.h"

namespace kvserve::model {
namespace {

using testing::Argmax;
using testing::PagedSession;
using testing::ReadFile;

const std::string kModelDir = std::string(KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";

struct Golden {
  std::string name;
  std::vector<int32_t> ids;
  std::vector<std::vector<int32_t>> top_ids;  // per position
  std::vector<std::vector<float>> top_logits;
  std::vector<int32_t> greedy;
};

std::vector<Golden> LoadGolden() {
  auto j = nlohmann::json::parse(ReadFile(std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/kvs_tiny_golden.json"));
  std::vector<Golden> out;
  for (const auto& p : j.at("prompts")) {
    Golden g;
    g.name = p.value("name", "");
    g.ids = p.at("ids").get<std::vector<int32_t>>();
    for (const auto& t : p.at("top20")) {
      g.top_ids.push_back(t.at("ids").get<std::vector<int32_t>>());
      g.top_logits.push_back(t.at("logits").get<std::vector<float>>());
    }
    g.greedy = p.at("greedy").get<std::vector<int32_t>>();
    out.push_back(std::move(g));
  }
  return out;
}

class KvsTinyGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ModelOptions opts;
    opts.threads = 1;  // the suite runs binaries in parallel; threads are covered by model_test
    opts.max_tokens_per_step = 1024;
    auto m = LlamaModel::Load(kModelDir, opts);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m).release();
    golden_ = new std::vector<Golden>(LoadGolden());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete golden_;
  }
  static LlamaModel* model_;
  static std::vector<Golden>* golden_;
};
LlamaModel* KvsTinyGolden::model_ = nullptr;
std::vector<Golden>* KvsTinyGolden::golden_ = nullptr;

TEST_F(KvsTinyGolden, PromptLogitsMatchTop20) {
  ASSERT_FALSE(golden_->empty());
  const int vocab = model_->config().vocab_size;
  for (const Golden& g : *golden_) {
    PagedSession session(*model_, 16, config::KvDtype::kFp32, 128);
    const int s = session.NewSequence();
    auto logits = session.Step({{s, g.ids}})[0];
    ASSERT_EQ(g.top_ids.size(), g.ids.size()) << g.name;
    double worst = 0;
    for (size_t pos = 0; pos < g.ids.size(); ++pos) {
      for (size_t k = 0; k < g.top_ids[pos].size(); ++k) {
        const float ours = logits[pos * vocab + static_cast<size_t>(g.top_ids[pos][k])];
        worst = std::max(worst, std::abs(static_cast<double>(ours) - g.top_logits[pos][k]));
      }
    }
    EXPECT_LE(worst, 1e-3) << g.name << ": max |logit diff| over top-20 ids";
    RecordProperty("max_abs_diff_" + g.name, std::to_string(worst));
  }
}

TEST_F(KvsTinyGolden, GreedyContinuationsIdenticalInOneBatch) {
  // Every prompt prefills in chunks of 48 and decodes, all sharing each step's batch.
  const int vocab = model_->config().vocab_size;
  const size_t n = golden_->size();
  PagedSession session(*model_, 16, config::KvDtype::kFp32, 512);
  std::vector<int> seqs;
  for (size_t i = 0; i < n; ++i) seqs.push_back(session.NewSequence());
  std::vector<size_t> prefilled(n, 0);
  std::vector<std::vector<int32_t>> generated(n);
  for (;;) {
    std::vector<PagedSession::Work> work;
    std::vector<size_t> who;
    for (size_t i = 0; i < n; ++i) {
      const Golden& g = (*golden_)[i];
      if (prefilled[i] < g.ids.size()) {
        const size_t end = std::min(g.ids.size(), prefilled[i] + 48);
        work.push_back({seqs[i], std::vector<int32_t>(g.ids.begin() + static_cast<int64_t>(prefilled[i]),
                                                      g.ids.begin() + static_cast<int64_t>(end))});
        prefilled[i] = end;
      } else if (generated[i].size() < g.greedy.size()) {
        work.push_back({seqs[i], {generated[i].back()}});
      } else {
        continue;
      }
      who.push_back(i);
    }
    if (work.empty()) break;
    auto out = session.Step(work);
    for (size_t w = 0; w < work.size(); ++w) {
      const size_t i = who[w];
      if (prefilled[i] < (*golden_)[i].ids.size()) continue;  // a prompt chunk that is not the last
      generated[i].push_back(Argmax(out[w].data() + out[w].size() - vocab, vocab));
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(generated[i], (*golden_)[i].greedy) << (*golden_)[i].name;
}

TEST_F(KvsTinyGolden, GenerateSmokeTextIsEnglish) {
  const app::testing::CliResult run = app::testing::RunKvserve(
      {"generate", "--prompt", "And it came to pass", "--max-tokens", "48", "--temperature", "0", "--model", kModelDir});
  ASSERT_EQ(run.code, app::kExitOk) << run.err;
  std::set<std::string> dict;
  {
    std::istringstream words(ReadFile("/usr/share/dict/words"));
    for (std::string w; std::getline(words, w);) dict.insert(w);
  }
  ASSERT_GT(dict.size(), 1000u) << "/usr/share/dict/words (Debian wamerican) is missing";
  int total = 0, found = 0;
  std::istringstream text(run.out);
  for (std::string w; text >> w;) {
    std::string core;
    for (char c : w) {
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '\'') core += c;
    }
    while (!core.empty() && core.back() == '\'') core.pop_back();
    while (!core.empty() && core.front() == '\'') core.erase(core.begin());
    if (core.empty()) continue;
    ++total;
    std::string lower = core;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    found += dict.count(core) || dict.count(lower) ? 1 : 0;
  }
  ASSERT_GT(total, 10) << run.out;
  EXPECT_GE(found, 0.9 * total) << found << "/" << total << " words in the dictionary: " << run.out;
}

}  // namespace
}  // namespace kvserve::model
