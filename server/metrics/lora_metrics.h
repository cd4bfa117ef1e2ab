// LoRA adapter metrics (docs/lora.md):
//
//   vllm:lora_requests_info{max_lora, running_lora_adapters, waiting_lora_adapters}
//       vLLM's gauge, verbatim: one series whose value is the Unix time of the last change and
//       whose labels list the adapters with running / waiting requests, comma-separated
//       (the Gateway API Inference Extension's adapter-affinity scorer reads it). The previous
//       series is removed at each change, so exactly one exists.
//   kvserve_lora_requests_total{model, adapter}            finished requests per adapter
//   kvserve_lora_prompt_tokens_total{model, adapter}       their prompt tokens
//   kvserve_lora_generation_tokens_total{model, adapter}   their generated tokens
//
// Label cardinality is bounded: the first kMaxAdapterLabels adapter names get a series of
// their own, later ones count under adapter="other". Thread-safe (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "engine/engine_observer.h"

namespace prometheus {
class Counter;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace kvserve::server {

class LoraMetrics {
 public:
  static constexpr int kMaxAdapterLabels = 100;

  LoraMetrics(prometheus::Registry& registry, const std::string& model_name);

  // `unix_seconds`: the wall-clock time of the change (the gauge's value).
  void OnLoraState(const engine::LoraState& state, double unix_seconds);
  // A request on an adapter finished (timeline.lora non-empty).
  void OnRequestFinished(const engine::RequestTimeline& timeline);

 private:
  struct Series {
    prometheus::Counter* requests;
    prometheus::Counter* prompt_tokens;
    prometheus::Counter* generation_tokens;
  };
  Series& SeriesFor(const std::string& adapter);  // mu_ held

  const std::string model_name_;
  prometheus::Family<prometheus::Gauge>* info_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* prompt_tokens_;
  prometheus::Family<prometheus::Counter>* generation_tokens_;
  std::mutex mu_;
  prometheus::Gauge* info_series_ = nullptr;  // the one current series
  absl::flat_hash_map<std::string, Series> series_;
};

}  // namespace kvserve::server
