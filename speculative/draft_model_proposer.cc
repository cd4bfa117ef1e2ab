#include "speculative/draft_model_proposer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/check.h"

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
  return Create(std::move(*m), options, std::move(logger));
}

absl::StatusOr<std::unique_ptr<DraftModelProposer>> DraftModelProposer::Create(
    std::unique_ptr<model::LlamaModel> model, const DraftModelOptions& options,
    base::Logger logger) {
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
  return std::unique_ptr<DraftModelProposer>(
      new DraftModelProposer(std::move(model), std::move(*kv), options, std::move(logger)));
}

DraftModelProposer::DraftModelProposer(std::unique_ptr<model::LlamaModel> model,
                                       cache::HostKvCache kv, const DraftModelOptions& options,
                                       base::Logger logger)
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
}

DraftModelProposer::~DraftModelProposer() = default;

int32_t DraftModelProposer::blocks_in_use() const { return kv_.manager->block_pool().num_used(); }

void DraftModelProposer::Release(int64_t seq) {
  kv_.manager->free(cache::SeqId(seq));
  fed_.erase(seq);
}

int32_t DraftModelProposer::Step(int64_t seq, std::span<const int32_t> rows, int32_t kv_len_before,
                                 bool want_logits) {
  const cache::SeqId id(seq);
  builder_.Clear();
  const auto table = kv_.manager->block_table(id);
  std::vector<int32_t>& t = table_scratch_;
  t.clear();
  for (cache::BlockId b : table) t.push_back(b.value());
  builder_.AddSequence(rows, kv_len_before, kv_len_before, t,
                       want_logits ? model::LogitsWanted::kLast : model::LogitsWanted::kNone);
  model::KvCacheView view;
  view.layout = kv_.storage->layout();
  view.num_blocks = kv_.storage->num_blocks();
  view.layer_data = layer_data_;
  if (view.layout.has_scales()) view.layer_scales = layer_scales_;
  const std::span<float> logits(logits_.data(), want_logits ? logits_.size() : 0);
  if (absl::Status st = model_->Forward(builder_.batch(), view, logits); !st.ok()) {
    logger_.warn("draft model forward failed (no guesses this step): %s", st.ToString());
    return -1;
  }
  if (!want_logits) return 0;
  // Greedy: the first maximum (lowest id on ties).
  return static_cast<int32_t>(std::max_element(logits_.begin(), logits_.end()) - logits_.begin());
}

void DraftModelProposer::Propose(int64_t seq, std::span<const int32_t> tokens,
                                 const SpecParams& params, int max_tokens,
                                 std::vector<int32_t>& out) {
  (void)params;
  out.clear();
  if (max_tokens <= 0 || tokens.empty()) return;
  // Past the draft model's own context its positions are out of range: no guesses (the target
  // may serve longer sequences than its draft).
  if (static_cast<int64_t>(tokens.size()) + max_tokens > model_->config().max_context()) return;
  const cache::SeqId id(seq);
  std::vector<int32_t>& fed = fed_[seq];
  // 1. Keep what still matches the verified tokens (never the last one: its row's logits
  //    start the draft).
  const size_t limit = std::min(fed.size(), tokens.size() - 1);
  size_t keep = 0;
  while (keep < limit && fed[keep] == tokens[keep]) ++keep;
  if (kv_.manager->contains(id) && kv_.manager->num_tokens(id) > static_cast<int64_t>(keep)) {
    kv_.manager->truncate(id, static_cast<int64_t>(keep));
  }
  fed.resize(keep);
  // Room for the catch-up rows and the k - 1 guesses fed back, all or nothing.
  const int catch_up = static_cast<int>(tokens.size() - keep);
  if (!kv_.manager->allocate(id, catch_up + max_tokens - 1)) return;  // no room: no guesses
  // 2. Catch up, chunked by the model's row limit; the last chunk's last row gives g1.
  int32_t guess = -1;
  for (int done = 0; done < catch_up;) {
    const int n = std::min(catch_up - done, options_.max_tokens_per_step);
    const bool last = done + n == catch_up;
    guess = Step(seq, tokens.subspan(keep + static_cast<size_t>(done), static_cast<size_t>(n)),
                 static_cast<int32_t>(keep) + done, last);
    if (guess < 0) break;
    done += n;
  }
  if (guess < 0) {
    Release(seq);  // the KV is in an unknown state: start over next time
    return;
  }
  fed.insert(fed.end(), tokens.begin() + static_cast<std::ptrdiff_t>(keep), tokens.end());
  out.push_back(guess);
  // 3. Each further guess feeds the one before it.
  while (static_cast<int>(out.size()) < max_tokens) {
    const int32_t prev = out.back();
    guess = Step(seq, std::span<const int32_t>(&prev, 1), static_cast<int32_t>(fed.size()), true);
    if (guess < 0) {
      Release(seq);
      out.clear();
      return;
    }
    fed.push_back(prev);
    out.push_back(guess);
  }
  KVS_CHECK(kv_.manager->num_tokens(id) == static_cast<int64_t>(fed.size()), "draft sequence ", seq,
            ": KV holds ", kv_.manager->num_tokens(id), " slots for ", fed.size(), " fed tokens");
}

}  // namespace kvserve::speculative
