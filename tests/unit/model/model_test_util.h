// Shared helpers of the model tests: fixture paths, reference logits, and a tiny paged
// "session" that runs sequences step by step through LlamaModel with scattered blocks.
#pragma once

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"
#include "model/safetensors.h"
#include "nlohmann/json.hpp"

namespace kvserve::model::testing {

inline std::string FixtureDir(const std::string& variant) {
  return std::string(KVSERVE_SOURCE_DIR) + "/tests/fixtures/model/" + variant;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct ReferencePrompt {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
  std::vector<float> logits;  // [ids.size()][vocab]
};

inline std::vector<ReferencePrompt> LoadReference(const std::string& variant, int vocab) {
  const std::string dir = FixtureDir(variant);
  auto j = nlohmann::json::parse(ReadFile(dir + "/reference.json"));
  auto ckpt = SafetensorsCheckpoint::OpenFile(dir + "/reference.safetensors");
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<ReferencePrompt> out;
  for (size_t i = 0; i < j["prompts"].size(); ++i) {
    ReferencePrompt p;
    p.ids = j["prompts"][i]["ids"].get<std::vector<int32_t>>();
    p.greedy = j["prompts"][i]["greedy"].get<std::vector<int32_t>>();
    p.logits.resize(p.ids.size() * vocab);
    const int64_t shape[2] = {static_cast<int64_t>(p.ids.size()), vocab};
    auto st = ckpt->LoadF32("logits_" + std::to_string(i), shape, p.logits);
    EXPECT_TRUE(st.ok()) << st;
    out.push_back(std::move(p));
  }
  return out;
}

// Sequences sharing one HostKvBuffer; blocks handed out in a shuffled order so block tables
// are never contiguous. Step() runs any mix of (sequence, n tokens) in one forward pass.
class PagedSession {
 public:
  PagedSession(LlamaModel& model, int block_size, config::KvDtype dtype, int64_t num_blocks, uint32_t seed = 7)
      : model_(model), kv_(model.KvLayoutFor(block_size, dtype), num_blocks), builder_(block_size),
        block_size_(block_size) {
    free_.resize(num_blocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937 gen(seed);
    std::shuffle(free_.begin(), free_.end(), gen);
  }

  int NewSequence() {
    seqs_.emplace_back();
    return static_cast<int>(seqs_.size()) - 1;
  }

  struct Work {
    int seq;
    std::vector<int32_t> tokens;
    int32_t position_shift = 0;  // positions = physical index + shift
  };
  // Runs one step; returns the logits of every row, per work item ([n][vocab] each).
  std::vector<std::vector<float>> Step(const std::vector<Work>& work, const ForwardObservers* obs = nullptr) {
    builder_.Clear();
    for (const Work& w : work) {
      Seq& s = seqs_[static_cast<size_t>(w.seq)];
      const int64_t need = s.kv_len + static_cast<int64_t>(w.tokens.size());
      while (static_cast<int64_t>(s.table.size()) * block_size_ < need) {
        s.table.push_back(free_.back());
        free_.pop_back();
      }
      builder_.AddSequence(w.tokens, s.kv_len + w.position_shift, s.kv_len, s.table, LogitsWanted::kAll);
      s.kv_len = static_cast<int32_t>(need);
    }
    const int vocab = model_.config().vocab_size;
    std::vector<float> logits(static_cast<size_t>(builder_.num_logits_rows()) * vocab);
    auto st = model_.Forward(builder_.batch(), kv_.view(), logits, obs);
    EXPECT_TRUE(st.ok()) << st;
    std::vector<std::vector<float>> out;
    size_t row = 0;
    for (const Work& w : work) {
      out.emplace_back(logits.begin() + static_cast<int64_t>(row * vocab),
                       logits.begin() + static_cast<int64_t>((row + w.tokens.size()) * vocab));
      row += w.tokens.size();
    }
    return out;
  }

  HostKvBuffer& kv() { return kv_; }

 private:
  struct Seq {
    int32_t kv_len = 0;
    std::vector<int32_t> table;
  };
  LlamaModel& model_;
  HostKvBuffer kv_;
  BatchBuilder builder_;
  int block_size_;
  std::vector<int32_t> free_;
  std::vector<Seq> seqs_;
};

inline double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

inline int32_t Argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace kvserve::model::testing
