// A tiny paged runner for the LoRA forward tests: sequences sharing one HostKvBuffer (blocks
// handed out shuffled), each step any mix of (sequence, tokens, adapter or none) in one
// forward pass, the adapter rows built with LoraStep as a runner would.
#pragma once

#include <algorithm>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "lora/lora_step.h"
#include "model/batch_builder.h"
#include "model/host_kv_buffer.h"
#include "model/llama_model.h"

namespace kvserve::lora::testing {

class LoraSession {
 public:
  LoraSession(model::LlamaModel& m, const TargetTable* targets, int max_loras = 4,
              int max_lora_rank = 16)
      : model_(m),
        kv_(m.KvLayoutFor(kBlockSize, config::KvDtype::kFp32), kNumBlocks),
        builder_(kBlockSize) {
    free_.resize(kNumBlocks);
    std::iota(free_.begin(), free_.end(), 0);
    std::mt19937 gen(3);
    std::shuffle(free_.begin(), free_.end(), gen);
    if (targets != nullptr) {
      step_.emplace(*targets, max_loras, max_lora_rank, m.max_tokens_per_step());
    }
  }

  int NewSequence() {
    seqs_.emplace_back();
    return static_cast<int>(seqs_.size()) - 1;
  }

  struct Work {
    int seq;
    std::vector<int32_t> tokens;
    const Adapter* adapter = nullptr;
  };
  // Logits of every row, per work item ([n][vocab] each).
  std::vector<std::vector<float>> Step(const std::vector<Work>& work) {
    builder_.Clear();
    if (step_) step_->Clear();
    for (const Work& w : work) {
      Seq& s = seqs_[static_cast<size_t>(w.seq)];
      const int64_t need = s.kv_len + static_cast<int64_t>(w.tokens.size());
      while (static_cast<int64_t>(s.table.size()) * kBlockSize < need) {
        s.table.push_back(free_.back());
        free_.pop_back();
      }
      builder_.AddSequence(w.tokens, s.kv_len, s.kv_len, s.table, model::LogitsWanted::kAll);
      s.kv_len = static_cast<int32_t>(need);
      if (step_) {
        const int slot = w.adapter != nullptr ? step_->SlotFor(*w.adapter) : -1;
        EXPECT_TRUE(w.adapter == nullptr || slot >= 0) << "more adapters than max_loras";
        step_->AddRows(slot, static_cast<int64_t>(w.tokens.size()));
      }
    }
    model::ForwardBatch batch = builder_.batch();
    if (step_) batch.lora = step_->Finish();
    const int vocab = model_.config().vocab_size;
    std::vector<float> logits(static_cast<size_t>(builder_.num_logits_rows()) * vocab);
    auto st = model_.Forward(batch, kv_.view(), logits);
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

 private:
  static constexpr int kBlockSize = 4;
  static constexpr int kNumBlocks = 256;
  struct Seq {
    int32_t kv_len = 0;
    std::vector<int32_t> table;
  };
  model::LlamaModel& model_;
  model::HostKvBuffer kv_;
  model::BatchBuilder builder_;
  std::optional<LoraStep> step_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_;
};

}  // namespace kvserve::lora::testing
