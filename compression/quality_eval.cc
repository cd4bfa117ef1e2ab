#include "compression/quality_eval.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "cache/host_kv_cache.h"
#include "cache/host_kv_storage.h"
#include "compression/host_kv_access.h"
#include "compression/kv_compressor.h"
#include "kernels/cpu/paged_attention.h"
#include "model/batch_builder.h"
#include "model/forward_batch.h"

namespace kvserve::compression {
namespace {

constexpr cache::SeqId kSeq{1};

// One sequence on its own KV storage, fed chunk by chunk with a round after each forward.
class SequenceDriver {
 public:
  static absl::StatusOr<std::unique_ptr<SequenceDriver>> Create(model::ForwardModel& model, const PolicyContext* context,
                                                                const PolicyParams& params, int64_t max_tokens,
                                                                const EvalOptions& o) {
    auto d = std::unique_ptr<SequenceDriver>(new SequenceDriver(model, o.block_size));
    const cache::KvLayout layout = cache::WithPrecision(model.KvLayoutFor(o.block_size, o.kv_dtype),
                                                        o.k_dtype.value_or(o.kv_dtype),
                                                        o.v_dtype.value_or(o.kv_dtype), o.int4_group);
    const int32_t blocks = static_cast<int32_t>((max_tokens + o.block_size - 1) / o.block_size) + 2;
    KVS_ASSIGN_OR_RETURN(d->storage_, cache::HostKvStorage::Create(layout, blocks));
    for (int l = 0; l < layout.num_layers; ++l) {
      d->layer_data_.push_back(d->storage_->layer_data(l));
      d->layer_scales_.push_back(d->storage_->layer_scales(l));
    }
    d->kv_access_ = std::make_unique<HostKvAccess>(layout, d->layer_data_, d->layer_scales_);
    if (params.demotes()) {
      std::vector<cache::KvLayout> tier_layouts;
      for (config::KvDtype dt : o.demote_dtypes) tier_layouts.push_back(cache::WithPrecision(layout, dt, dt, o.int4_group));
      if (o.lowrank_key_rank > 0) {
        if (o.key_basis == nullptr) return absl::InvalidArgumentError("evaluation: a low-rank tier needs a key basis");
        KVS_ASSIGN_OR_RETURN(PackedKeyBasis packed, PackedKeyBasis::Create(*o.key_basis, o.lowrank_key_rank,
                                                                         o.lowrank_query_aware ? KeyBasisKind::kQueryAware
                                                                                               : KeyBasisKind::kPca));
        d->key_basis_ = std::make_unique<PackedKeyBasis>(std::move(packed));
        tier_layouts.push_back(
            cache::LowRankTierLayout(layout, o.lowrank_key_rank, o.lowrank_k_dtype, o.lowrank_v_dtype));
      }
      if (tier_layouts.empty() || tier_layouts.size() > static_cast<size_t>(kMaxDemoteTiers)) {
        return absl::InvalidArgumentError("evaluation: demote_tokens given without (or with too many) demotion tiers");
      }
      const size_t n = tier_layouts.size();
      d->tier_storages_.resize(n);
      d->tier_data_.resize(n);
      d->tier_scales_.resize(n);
      d->tier_tables_.resize(n);
      for (size_t t = 0; t < n; ++t) {
        const cache::KvLayout& tl = tier_layouts[t];
        const int32_t tb = static_cast<int32_t>(params.demote_tokens[t] / o.block_size);
        KVS_ASSIGN_OR_RETURN(d->tier_storages_[t], cache::HostKvStorage::Create(tl, tb + 1));
        for (int l = 0; l < tl.num_layers; ++l) {
          d->tier_data_[t].push_back(d->tier_storages_[t]->layer_data(l));
          d->tier_scales_[t].push_back(d->tier_storages_[t]->layer_scales(l));
        }
        for (int32_t b = 1; b <= tb; ++b) d->tier_tables_[t].push_back(b);
        d->tier_bytes_ += static_cast<int64_t>(tb) * static_cast<int64_t>(tl.bytes_per_block());
      }
      for (size_t t = 0; t < n; ++t) {
        const cache::KvLayout& tl = d->tier_storages_[t]->layout();
        d->tiers_.push_back({tl, d->tier_data_[t].data(), tl.has_scales() ? d->tier_scales_[t].data() : nullptr,
                             d->tier_storages_[t]->num_blocks(),
                             tl.key_rank > 0 ? d->key_basis_->layers() : nullptr});
      }
    }
    d->compressor_ = std::make_unique<KvCompressor>(context, *d->kv_access_, d->tiers_);
    KVS_RETURN_IF_ERROR(d->compressor_->Track(kSeq, params, /*auto_mode=*/false, /*resume=*/false));
    d->block_size_ = o.block_size;
    d->num_blocks_ = blocks;
    return d;
  }

  // Feeds `tokens` at the next positions in one forward; the logits of the rows `wanted`
  // selects land in `logits` ([rows][vocab]).
  absl::Status Feed(std::span<const int32_t> tokens, model::LogitsWanted wanted, std::vector<float>& logits) {
    const int n = static_cast<int>(tokens.size());
    const int64_t kv_len = phys_len_ + n;
    const int64_t need_blocks = (kv_len + block_size_ - 1) / block_size_;
    if (need_blocks >= num_blocks_) return absl::ResourceExhaustedError("evaluation sequence outgrew its KV storage");
    // Identity table over blocks 1..: block 0 stays the null block by convention.
    while (static_cast<int64_t>(table_.size()) < need_blocks) table_.push_back(static_cast<int32_t>(table_.size()) + 1);
    // Demoted tokens first, as the serving runner lays them out (engine/runner_book.cc).
    int64_t demoted = 0;
    std::span<const int32_t> attn = table_;
    for (size_t t = 0; t < tiers_.size(); ++t) demoted += compressor_->tier_tokens(kSeq, static_cast<int>(t));
    if (demoted > 0) {
      attn_.clear();
      for (size_t t = 0; t < tiers_.size(); ++t) {
        const int64_t blocks = compressor_->tier_tokens(kSeq, static_cast<int>(t)) / block_size_;
        for (int64_t b = 0; b < blocks; ++b) {
          attn_.push_back(kernels::cpu::TieredBlock(static_cast<int>(t) + 1, tier_tables_[t][static_cast<size_t>(b)]));
        }
      }
      attn_.insert(attn_.end(), table_.begin(), table_.end());
      attn = attn_;
    }
    builder_.Clear();
    builder_.AddSequence(tokens, static_cast<int32_t>(next_position_), static_cast<int32_t>(phys_len_ + demoted), attn,
                         wanted);
    const model::ForwardBatch batch = builder_.batch();
    compressor_->BeginStep(kSeq, next_position_, n, kv_len);
    model::KvCacheView view;
    view.layout = storage_->layout();
    view.num_blocks = storage_->num_blocks();
    view.layer_data = layer_data_;
    if (view.layout.has_scales()) view.layer_scales = layer_scales_;
    view.lower_tiers = tiers_;
    logits.resize(static_cast<size_t>(builder_.num_logits_rows()) * static_cast<size_t>(model_.config().vocab_size));
    const BatchSeq bs[1] = {{kSeq, 0, n, kv_len + demoted}};
    const model::ForwardObservers* observers = compressor_->PrepareObservers(bs, batch.positions);
    KVS_RETURN_IF_ERROR(model_.Forward(batch, view, logits, observers));
    if (observers != nullptr) compressor_->FinishObservers();
    phys_len_ = kv_len;
    next_position_ += n;
    stats_.tokens_seen = next_position_;
    stats_.peak_kv_tokens = std::max(stats_.peak_kv_tokens, phys_len_);
    stats_.peak_kv_bytes = std::max<int64_t>(
        stats_.peak_kv_bytes, need_blocks * static_cast<int64_t>(storage_->layout().bytes_per_block()) + tier_bytes_);
    KVS_ASSIGN_OR_RETURN(std::optional<RoundResult> r,
                         compressor_->EndStep(kSeq, next_position_, /*pressure=*/true, table_, tier_tables_));
    if (r) {
      phys_len_ = r->new_phys_len;
      ++stats_.rounds;
    }
    return absl::OkStatus();
  }

  const SequenceStats& stats() const { return stats_; }

  // Fraction of (row, position) pairs of `positions` the sequence's KV holds now, over every
  // (layer, KV head) row; 1 when the policy does not track slots (full) or nothing is asked.
  double HeldFraction(std::span<const int32_t> positions) const {
    const SlotState* s = compressor_->slot_state(kSeq);
    if (positions.empty() || s == nullptr || !s->tracks_slots()) return 1.0;
    int64_t held = 0, asked = 0;
    for (int l = 0; l < s->options().num_layers; ++l) {
      for (int h = 0; h < s->options().num_kv_heads; ++h) {
        const std::span<const int32_t> row = s->positions(l, h);  // ascending (slot_state.h)
        for (int32_t p : positions) {
          bool in = std::binary_search(row.begin(), row.end(), p);
          // Demoted tokens are held too (at lower precision); tier rows are not sorted.
          for (size_t t = 0; t < tiers_.size() && !in; ++t) {
            const TierSlots* ts = compressor_->tier_slots(kSeq, static_cast<int>(t));
            const std::span<const int32_t> tr = ts->row(static_cast<int64_t>(l) * s->options().num_kv_heads + h);
            in = std::find(tr.begin(), tr.end(), p) != tr.end();
          }
          held += in ? 1 : 0;
          ++asked;
        }
      }
    }
    return static_cast<double>(held) / static_cast<double>(asked);
  }
  int vocab() const { return model_.config().vocab_size; }

 private:
  SequenceDriver(model::ForwardModel& model, int block_size) : model_(model), builder_(block_size) {}

  model::ForwardModel& model_;
  std::unique_ptr<cache::HostKvStorage> storage_;
  std::vector<std::byte*> layer_data_;
  std::vector<float*> layer_scales_;
  std::unique_ptr<HostKvAccess> kv_access_;
  // Demotion tiers (EvalOptions::demote_dtypes), identity tables over blocks 1...
  std::vector<std::unique_ptr<cache::HostKvStorage>> tier_storages_;
  std::vector<std::vector<std::byte*>> tier_data_;
  std::vector<std::vector<float*>> tier_scales_;
  std::unique_ptr<PackedKeyBasis> key_basis_;  // the low-rank tier's, when there is one
  std::vector<kernels::cpu::KvTierStorage> tiers_;
  std::vector<std::vector<int32_t>> tier_tables_;
  std::vector<int32_t> attn_;
  int64_t tier_bytes_ = 0;
  std::unique_ptr<KvCompressor> compressor_;
  model::BatchBuilder builder_;
  std::vector<int32_t> table_;
  int block_size_ = 16;
  int32_t num_blocks_ = 0;
  int64_t phys_len_ = 0;
  int64_t next_position_ = 0;
  SequenceStats stats_;
};

double LogProb(std::span<const float> logits, int32_t token) {
  double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  return static_cast<double>(logits[static_cast<size_t>(token)]) - mx - std::log(sum);
}

int32_t Argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

absl::Status CheckChunk(const model::ForwardModel& model, const EvalOptions& o) {
  if (o.chunk < 1 || o.chunk > model.max_tokens_per_step()) {
    return absl::InvalidArgumentError(absl::StrCat("chunk ", o.chunk, " must be in [1, ", model.max_tokens_per_step(),
                                                   "] (the model's rows per step)"));
  }
  return absl::OkStatus();
}

}  // namespace

double PerplexityResult::perplexity() const { return scored > 0 ? std::exp(nll / static_cast<double>(scored)) : 0.0; }

absl::StatusOr<PerplexityResult> EvalPerplexity(model::ForwardModel& model, const PolicyContext* context,
                                                const PolicyParams& params, std::span<const int32_t> tokens,
                                                const EvalOptions& options) {
  KVS_RETURN_IF_ERROR(CheckChunk(model, options));
  if (tokens.size() < 2) return absl::InvalidArgumentError("perplexity needs at least two tokens");
  KVS_ASSIGN_OR_RETURN(auto d, SequenceDriver::Create(model, context, params, static_cast<int64_t>(tokens.size()),
                                                      options));
  PerplexityResult out;
  std::vector<float> logits;
  const size_t vocab = static_cast<size_t>(d->vocab());
  // The last token is only a target.
  const size_t fed = tokens.size() - 1;
  for (size_t begin = 0; begin < fed; begin += static_cast<size_t>(options.chunk)) {
    const size_t n = std::min(fed - begin, static_cast<size_t>(options.chunk));
    KVS_RETURN_IF_ERROR(d->Feed(tokens.subspan(begin, n), model::LogitsWanted::kAll, logits));
    for (size_t j = 0; j < n; ++j) {
      out.nll -= LogProb(std::span<const float>(logits.data() + j * vocab, vocab), tokens[begin + j + 1]);
      ++out.scored;
    }
  }
  out.stats = d->stats();
  return out;
}

namespace {

// Prefills `prompt` in chunks, then feeds `forced` one token per step; after each step
// `visit(i, logits)` sees the logits that predict forced[i] (i = 0 after the prompt).
template <typename Visit>
absl::Status TeacherForce(SequenceDriver& d, std::span<const int32_t> prompt, std::span<const int32_t> forced,
                          int chunk, std::vector<float>& logits, Visit visit) {
  for (size_t begin = 0; begin < prompt.size(); begin += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prompt.size() - begin, static_cast<size_t>(chunk));
    KVS_RETURN_IF_ERROR(d.Feed(prompt.subspan(begin, n), model::LogitsWanted::kLast, logits));
  }
  for (size_t i = 0; i < forced.size(); ++i) {
    visit(i, std::span<const float>(logits.data(), static_cast<size_t>(d.vocab())));
    KVS_RETURN_IF_ERROR(d.Feed(forced.subspan(i, 1), model::LogitsWanted::kLast, logits));
  }
  return absl::OkStatus();
}

// Greedy continuation from `logits` (the prediction after everything fed so far): one token
// per step for answer.size() tokens; fills out.output and out.correct.
absl::Status GreedyAnswer(SequenceDriver& d, std::span<const int32_t> answer, std::vector<float>& logits,
                          PasskeyResult& out) {
  const size_t vocab = static_cast<size_t>(d.vocab());
  for (size_t i = 0; i < answer.size(); ++i) {
    const int32_t next = Argmax(std::span<const float>(logits.data(), vocab));
    out.output.push_back(next);
    if (i + 1 < answer.size()) {
      const int32_t feed[1] = {next};
      KVS_RETURN_IF_ERROR(d.Feed(feed, model::LogitsWanted::kLast, logits));
    }
  }
  out.correct = std::equal(out.output.begin(), out.output.end(), answer.begin(), answer.end());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PasskeyResult> EvalPasskey(model::ForwardModel& model, const PolicyContext* context,
                                          const PolicyParams& params, std::span<const int32_t> prompt,
                                          std::span<const int32_t> answer, const EvalOptions& options,
                                          std::span<const int32_t> watch) {
  KVS_RETURN_IF_ERROR(CheckChunk(model, options));
  if (prompt.empty() || answer.empty()) return absl::InvalidArgumentError("passkey needs a prompt and an answer");
  KVS_ASSIGN_OR_RETURN(auto d, SequenceDriver::Create(model, context, params,
                                                      static_cast<int64_t>(prompt.size() + answer.size()), options));
  PasskeyResult out;
  std::vector<float> logits;
  KVS_RETURN_IF_ERROR(TeacherForce(*d, prompt, {}, options.chunk, logits, [](size_t, std::span<const float>) {}));
  out.watched_held = d->HeldFraction(watch);
  KVS_RETURN_IF_ERROR(GreedyAnswer(*d, answer, logits, out));
  out.stats = d->stats();
  return out;
}


absl::StatusOr<PerplexityResult> EvalDecodePerplexity(model::ForwardModel& model, const PolicyContext* context,
                                                      const PolicyParams& params, std::span<const int32_t> prompt,
                                                      std::span<const int32_t> forced, const EvalOptions& options) {
  KVS_RETURN_IF_ERROR(CheckChunk(model, options));
  if (prompt.empty() || forced.empty()) return absl::InvalidArgumentError("decode perplexity needs a prompt and text");
  KVS_ASSIGN_OR_RETURN(auto d, SequenceDriver::Create(model, context, params,
                                                      static_cast<int64_t>(prompt.size() + forced.size()), options));
  PerplexityResult out;
  std::vector<float> logits;
  KVS_RETURN_IF_ERROR(TeacherForce(*d, prompt, forced, options.chunk, logits, [&](size_t i, std::span<const float> l) {
    out.nll -= LogProb(l, forced[i]);
    ++out.scored;
  }));
  out.stats = d->stats();
  return out;
}

absl::StatusOr<PasskeyResult> EvalDecodePasskey(model::ForwardModel& model, const PolicyContext* context,
                                                const PolicyParams& params, std::span<const int32_t> prompt,
                                                std::span<const int32_t> forced, std::span<const int32_t> answer,
                                                const EvalOptions& options, std::span<const int32_t> watch) {
  KVS_RETURN_IF_ERROR(CheckChunk(model, options));
  if (prompt.empty() || answer.empty()) return absl::InvalidArgumentError("passkey needs a prompt and an answer");
  KVS_ASSIGN_OR_RETURN(auto d, SequenceDriver::Create(
                                   model, context, params,
                                   static_cast<int64_t>(prompt.size() + forced.size() + answer.size()), options));
  PasskeyResult out;
  std::vector<float> logits;
  KVS_RETURN_IF_ERROR(TeacherForce(*d, prompt, forced, options.chunk, logits, [](size_t, std::span<const float>) {}));
  out.watched_held = d->HeldFraction(watch);
  KVS_RETURN_IF_ERROR(GreedyAnswer(*d, answer, logits, out));
  out.stats = d->stats();
  return out;
}

}  // namespace kvserve::compression
