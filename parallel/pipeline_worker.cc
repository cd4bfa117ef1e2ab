#include "parallel/pipeline_worker.h"

#include <chrono>
#include <vector>

#include "base/check.h"
#include "engine/runner_book.h"
#include "scheduler/step_plan.h"

namespace kvserve::parallel {

absl::Status RunPipelineWorker(PipelineLink& link, model::LlamaModel& model,
                               cache::KvStorage& storage, cache::KvStorage* swap,
                               const base::Logger& logger) {
  const cache::KvLayout& layout = storage.layout();
  std::vector<std::byte*> layer_data;
  std::vector<float*> layer_scales;
  for (int l = 0; l < layout.num_layers; ++l) {
    layer_data.push_back(storage.layer_data(l));
    layer_scales.push_back(storage.layer_scales(l));
  }
  model::KvCacheView view;
  view.layout = layout;
  view.num_blocks = storage.num_blocks();
  view.layer_data = layer_data;
  if (layout.has_scales()) view.layer_scales = layer_scales;

  StepMessage message;
  scheduler::StepPlan moves;  // only its copy lists are used (engine::ApplyCopies)
  std::vector<float> logits;
  const size_t vocab = static_cast<size_t>(model.config().vocab_size);
  int64_t steps = 0;
  for (;;) {
    KVS_RETURN_IF_ERROR(link.ReceiveStep(message));
    if (message.kind == StepKind::kShutdown) {
      logger.info("pipeline stage %d: shutdown after %d steps", link.stage(), steps);
      return absl::OkStatus();
    }
    ++steps;
    moves.swap_out = message.swap_out;
    moves.swap_in = message.swap_in;
    moves.copies = message.copies;
    KVS_RETURN_IF_ERROR(engine::ApplyCopies(moves, storage, swap));
    if (message.token_ids.empty()) continue;
    const model::ForwardBatch batch = message.batch();
    const bool last = model.last_stage();
    logits.resize(batch.logits_rows.size() * vocab);  // a middle stage validates it too
    const auto started = std::chrono::steady_clock::now();
    KVS_RETURN_IF_ERROR(model.Forward(batch, view, logits));
    if (last) {
      const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - started)
                             .count();
      KVS_RETURN_IF_ERROR(link.SendLogits(logits, ns));
    }
  }
}

}  // namespace kvserve::parallel
