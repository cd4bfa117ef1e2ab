#include "speculative/draft_model_proposer.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "compression/policy_factory.h"

namespace kvserve::speculative {

absl::StatusOr<std::unique_ptr<DraftModelProposer>> DraftModelProposer::Load(
    const std::string& model_dir, int32_t target_vocab_size, const DraftModelOptions& options,
    base::Logger logger) {
  model::ModelOptions mo;
  mo.threads = options.threads;
  mo.max_tokens_per_step = options.max_tokens_per_step;
  mo.max_context = options.max_context;
  mo.logger = logger.child("draft-model");
  auto m = model::LlamaModel::Load(model_dir, mo);
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat("speculative.draft_model=", model_dir, ": ",
                                                        m.status().message()));
  }
  if ((*m)->config().vocab_size != target_vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("speculative.draft_model=", model_dir, ": vocabulary of ",
                     (*m)->config().vocab_size, " tokens, the target model's has ",
                     target_vocab_size, " (a draft model must share the target's tokenizer)"));
  }
  // TriAttention statistics of the draft model itself (its own queries): optional, but a file
  // that is there must match.
  std::unique_ptr<compression::TriAttentionStats> stats;
  const std::string stats_path = compression::StatsPathFor("", model_dir);
  if (std::filesystem::exists(stats_path)) {
    auto st = compression::LoadStatsForModel(stats_path, (*m)->config(), (*m)->rope_inv_freq());
    if (!st.ok()) {
      return absl::Status(st.status().code(), absl::StrCat("speculative.draft_model=", model_dir,
                                                           ": ", st.status().message()));
    }
    stats = std::make_unique<compression::TriAttentionStats>(std::move(*st));
  } else {
    logger.info(
        "no TriAttention statistics at %s: triattention requests get no draft-model guesses",
        stats_path);
  }
  return Create(std::move(*m), options, std::move(logger), std::move(stats));
}

absl::StatusOr<std::unique_ptr<DraftModelProposer>> DraftModelProposer::Create(
    std::unique_ptr<model::LlamaModel> model, const DraftModelOptions& options, base::Logger logger,
    std::unique_ptr<compression::TriAttentionStats> stats) {
  if (options.clock == nullptr) {
    return absl::InvalidArgumentError(
        "speculative.draft_model: no clock given (DraftModelOptions)");
  }
  if (model->config().any_sliding_layer()) {
    return absl::InvalidArgumentError(
        "speculative.draft_model: sliding-window draft models are not supported");
  }
  config::CacheConfig c;
  c.block_size = options.block_size;
  c.kv_bytes = options.kv_bytes;
  c.kv_dtype = config::KvDtype::kFp32;
  c.enable_prefix_caching = false;
  c.layer_groups = false;
  c.host_swap_bytes = 0;
  c.host_cache_bytes = 0;
  auto kv = cache::MakeHostKvCache(c, model->KvLayoutFor(c.block_size, c.kv_dtype),
                                   logger.child("draft-cache"));
  if (!kv.ok()) {
    return absl::Status(kv.status().code(),
                        absl::StrCat("speculative.draft_kv_bytes: ", kv.status().message()));
  }
  return std::unique_ptr<DraftModelProposer>(new DraftModelProposer(
      std::move(model), std::move(*kv), std::move(stats), options, std::move(logger)));
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<model::LlamaModel> model,
                                       cache::HostKvCache kv,
                                       std::unique_ptr<compression::TriAttentionStats> stats,
                                       const DraftModelOptions& options, base::Logger logger)
    : model_(std::move(model)),
      kv_(std::move(kv)),
      options_(options),
      logger_(std::move(logger)),
      builder_(options.block_size) {
  const cache::KvLayout& layout = kv_.storage->layout();
  for (int l = 0; l < layout.num_layers; ++l) {
    layer_data_.push_back(kv_.storage->layer_data(l));
    layer_scales_.push_back(kv_.storage->layer_scales(l));
  }
  options_.max_tokens_per_step = std::max(1, model_->max_tokens_per_step());
  logits_.resize(static_cast<size_t>(model_->config().vocab_size));
  stats_ = std::move(stats);
  policy_context_ = compression::ContextFor(*model_, stats_.get(), options_.clock);
  kv_access_ = std::make_unique<compression::HostKvAccess>(layout, layer_data_, layer_scales_);
  compressor_ = std::make_unique<compression::KvCompressor>(&policy_context_, *kv_access_);
}

DraftModelProposer::~DraftModelProposer() = default;

int32_t DraftModelProposer::blocks_in_use() const { return kv_.manager->block_pool().num_used(); }

void DraftModelProposer::Release(int64_t seq) {
  kv_.manager->free(cache::SeqId(seq));
  compressor_->Forget(cache::SeqId(seq));
  seqs_.erase(seq);
}

bool DraftModelProposer::Track(int64_t seq, Seq& s, const DraftKv& kv) {
  if (absl::Status st = compressor_->Track(cache::SeqId(seq), kv.params, kv.auto_mode, false);
      !st.ok()) {
    logger_.debug("sequence %d gets no draft-model guesses: %s", static_cast<int>(seq),
                  st.ToString());
    s.refused = true;
    return false;
  }
  s.compressing = true;
  return true;
}

bool DraftModelProposer::RoundAfterCatchUp(int64_t seq, int64_t next_position, bool pressure) {
  const cache::SeqId id(seq);
  std::vector<int32_t>& t = table_scratch_;
  t.clear();
  for (cache::BlockId b : kv_.manager->block_table(id)) t.push_back(b.value());
  absl::StatusOr<std::optional<compression::RoundResult>> r =
      compressor_->EndStep(id, next_position, pressure, t);
  if (!r.ok()) {
    logger_.warn("draft KV compression round failed (no guesses this step): %s",
                 r.status().ToString());
    return false;
  }
  if (r->has_value()) {
    // The round compacted the KV into the table's leading blocks: the rest go back.
    kv_.manager->truncate(id, (*r)->new_phys_len);
    ++rounds_;
  }
  return true;
}

int32_t DraftModelProposer::Step(int64_t seq, std::span<const int32_t> rows, int64_t position,
                                 int64_t kv_len_before, bool want_logits, bool observe) {
  const cache::SeqId id(seq);
  builder_.Clear();
  const auto table = kv_.manager->block_table(id);
  std::vector<int32_t>& t = table_scratch_;
  t.clear();
  for (cache::BlockId b : table) t.push_back(b.value());
  builder_.AddSequence(rows, static_cast<int32_t>(position), static_cast<int32_t>(kv_len_before), t,
                       want_logits ? model::LogitsWanted::kLast : model::LogitsWanted::kNone);
  model::KvCacheView view;
  view.layout = kv_.storage->layout();
  view.num_blocks = kv_.storage->num_blocks();
  view.layer_data = layer_data_;
  if (view.layout.has_scales()) view.layer_scales = layer_scales_;
  const std::span<float> logits(logits_.data(), want_logits ? logits_.size() : 0);
  const model::ForwardBatch batch = builder_.batch();
  const model::ForwardObservers* observers = nullptr;
  compression::BatchSeq one;
  if (observe) {
    // The policy's slot state learns the rows' positions; its side outputs (snapkv's
    // queries) are handed over after the forward.
    const int32_t n = static_cast<int32_t>(rows.size());
    compressor_->BeginStep(id, position, n, kv_len_before + n);
    one = compression::BatchSeq{id, 0, n, kv_len_before + n};
    observers = compressor_->PrepareObservers(std::span<const compression::BatchSeq>(&one, 1),
                                              batch.positions);
  }
  absl::Status st = model_->Forward(batch, view, logits, observers);
  if (observers != nullptr) compressor_->FinishObservers();
  if (!st.ok()) {
    logger_.warn("draft model forward failed (no guesses this step): %s", st.ToString());
    return -1;
  }
  if (!want_logits) return 0;
  // Greedy: the first maximum (lowest id on ties).
  return static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
}

void DraftModelProposer::Propose(int64_t seq, std::span<const int32_t> tokens,
                                 const SpecParams& params, const DraftKv& kv, int max_tokens,
                                 std::vector<int32_t>& out) {
  (void)params;
  out.clear();
  if (max_tokens <= 0 || tokens.empty()) return;
  // Past the draft model's own context its positions are out of range: no guesses (the target
  // may serve longer sequences than its draft).
  if (static_cast<int64_t>(tokens.size()) + max_tokens > model_->config().max_context()) return;
  const cache::SeqId id(seq);
  Seq& s = seqs_[seq];
  if (s.refused) return;
  if (!s.compressing && kv.params.kind != config::CompressionPolicyKind::kFull &&
      !Track(seq, s, kv)) {
    return;
  }
  std::vector<int32_t>& fed = s.fed;
  // 1. Keep what still matches the verified tokens (never the last one: its row's logits
  //    start the draft). A compressing sequence keeps only what was verified when fed: its
  //    slot state's slots; the guess slots after them go, accepted or not.
  size_t keep = 0;
  int64_t phys_keep = 0;
  if (s.compressing) {
    keep = static_cast<size_t>(s.verified);
    if (keep >= tokens.size() ||
        !std::equal(fed.begin(), fed.begin() + static_cast<std::ptrdiff_t>(keep), tokens.begin())) {
      // Not the verified tokens it was fed (never expected: tokens only grow while a
      // sequence holds KV): start over from nothing rather than draft from a wrong history.
      logger_.warn("draft sequence %d: its tokens changed under the draft KV; starting over",
                   static_cast<int>(seq));
      Release(seq);
      return;
    }
    const compression::SlotState* slots = compressor_->slot_state(id);
    phys_keep = slots == nullptr ? 0 : slots->size();
  } else {
    const size_t limit = std::min(fed.size(), tokens.size() - 1);
    while (keep < limit && fed[keep] == tokens[keep]) ++keep;
    phys_keep = static_cast<int64_t>(keep);
  }
  if (kv_.manager->contains(id) && kv_.manager->num_tokens(id) > phys_keep) {
    kv_.manager->truncate(id, phys_keep);
  }
  fed.resize(keep);
  // 2. Catch up, chunked by the model's row limit; the last chunk's last row gives g1. A
  //    compressing sequence's rounds run after each chunk (the policy decides when one is due).
  const int catch_up = static_cast<int>(tokens.size() - keep);
  int32_t guess = -1;
  for (int done = 0; done < catch_up;) {
    const int n = std::min(catch_up - done, options_.max_tokens_per_step);
    const bool last = done + n == catch_up;
    const int64_t kv_len = kv_.manager->contains(id) ? kv_.manager->num_tokens(id) : 0;
    // Room for the chunk, and with the last one for the k - 1 guesses fed back: no room, no
    // guesses (the KV fed so far stays; the next draft goes on from it).
    const bool room =
        kv_.manager->allocate(id, n + (last && !s.compressing ? max_tokens - 1 : 0)).has_value();
    if (!room) {
      s.verified = static_cast<int64_t>(fed.size());
      return;
    }
    guess = Step(seq, tokens.subspan(keep + static_cast<size_t>(done), static_cast<size_t>(n)),
                 static_cast<int64_t>(keep) + done, kv_len, last, s.compressing);
    if (guess < 0) break;
    fed.insert(fed.end(), tokens.begin() + static_cast<std::ptrdiff_t>(keep) + done,
               tokens.begin() + static_cast<std::ptrdiff_t>(keep) + done + n);
    done += n;
    if (s.compressing && !RoundAfterCatchUp(seq, static_cast<int64_t>(fed.size()), kv.pressure)) {
      guess = -1;
      break;
    }
  }
  if (guess < 0) {
    Release(seq);  // the KV is in an unknown state: start over next time
    return;
  }
  s.verified = static_cast<int64_t>(fed.size());
  out.push_back(guess);
  // 3. Each further guess feeds the one before it (past a compressing sequence's slot state).
  if (s.compressing && max_tokens > 1 && !kv_.manager->allocate(id, max_tokens - 1)) {
    NotePeak();
    return;  // room for g1 only
  }
  while (static_cast<int>(out.size()) < max_tokens) {
    const int32_t prev = out.back();
    guess = Step(seq, std::span<const int32_t>(&prev, 1), static_cast<int64_t>(fed.size()),
                 kv_.manager->num_tokens(id) - (max_tokens - static_cast<int64_t>(out.size())),
                 true, false);
    if (guess < 0) {
      Release(seq);
      out.clear();
      return;
    }
    fed.push_back(prev);
    out.push_back(guess);
  }
  // The KV holds the verified tokens (compacted for a compressing sequence) then the k - 1
  // guesses fed back.
  const int64_t verified_slots = s.compressing ? compressor_->slot_state(id)->size() : s.verified;
  KVS_CHECK(
      kv_.manager->num_tokens(id) == verified_slots + static_cast<int64_t>(fed.size()) - s.verified,
      "draft sequence ", seq, ": KV holds ", kv_.manager->num_tokens(id), " slots for ",
      verified_slots, " verified and ", fed.size() - static_cast<size_t>(s.verified), " guesses");
  NotePeak();
}

void DraftModelProposer::NotePeak() { peak_blocks_ = std::max(peak_blocks_, blocks_in_use()); }

}  // namespace kvserve::speculative
