#include "server/metrics/lora_metrics.h"

#include <algorithm>

#include "absl/strings/str_join.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace kvserve::server {

LoraMetrics::LoraMetrics(prometheus::Registry& registry, const std::string& model_name)
    : model_name_(model_name) {
  info_ = &prometheus::BuildGauge()
               .Name("vllm:lora_requests_info")
               .Help("Running stats on lora requests.")
               .Register(registry);
  const prometheus::Labels m = {{"model", model_name}};
  requests_ =
      &prometheus::BuildCounter()
           .Name("kvserve_lora_requests_total")
           .Help("Finished requests per LoRA adapter (at most 100 adapter labels, then 'other').")
           .Labels(m)
           .Register(registry);
  prompt_tokens_ = &prometheus::BuildCounter()
                        .Name("kvserve_lora_prompt_tokens_total")
                        .Help("Prompt tokens of finished requests per LoRA adapter.")
                        .Labels(m)
                        .Register(registry);
  generation_tokens_ = &prometheus::BuildCounter()
                            .Name("kvserve_lora_generation_tokens_total")
                            .Help("Generated tokens of finished requests per LoRA adapter.")
                            .Labels(m)
                            .Register(registry);
}

void LoraMetrics::OnLoraState(const engine::LoraState& state, double unix_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (info_series_ != nullptr) info_->Remove(info_series_);
  info_series_ = &info_->Add({{"max_lora", std::to_string(state.max_lora)},
                              {"running_lora_adapters", absl::StrJoin(state.running, ",")},
                              {"waiting_lora_adapters", absl::StrJoin(state.waiting, ",")}});
  info_series_->Set(unix_seconds);
}

LoraMetrics::Series& LoraMetrics::SeriesFor(const std::string& adapter) {
  auto it = series_.find(adapter);
  if (it != series_.end()) return it->second;
  const std::string label =
      static_cast<int>(series_.size()) < kMaxAdapterLabels ? adapter : std::string("other");
  if (label != adapter) {
    if (auto other = series_.find("other"); other != series_.end()) return other->second;
  }
  const prometheus::Labels l = {{"adapter", label}};
  Series s{&requests_->Add(l), &prompt_tokens_->Add(l), &generation_tokens_->Add(l)};
  return series_.emplace(label, s).first->second;
}

void LoraMetrics::OnRequestFinished(const engine::RequestTimeline& t) {
  if (t.lora.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  Series& s = SeriesFor(t.lora);
  s.requests->Increment();
  s.prompt_tokens->Increment(static_cast<double>(std::max<int64_t>(t.prompt_tokens, 0)));
  s.generation_tokens->Increment(static_cast<double>(std::max<int64_t>(t.generation_tokens, 0)));
}

}  // namespace kvserve::server
