// DraftModelProposer: draft-model speculation (method draft). A smaller model that shares the
// target's tokenizer guesses the next k tokens greedily; the target verifies them in one
// forward pass (engine/draft_verifier.h), so the guesses only decide speed, never output.
//
// The draft has its own KV pool and its own block tables (a KvCacheManager over a host pool
// of speculative.draft_kv_bytes), apart from the target's: its blocks never count against the
// target's admission, and running out of them is a normal answer (no guesses this step; the
// sequence decodes one token as usual).
//
// Per sequence it remembers the tokens its KV holds (`fed`). A Propose call:
//   1. keeps the longest prefix of `fed` that still matches the sequence's verified tokens
//      (at most all but the last token, whose logits start the draft) and truncates the KV
//      to it: guesses the target rejected leave here, lazily, at the next draft;
//   2. feeds the rest of the verified tokens in one forward pass (a new sequence's whole
//      prompt, chunked by the model's row limit; usually the one or two tokens the last step
//      emitted), taking the last row's logits;
//   3. runs k - 1 one-row decode steps, each feeding the previous guess.
// Guesses are argmax (greedy): the draft is a point mass, so the verifier's rejection
// sampling (q = onehot(g)) stays exact for sampled requests too.
//
//   fed:    [ p0 p1 ... pn | t1 t2 | g1 g2 g3 ]   KV of the last draft (g4 was never fed)
//   tokens: [ p0 p1 ... pn | t1 t2 | g1 x  ]      target accepted g1, then emitted x
//   keep:   [ p0 ... t2 g1 ]  truncate, feed [x] (logits -> g1'), then g1' .. g3' one by one
//
// Release (finished, aborted, preempted) frees the sequence's draft KV. Not thread-safe: the
// scheduler's (engine) thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "base/logger.h"
#include "cache/host_kv_cache.h"
#include "model/batch_builder.h"
#include "model/llama_model.h"
#include "speculative/draft_proposer.h"

namespace kvserve::speculative {

struct DraftModelOptions {
  int block_size = 16;
  uint64_t kv_bytes = 32ull << 20;  // the draft's own KV pool (fp32)
  int threads = 1;                  // the draft model's compute team
  int max_tokens_per_step = 512;    // rows per draft forward; longer catch-ups are chunked
  int64_t max_context = 0;          // model.max_model_len (0: the draft model's own)
  // guess_cost(): one draft forward relative to one target decode step. Decode streams the
  // weights, so the factory sets the ratio of active parameters (draft / target).
  double guess_cost = 0.0;
};

class DraftModelProposer final : public DraftProposer {
 public:
  // Loads the draft model from `model_dir` and allocates its KV pool. The tokenizer check is
  // the caller's (CheckDraftCompatible): this only needs the vocabulary size to match.
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> Load(const std::string& model_dir,
                                                                  int32_t target_vocab_size,
                                                                  const DraftModelOptions& options,
                                                                  base::Logger logger);
  // Over an already built model (tests, benchmarks).
  static absl::StatusOr<std::unique_ptr<DraftModelProposer>> Create(
      std::unique_ptr<model::LlamaModel> model, const DraftModelOptions& options,
      base::Logger logger);
  ~DraftModelProposer() override;

  void Propose(int64_t seq, std::span<const int32_t> tokens, const SpecParams& params,
               int max_tokens, std::vector<int32_t>& out) override;
  void Release(int64_t seq) override;
  double guess_cost() const override { return options_.guess_cost; }

  // Introspection (leak checks, metrics): blocks of the draft pool in use, sequences known.
  int32_t blocks_in_use() const;
  int32_t num_sequences() const { return static_cast<int32_t>(fed_.size()); }
  const model::ModelConfig& model_config() const { return model_->config(); }

 private:
  DraftModelProposer(std::unique_ptr<model::LlamaModel> model, cache::HostKvCache kv,
                     const DraftModelOptions& options, base::Logger logger);
  // One forward over `rows` (appended after `kv_len_before` slots of `seq`); the last row's
  // argmax, or -1 when the forward failed (logged; the draft then proposes nothing).
  int32_t Step(int64_t seq, std::span<const int32_t> rows, int32_t kv_len_before, bool want_logits);

  std::unique_ptr<model::LlamaModel> model_;
  cache::HostKvCache kv_;
  DraftModelOptions options_;
  base::Logger logger_;
  model::BatchBuilder builder_;
  std::vector<std::byte*> layer_data_;
  std::vector<float*> layer_scales_;
  std::vector<float> logits_;  // [vocab]: the last row's
  std::vector<int32_t> table_scratch_;
  // Per sequence: the tokens whose KV the draft pool holds, in order.
  absl::flat_hash_map<int64_t, std::vector<int32_t>> fed_;
};

}  // namespace kvserve::speculative
