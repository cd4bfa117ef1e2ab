#include "engine/cpu_model_runner.h"

#include "base/check.h"
#include "engine/draft_verifier.h"
#include "engine/prompt_logprobs.h"

namespace kvserve::engine {

CpuModelRunner::CpuModelRunner(model::LlamaModel& model, cache::KvStorage& storage,
                               cache::KvStorage* swap,
                               const compression::PolicyContext* compression,
                               std::span<cache::KvStorage* const> demote_tiers,
                               const compression::PackedKeyBasis* key_basis,
                               const cache::LayerGroups& groups)
    : model_(model), storage_(storage), swap_(swap), sampler_(model.config().vocab_size) {
  const auto& layout = storage_.layout();
  KVS_CHECK(storage_.host_addressable(), "the CPU runner needs host-addressable KV storage");
  const bool grouped = groups.enabled();
  KVS_CHECK(
      !grouped || (groups.num_layers() == layout.num_layers && groups.group_size == layout.slots()),
      "layer groups do not match the KV layout");
  for (int l = 0; l < layout.num_layers; ++l) {
    const int slot = grouped ? groups.slot[static_cast<size_t>(l)] : l;
    const bool main_table = !grouped || groups.group[static_cast<size_t>(l)] < 0;
    layer_data_.push_back(storage_.layer_data(slot));
    layer_scales_.push_back(storage_.layer_scales(slot));
    compact_data_.push_back(main_table ? storage_.layer_data(slot) : nullptr);
    compact_scales_.push_back(main_table ? storage_.layer_scales(slot) : nullptr);
  }
  if (grouped) layer_group_ = groups.group;
  tier_data_.resize(demote_tiers.size());
  tier_scales_.resize(demote_tiers.size());
  for (size_t t = 0; t < demote_tiers.size(); ++t) {
    cache::KvStorage& st = *demote_tiers[t];
    KVS_CHECK(st.host_addressable(), "the CPU runner needs host-addressable demotion tiers");
    for (int l = 0; l < layout.num_layers; ++l) {
      tier_data_[t].push_back(st.layer_data(l));
      tier_scales_[t].push_back(st.layer_scales(l));
    }
  }
  for (size_t t = 0; t < demote_tiers.size(); ++t) {
    const cache::KvLayout& tl = demote_tiers[t]->layout();
    const float* const* basis = nullptr;
    if (tl.key_rank > 0) {
      KVS_CHECK(key_basis != nullptr && key_basis->rank() == tl.key_rank,
                "low-rank tier without its key basis");
      basis = key_basis->layers();
    }
    tiers_.push_back({tl, tier_data_[t].data(), tl.has_scales() ? tier_scales_[t].data() : nullptr,
                      demote_tiers[t]->num_blocks(), basis});
  }
  kv_access_ = std::make_unique<compression::HostKvAccess>(layout, compact_data_, compact_scales_);
  compressor_ = std::make_unique<compression::KvCompressor>(compression, *kv_access_, tiers_);
  book_ = std::make_unique<RunnerBook>(layout.block_size, *compressor_,
                                       grouped ? groups.num_window_groups : 0);
}

void CpuModelRunner::EnableLora(const lora::ActiveAdapters& table, int max_loras,
                                int max_lora_rank) {
  lora_table_ = &table;
  lora_targets_ = std::make_unique<lora::TargetTable>(lora::TargetTable::ForModel(model_.config()));
  lora_step_ = std::make_unique<lora::LoraStep>(*lora_targets_, max_loras, max_lora_rank,
                                                model_.max_tokens_per_step());
}

absl::Status CpuModelRunner::Execute(const scheduler::StepPlan& plan,
                                     scheduler::StepResult& result) {
  result.clear();
  result.step_id = plan.step_id;
  // Pipeline stage 0 (model/stage_link.h): the other stages apply the same moves to their layers.
  model::StageLink* const link = model_.stage_link();
  if (link != nullptr) {
    KVS_RETURN_IF_ERROR(link->BeginStep(plan.step_id, plan.swap_out, plan.swap_in, plan.copies));
  }
  KVS_RETURN_IF_ERROR(ApplyCopies(plan, storage_, swap_));
  KVS_RETURN_IF_ERROR(book_->Begin(plan));

  if (!plan.seqs.empty()) {
    model::BatchBuilder& builder = book_->builder();
    const int vocab = model_.config().vocab_size;
    logits_.resize(static_cast<size_t>(builder.num_logits_rows()) * static_cast<size_t>(vocab));
    model::ForwardBatch batch = builder.batch();
    if (lora_step_ != nullptr) {
      // Batch rows follow plan order (RunnerBook::Begin), num_tokens rows per sequence.
      lora_step_->Clear();
      for (const scheduler::ScheduledSeq& q : plan.seqs) {
        int slot = -1;
        if (q.lora_id >= 0) {
          slot = lora_step_->SlotFor(*lora_table_->Get(q.lora_id));
          if (slot < 0) {
            return absl::InternalError(absl::StrCat("step ", plan.step_id, " holds more than ",
                                                    lora_step_->max_loras(), " LoRA adapters"));
          }
        }
        lora_step_->AddRows(slot, q.num_tokens);
      }
      batch.lora = lora_step_->Finish();
    }
    model::KvCacheView view;
    view.layout = storage_.layout();
    view.num_blocks = storage_.num_blocks();
    view.layer_data = layer_data_;
    if (view.layout.has_scales()) view.layer_scales = layer_scales_;
    view.lower_tiers = tiers_;
    view.layer_group = layer_group_;
    // Side outputs only for the policies that read them (snapkv: queries, h2o: mass).
    const model::ForwardObservers* observers =
        compressor_->PrepareObservers(book_->batch_seqs(), batch.positions);
    KVS_RETURN_IF_ERROR(model_.Forward(batch, view, logits_, observers));

    // Logits rows, in plan order: 1 + num_draft for a sampling sequence, every row of a chunk
    // that scores prompt tokens (its last row is the sampling row when it samples), else none.
    size_t row = 0;
    size_t seq_index = 0;
    const size_t v = static_cast<size_t>(vocab);
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      const scheduler::ScheduledSeq& q = plan.seqs[i];
      const size_t all_rows = static_cast<size_t>(book_->logits_rows(i));
      const RunnerBook::Seq& ps = book_->plan_seq(i);
      if (ps.embed != scheduler::Pooling::kNone) {
        if (link != nullptr) {  // the final hidden states stay on the last stage
          return absl::UnimplementedError(
              "embeddings are not served under pipeline parallelism yet");
        }
        PoolPromptRows(q, ps, row, all_rows, result.hidden);
      }
      if (book_->scores_prompt(i) && ps.prompt_logprobs >= 0) {
        ScorePromptRows(q.seq, ps.prompt(), q.first_position,
                        std::span<const float>(logits_.data() + row * v, all_rows * v), vocab,
                        ps.prompt_logprobs, prompt_order_, result.prompt_logprobs);
      }
      if (!q.sample) {
        row += all_rows;
        continue;
      }
      RunnerBook::Seq& s = *book_->sampling_seqs()[seq_index++];
      const size_t rows = 1 + static_cast<size_t>(q.num_draft);
      std::span<const float> logits(logits_.data() + (row + all_rows - rows) * v, rows * v);
      if (q.num_draft == 0) {
        SampleNext(sampler_, s, q.seq, logits, q.num_generated, result.sampled);
      } else {
        const auto draft =
            std::span<const int32_t>(plan.token_ids)
                .subspan(static_cast<size_t>(q.token_begin + q.num_tokens - q.num_draft),
                         static_cast<size_t>(q.num_draft));
        const int32_t accepted =
            VerifyDraft(sampler_, s, q.seq, logits, vocab, draft, q.num_generated, result.sampled);
        book_->RejectGuesses(i, q, q.num_draft - accepted);
      }
      row += all_rows;
    }
    // After verification: rejected guesses' query rows are not observed (RejectGuesses).
    if (observers != nullptr) compressor_->FinishObservers();
  }
  if (link != nullptr) KVS_RETURN_IF_ERROR(link->EndStep());
  return book_->Finish(plan, result);
}

void CpuModelRunner::PoolPromptRows(const scheduler::ScheduledSeq& q, const RunnerBook::Seq& s,
                                    size_t row, size_t rows,
                                    std::vector<scheduler::HiddenPart>& out) const {
  // The rows at hand: the whole chunk (mean pooling asks for every prefill row), else the
  // sampling row only (the chunk's last).
  const int64_t chunk_end = q.first_position + q.num_tokens;
  const int64_t first = chunk_end - static_cast<int64_t>(rows);
  const int64_t end = std::min<int64_t>(chunk_end, s.num_prompt);
  if (rows == 0 || first >= end) return;
  const size_t d = static_cast<size_t>(model_.config().hidden_size);
  std::span<const float> hidden = model_.final_hidden_rows();
  scheduler::HiddenPart part;
  part.seq = q.seq;
  part.values.assign(d, 0.0f);
  if (s.embed == scheduler::Pooling::kLast) {
    if (chunk_end != s.num_prompt) return;  // not the chunk with the last prompt token
    const float* r = hidden.data() + (row + rows - 1) * d;
    std::copy(r, r + d, part.values.begin());
    part.first_position = s.num_prompt - 1;
    part.num_rows = 1;
  } else {
    for (int64_t p = first; p < end; ++p) {
      const float* r = hidden.data() + (row + static_cast<size_t>(p - first)) * d;
      for (size_t k = 0; k < d; ++k) part.values[k] += r[k];
    }
    part.first_position = static_cast<int32_t>(first);
    part.num_rows = static_cast<int32_t>(end - first);
  }
  out.push_back(std::move(part));
}

}  // namespace kvserve::engine
