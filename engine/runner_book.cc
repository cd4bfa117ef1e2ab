#include "engine/runner_book.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "engine/runner_conversions.h"
#include "kernels/cpu/paged_attention.h"
#include "structured/compiled_grammar.h"

namespace kvserve::engine {

absl::Status ApplyCopies(const scheduler::StepPlan& plan, cache::KvStorage& storage,
                         cache::KvStorage* swap) {
  if (!plan.swap_out.empty() || !plan.swap_in.empty()) {
    if (swap == nullptr) return absl::InternalError("swap requested but no host swap tier exists");
    // The same two calls for any pair of memory spaces (cache/kv_storage.h).
    KVS_RETURN_IF_ERROR(storage.copy_blocks_to(*swap, plan.swap_out));
    KVS_RETURN_IF_ERROR(storage.copy_blocks_from(*swap, plan.swap_in));
  }
  return storage.copy_blocks(plan.copies);
}

RunnerBook::RunnerBook(int block_size, compression::KvCompressor& compressor, int window_groups)
    : compressor_(compressor),
      block_size_(block_size),
      window_groups_(window_groups),
      builder_(block_size) {}

absl::Status RunnerBook::Begin(const scheduler::StepPlan& plan) {
  for (const auto& n : plan.new_seqs) {
    Seq s;
    s.history = n.history;
    s.num_prompt = n.num_prompt_tokens;
    s.sampling = ToModelParams(n.sampling);
    s.seed = n.sampling.seed.value_or(0);
    s.sample_index = n.sampling.sample_index;
    s.prompt_logprobs = n.sampling.prompt_logprobs;
    s.embed = n.sampling.embed;
    if (n.sampling.grammar != nullptr) {
      // A resumed sequence (after preemption) replays its generated tokens through the grammar.
      s.grammar = n.sampling.grammar;
      s.grammar_state = s.grammar->start();
      for (size_t i = static_cast<size_t>(s.num_prompt); i < s.history.size(); ++i) {
        s.grammar_state = s.grammar->Advance(s.grammar_state, s.history[i]);
      }
    }
    seqs_[n.seq.value()] = std::move(s);
    KVS_RETURN_IF_ERROR(compressor_.Track(n.seq, n.compression, n.compression_auto, n.resume));
  }
  for (const scheduler::TierGrant& g : plan.tier_grants) {
    auto it = seqs_.find(g.seq.value());
    if (it == seqs_.end() || g.tier < 0 || g.tier >= compressor_.num_tiers()) {
      return absl::InternalError(absl::StrCat("tier grant for sequence ", g.seq.value(), " tier ",
                                              g.tier + 1, " the runner cannot place"));
    }
    auto& tables = it->second.tier_tables;
    if (tables.size() < static_cast<size_t>(compressor_.num_tiers()))
      tables.resize(compressor_.num_tiers());
    for (int i = 0; i < g.num_blocks; ++i) {
      tables[static_cast<size_t>(g.tier)].push_back(
          plan.tier_blocks[static_cast<size_t>(g.blocks_begin + i)].value());
    }
  }

  builder_.Clear();
  sampling_seqs_.clear();
  batch_seqs_.clear();
  plan_seqs_.clear();
  scores_prompt_.clear();
  logits_rows_.clear();
  rejected_.assign(plan.seqs.size(), 0);
  for (const auto& q : plan.seqs) {
    auto it = seqs_.find(q.seq.value());
    if (it == seqs_.end()) {
      return absl::InternalError(
          absl::StrCat("sequence ", q.seq.value(), " was never sent to the runner"));
    }
    Seq& s = it->second;
    if (q.table_reset) s.table.clear();
    const size_t need = static_cast<size_t>(q.table_offset + q.num_new_blocks);
    if (s.table.size() < need) s.table.resize(need);
    for (int i = 0; i < q.num_new_blocks; ++i) {
      s.table[static_cast<size_t>(q.table_offset + i)] =
          plan.new_blocks[static_cast<size_t>(q.blocks_begin + i)].value();
    }
    if (window_groups_ > 0) {
      if (q.table_reset) s.window.clear();
      s.window.resize(static_cast<size_t>(window_groups_));
      const int32_t k = q.num_window_blocks / window_groups_;
      for (int j = 0; j < window_groups_; ++j) {
        std::vector<int32_t>& w = s.window[static_cast<size_t>(j)];
        if (w.size() < static_cast<size_t>(q.window_table_offset + k))
          w.resize(static_cast<size_t>(q.window_table_offset + k));
        for (int32_t i = 0; i < k; ++i) {
          w[static_cast<size_t>(q.window_table_offset + i)] =
              plan.window_blocks[static_cast<size_t>(q.window_blocks_begin + j * k + i)].value();
        }
      }
    }
    // New rows append at the sequence's physical end, also after a compaction; positions
    // stay logical.
    const int32_t first_row = static_cast<int32_t>(builder_.num_tokens());
    compressor_.BeginStep(q.seq, q.first_position, q.num_tokens, q.kv_len_after);
    // Demoted tokens: attention reads the tiers' filled blocks, then the pool's (the new rows
    // still land in the pool's blocks: the tier regions are whole blocks, so the physical
    // index of a pool slot moves by a multiple of block_size).
    int32_t demoted = 0;
    std::span<const int32_t> attn_table = s.table;
    for (size_t t = 0; t < s.tier_tables.size(); ++t) {
      demoted += static_cast<int32_t>(compressor_.tier_tokens(q.seq, static_cast<int>(t)));
    }
    if (demoted > 0) {
      s.attn_table.clear();
      for (size_t t = 0; t < s.tier_tables.size(); ++t) {
        const int64_t blocks = compressor_.tier_tokens(q.seq, static_cast<int>(t)) / block_size_;
        for (int64_t b = 0; b < blocks; ++b) {
          const int32_t block = s.tier_tables[t][static_cast<size_t>(b)];
          s.attn_table.push_back(kernels::cpu::TieredBlock(static_cast<int>(t) + 1, block));
        }
      }
      s.attn_table.insert(s.attn_table.end(), s.table.begin(), s.table.end());
      attn_table = s.attn_table;
    }
    batch_seqs_.push_back({q.seq, first_row, q.num_tokens, q.kv_len_after + demoted});
    // Prompt scoring: a row at position p predicts the token at p + 1 (a prompt token while
    // p + 1 < num_prompt). Prefill rows never carry a draft.
    const bool scores = (s.prompt_logprobs >= 0 || s.embed == scheduler::Pooling::kMean) &&
                        q.num_draft == 0 && q.num_tokens > 0 && q.first_position + 1 < s.num_prompt;
    plan_seqs_.push_back(&s);
    scores_prompt_.push_back(scores ? 1 : 0);
    logits_rows_.push_back(scores ? q.num_tokens : q.sample ? 1 + q.num_draft : 0);
    builder_.AddSequence(
        std::span<const int32_t>(plan.token_ids)
            .subspan(static_cast<size_t>(q.token_begin), static_cast<size_t>(q.num_tokens)),
        static_cast<int32_t>(q.first_position),
        static_cast<int32_t>(q.kv_len_after - q.num_tokens + demoted), attn_table,
        q.num_draft > 0 || scores ? model::LogitsWanted::kAll
        : q.sample                ? model::LogitsWanted::kLast
                                  : model::LogitsWanted::kNone);
    if (window_groups_ > 0) builder_.AddWindowTables(s.window);
    if (q.sample) sampling_seqs_.push_back(&s);
  }
  return absl::OkStatus();
}

std::span<const uint64_t> RunnerBook::AllowedFor(const Seq& s) {
  if (s.grammar == nullptr || s.grammar_state == structured::ByteDfa::kDead) return {};
  return s.grammar->MaskFor(s.grammar_state);
}

void RunnerBook::Record(Seq& s, int32_t token) {
  if (s.grammar != nullptr) s.grammar_state = s.grammar->Advance(s.grammar_state, token);
  s.history.push_back(token);
}

void RunnerBook::DraftMasks(const Seq& s, std::span<const int32_t> draft,
                            std::span<std::span<const uint64_t>> out) {
  KVS_CHECK(out.size() > draft.size(), "draft masks: ", out.size(), " entries for ", draft.size(),
            " guesses");
  int32_t state = s.grammar_state;
  for (size_t j = 0; j <= draft.size(); ++j) {
    out[j] = s.grammar == nullptr || state == structured::ByteDfa::kDead
                 ? std::span<const uint64_t>{}
                 : std::span<const uint64_t>(s.grammar->MaskFor(state));
    if (j < draft.size() && s.grammar != nullptr && state != structured::ByteDfa::kDead) {
      state = s.grammar->Advance(state, draft[j]);
    }
  }
}

void RunnerBook::RejectGuesses(size_t i, const scheduler::ScheduledSeq& q, int32_t num_rejected) {
  KVS_CHECK(num_rejected >= 0 && num_rejected <= q.num_draft, "sequence ", q.seq.value(),
            " rejects ", num_rejected, " of ", q.num_draft, " guesses");
  Seq& s = *plan_seqs_[i];
  const int32_t kv_len = q.kv_len_after - num_rejected;
  const size_t keep = static_cast<size_t>((kv_len + block_size_ - 1) / block_size_);
  if (s.table.size() > keep) s.table.resize(keep);
  for (std::vector<int32_t>& w : s.window) {
    // Window tables are indexed by position: the rejected rows' positions end them.
    const int64_t positions = q.first_position + q.num_tokens - num_rejected;
    const size_t wkeep = static_cast<size_t>((positions + block_size_ - 1) / block_size_);
    if (w.size() > wkeep) w.resize(wkeep);
  }
  compressor_.DropRejected(q.seq, num_rejected);
  rejected_[i] = num_rejected;
}

absl::Status RunnerBook::Finish(const scheduler::StepPlan& plan, scheduler::StepResult& result) {
  // Compression rounds, after every KV write of the step and before the next step reads.
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const scheduler::ScheduledSeq& q = plan.seqs[i];
    if (!compressor_.tracking(q.seq)) continue;
    Seq& s = seqs_.at(q.seq.value());
    const int64_t next_position = q.first_position + q.num_tokens - rejected_[i];
    KVS_ASSIGN_OR_RETURN(
        std::optional<compression::RoundResult> r,
        compressor_.EndStep(q.seq, next_position, plan.compress_auto, s.table, s.tier_tables));
    if (r) result.compactions.push_back(ToCompaction(q.seq, next_position, std::move(*r)));
  }
  for (cache::SeqId id : plan.finished) {
    seqs_.erase(id.value());
    compressor_.Forget(id);
  }
  for (cache::SeqId id : plan.preempted) {
    seqs_.erase(id.value());
    if (std::find(plan.parked.begin(), plan.parked.end(), id) != plan.parked.end()) {
      compressor_.Park(id);
    } else {
      compressor_.Forget(id);
    }
  }
  return absl::OkStatus();
}

}  // namespace kvserve::engine
