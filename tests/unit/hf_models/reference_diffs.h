// One 40-token (or `ids`) prefill of a loaded kvserve model against the float64 reference forward
// on a Hugging Face directory: the per-position largest |logprob difference|
// (PositionLogprobDiffs). Shared by the GGUF, integer-quantized and FP8 reference tests.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/llama_model.h"
#include "tests/unit/hf_models/hf_test_util.h"
#include "tests/unit/model/model_test_util.h"

namespace kvserve::testing::hf {

inline absl::StatusOr<std::vector<double>> DiffsAgainstReference(model::LlamaModel& m,
                                                                 const std::string& reference_dir,
                                                                 const std::vector<int32_t>& ids,
                                                                 int vocab) {
  auto ref_model = ReferenceModel::Load(reference_dir);
  if (!ref_model.ok()) return ref_model.status();
  model::testing::PagedSession session(m, 4, config::KvDtype::kFp32, 64);
  const int s = session.NewSequence();
  const std::vector<float> got = session.Step({{s, ids}})[0];
  auto ref = (*ref_model)->Forward(ids);
  if (!ref.ok()) return ref.status();
  return PositionLogprobDiffs(got, *ref, ids.size(), vocab);
}

}  // namespace kvserve::testing::hf
