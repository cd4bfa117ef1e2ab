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
  const config::CacheConfig c = PrivatePoolConfig(options.block_size, options.kv_bytes);
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

std::span<const int32_t> DraftModelProposer::TableOf(int64_t seq) {
  table_scratch_.clear();
  for (cache::BlockId b : kv_.manager->block_table(cache::SeqId(seq))) {
    table_scratch_.push_back(b.value());
  }
  return table_scratch_;
}

absl::Status DraftModelProposer::RunBatch(int num_logits) {
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  logits_.resize(static_cast<size_t>(num_logits) * vocab);
  model::KvCacheView view;
  view.layout = kv_.storage->layout();
  view.num_blocks = kv_.storage->num_blocks();
  view.layer_data = layer_data_;
  if (view.layout.has_scales()) view.layer_scales = layer_scales_;
  const model::ForwardBatch batch = builder_.batch();
  // The policies of compressing sequences observe their catch-up rows (snapkv's queries);
  // guess rows are never observed.
  const model::ForwardObservers* observers =
      observed_.empty() ? nullptr : compressor_->PrepareObservers(observed_, batch.positions);
  absl::Status st = model_->Forward(
      batch, view, std::span<float>(logits_.data(), static_cast<size_t>(num_logits) * vocab),
      observers);
  if (observers != nullptr) compressor_->FinishObservers();
  observed_.clear();
  if (!st.ok())
    logger_.warn("draft model forward failed (no guesses this step): %s", st.ToString());
  return st;
}

int32_t DraftModelProposer::ArgmaxRow(int32_t row) const {
  // Greedy: the first maximum (lowest id on ties).
  const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
  const auto begin =
      logits_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(row) * vocab);
  return static_cast<int32_t>(std::max_element(begin, begin + static_cast<std::ptrdiff_t>(vocab)) -
                              begin);
}

bool DraftModelProposer::Prepare(const DraftTask& t, Work& w) {
  if (t.max_tokens <= 0 || t.tokens.empty()) return false;
  // Past the draft model's own context its positions are out of range: no guesses (the target
  // may serve longer sequences than its draft).
  if (static_cast<int64_t>(t.tokens.size()) + t.max_tokens > model_->config().max_context())
    return false;
  const cache::SeqId id(t.seq);
  Seq& s = seqs_[t.seq];
  if (s.refused) return false;
  if (!s.compressing && t.kv.params.kind != config::CompressionPolicyKind::kFull &&
      !Track(t.seq, s, t.kv)) {
    return false;
  }
  std::vector<int32_t>& fed = s.fed;
  // 1. Keep what still matches the verified tokens (never the last one: its row's logits
  //    start the draft). A compressing sequence keeps only what was verified when fed: its
  //    slot state's slots; the guess slots after them go, accepted or not.
  size_t keep = 0;
  int64_t phys_keep = 0;
  if (s.compressing) {
    keep = static_cast<size_t>(s.verified);
    if (keep >= t.tokens.size() ||
        !std::equal(fed.begin(), fed.begin() + static_cast<std::ptrdiff_t>(keep),
                    t.tokens.begin())) {
      // Not the verified tokens it was fed (never expected: tokens only grow while a
      // sequence holds KV): start over from nothing rather than draft from a wrong history.
      logger_.warn("draft sequence %d: its tokens changed under the draft KV; starting over",
                   static_cast<int>(t.seq));
      Release(t.seq);
      return false;
    }
    const compression::SlotState* slots = compressor_->slot_state(id);
    phys_keep = slots == nullptr ? 0 : slots->size();
  } else {
    const size_t limit = std::min(fed.size(), t.tokens.size() - 1);
    while (keep < limit && fed[keep] == t.tokens[keep]) ++keep;
    phys_keep = static_cast<int64_t>(keep);
  }
  if (kv_.manager->contains(id) && kv_.manager->num_tokens(id) > phys_keep) {
    kv_.manager->truncate(id, phys_keep);
  }
  fed.resize(keep);
  s.verified = static_cast<int64_t>(keep);
  w.seq = t.seq;
  w.keep = keep;
  w.kv_len = phys_keep;
  w.max_tokens = t.max_tokens;
  return true;
}

bool DraftModelProposer::AfterCatchUp(Work& w, const DraftTask& t, size_t index, bool last_chunk) {
  Seq& s = seqs_.at(w.seq);
  s.verified = static_cast<int64_t>(s.fed.size());
  // A compressing sequence's round, when one is due (the policy decides), on verified KV.
  if (s.compressing &&
      !RoundAfterCatchUp(w.seq, static_cast<int64_t>(s.fed.size()), t.kv.pressure)) {
    Release(w.seq);
    w.ok = false;
    return false;
  }
  w.kv_len = kv_.manager->num_tokens(cache::SeqId(w.seq));
  if (last_chunk) {
    guess_buf_[index * static_cast<size_t>(max_k_)] = ArgmaxRow(w.logits_row);
    w.count = 1;
  }
  return true;
}

void DraftModelProposer::CatchUpTogether(std::span<Work> group, std::span<const DraftTask> tasks) {
  builder_.Clear();
  int num_logits = 0;
  for (Work& w : group) {
    const DraftTask& t = tasks[w.task];
    const int n = static_cast<int>(t.tokens.size() - w.keep);
    const cache::SeqId id(w.seq);
    // No room for the catch-up: no guesses (the next draft goes on from what is fed).
    if (!kv_.manager->allocate(id, n)) {
      w.ok = false;
      continue;
    }
    const int32_t row0 = static_cast<int32_t>(builder_.num_tokens());
    builder_.AddSequence(t.tokens.subspan(w.keep), static_cast<int32_t>(w.keep),
                         static_cast<int32_t>(w.kv_len), TableOf(w.seq),
                         model::LogitsWanted::kLast);
    if (seqs_.at(w.seq).compressing) {
      compressor_->BeginStep(id, static_cast<int64_t>(w.keep), n, w.kv_len + n);
      observed_.push_back(compression::BatchSeq{id, row0, n, w.kv_len + n});
    }
    w.logits_row = num_logits++;
  }
  if (num_logits == 0) return;
  const bool ran = RunBatch(num_logits).ok();
  for (Work& w : group) {
    if (!w.ok) continue;
    if (!ran) {
      Release(w.seq);  // the KV is in an unknown state: start over next time
      w.ok = false;
      continue;
    }
    const DraftTask& t = tasks[w.task];
    std::vector<int32_t>& fed = seqs_.at(w.seq).fed;
    fed.insert(fed.end(), t.tokens.begin() + static_cast<std::ptrdiff_t>(w.keep), t.tokens.end());
    AfterCatchUp(w, t, static_cast<size_t>(&w - works_.data()), true);
  }
}

void DraftModelProposer::CatchUpChunked(Work& w, const DraftTask& t) {
  const cache::SeqId id(w.seq);
  const int catch_up = static_cast<int>(t.tokens.size() - w.keep);
  for (int done = 0; done < catch_up;) {
    const int n = std::min(catch_up - done, options_.max_tokens_per_step);
    const bool last = done + n == catch_up;
    if (!kv_.manager->allocate(id, n)) {
      w.ok = false;  // the chunks fed so far stay; the next draft goes on from them
      return;
    }
    builder_.Clear();
    builder_.AddSequence(
        t.tokens.subspan(w.keep + static_cast<size_t>(done), static_cast<size_t>(n)),
        static_cast<int32_t>(w.keep) + done, static_cast<int32_t>(w.kv_len), TableOf(w.seq),
        last ? model::LogitsWanted::kLast : model::LogitsWanted::kNone);
    if (seqs_.at(w.seq).compressing) {
      compressor_->BeginStep(id, static_cast<int64_t>(w.keep) + done, n, w.kv_len + n);
      observed_.push_back(compression::BatchSeq{id, 0, n, w.kv_len + n});
    }
    w.logits_row = 0;
    if (!RunBatch(last ? 1 : 0).ok()) {
      Release(w.seq);
      w.ok = false;
      return;
    }
    std::vector<int32_t>& fed = seqs_.at(w.seq).fed;
    fed.insert(fed.end(), t.tokens.begin() + static_cast<std::ptrdiff_t>(w.keep) + done,
               t.tokens.begin() + static_cast<std::ptrdiff_t>(w.keep) + done + n);
    done += n;
    if (!AfterCatchUp(w, t, static_cast<size_t>(&w - works_.data()), last)) return;
  }
}

void DraftModelProposer::GuessTogether() {
  // Room for each sequence's k - 1 fed guesses at once; without it, its first guess only.
  for (Work& w : works_) {
    if (w.ok && w.max_tokens > 1 && !kv_.manager->allocate(cache::SeqId(w.seq), w.max_tokens - 1)) {
      w.max_tokens = 1;
    }
  }
  const size_t stride = static_cast<size_t>(max_k_);
  for (int j = 1; j < max_k_; ++j) {
    builder_.Clear();
    int num_logits = 0;
    for (size_t i = 0; i < works_.size(); ++i) {
      Work& w = works_[i];
      if (!w.ok || w.count < j || w.count >= w.max_tokens) continue;
      // Guess j feeds guess j - 1, past the verified KV (and its earlier guesses).
      const std::span<const int32_t> prev(&guess_buf_[i * stride + static_cast<size_t>(j - 1)], 1);
      builder_.AddSequence(prev, static_cast<int32_t>(seqs_.at(w.seq).fed.size()),
                           static_cast<int32_t>(w.kv_len + j - 1), TableOf(w.seq),
                           model::LogitsWanted::kLast);
      w.logits_row = num_logits++;
    }
    if (num_logits == 0) break;
    const bool ran = RunBatch(num_logits).ok();
    for (size_t i = 0; i < works_.size(); ++i) {
      Work& w = works_[i];
      if (!w.ok || w.count < j || w.count >= w.max_tokens) continue;
      if (!ran) {
        Release(w.seq);
        w.ok = false;
        continue;
      }
      seqs_.at(w.seq).fed.push_back(guess_buf_[i * stride + static_cast<size_t>(j - 1)]);
      guess_buf_[i * stride + static_cast<size_t>(j)] = ArgmaxRow(w.logits_row);
      w.count = j + 1;
    }
  }
}

void DraftModelProposer::ProposeBatch(std::span<const DraftTask> tasks,
                                      std::vector<int32_t>& guesses,
                                      std::vector<int32_t>& offsets) {
  guesses.clear();
  offsets.assign(tasks.size() + 1, 0);
  works_.clear();
  max_k_ = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    Work w;
    w.task = i;
    if (Prepare(tasks[i], w)) {
      works_.push_back(w);
      max_k_ = std::max(max_k_, w.max_tokens);
    }
  }
  guess_buf_.assign(works_.size() * static_cast<size_t>(max_k_), -1);
  // 2. Catch-ups: consecutive sequences share a forward up to the model's row limit.
  const int limit = options_.max_tokens_per_step;
  for (size_t g = 0; g < works_.size();) {
    auto rows = [&](const Work& w) {
      return static_cast<int>(tasks[w.task].tokens.size() - w.keep);
    };
    if (rows(works_[g]) > limit) {
      CatchUpChunked(works_[g], tasks[works_[g].task]);
      ++g;
      continue;
    }
    size_t e = g;
    int total = 0;
    while (e < works_.size() && rows(works_[e]) <= limit - total) total += rows(works_[e++]);
    CatchUpTogether(std::span<Work>(works_).subspan(g, e - g), tasks);
    g = e;
  }
  // 3. Each further guess feeds the one before it (past a compressing sequence's slot state).
  GuessTogether();
  std::vector<int32_t>& counts = counts_scratch_;
  counts.assign(tasks.size(), 0);
  for (size_t i = 0; i < works_.size(); ++i) {
    const Work& w = works_[i];
    if (!w.ok || w.count == 0) continue;
    counts[w.task] = w.count;
    // The KV holds the verified tokens (compacted for a compressing sequence) then the
    // guesses fed back, and room for at most k - 1 of them.
    const Seq& s = seqs_.at(w.seq);
    const int64_t verified_slots =
        s.compressing ? compressor_->slot_state(cache::SeqId(w.seq))->size() : s.verified;
    const int64_t fed_guesses = static_cast<int64_t>(s.fed.size()) - s.verified;
    const int64_t held = kv_.manager->num_tokens(cache::SeqId(w.seq));
    KVS_CHECK(fed_guesses == w.count - 1 && held >= verified_slots + fed_guesses &&
                  held <= verified_slots + std::max(0, w.max_tokens - 1),
              "draft sequence ", w.seq, ": KV holds ", held, " slots for ", verified_slots,
              " verified and ", fed_guesses, " guesses");
  }
  for (size_t t = 0; t < tasks.size(); ++t) offsets[t + 1] = offsets[t] + counts[t];
  guesses.resize(static_cast<size_t>(offsets.back()));
  for (size_t i = 0; i < works_.size(); ++i) {
    const Work& w = works_[i];
    if (counts[w.task] == 0) continue;
    std::copy_n(guess_buf_.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(max_k_)),
                counts[w.task], guesses.begin() + offsets[w.task]);
  }
  NotePeak();
}

void DraftModelProposer::Propose(int64_t seq, std::span<const int32_t> tokens,
                                 const SpecParams& params, const DraftKv& kv, int max_tokens,
                                 std::vector<int32_t>& out) {
  DraftTask t;
  t.seq = seq;
  t.tokens = tokens;
  t.params = &params;
  t.kv = kv;
  t.max_tokens = max_tokens;
  ProposeBatch(std::span<const DraftTask>(&t, 1), out, offsets_scratch_);
}

void DraftModelProposer::NotePeak() { peak_blocks_ = std::max(peak_blocks_, blocks_in_use()); }

}  // namespace kvserve::speculative
