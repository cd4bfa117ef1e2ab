#include "scheduler/step_plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"
#include "config/fields.h"

namespace kvserve::scheduler {
namespace {

std::string Copies(const std::vector<cache::BlockCopy>& copies) {
  return absl::StrJoin(copies, ",", [](std::string* out, const cache::BlockCopy& c) {
    absl::StrAppend(out, c.src.value(), "->", c.dst.value());
  });
}

std::string Ids(const std::vector<cache::SeqId>& ids) {
  return absl::StrJoin(ids, ",", [](std::string* out, cache::SeqId s) { absl::StrAppend(out, s.value()); });
}

}  // namespace

void StepPlan::clear() {
  step_id = 0;
  new_seqs.clear();
  seqs.clear();
  token_ids.clear();
  new_blocks.clear();
  window_blocks.clear();
  swap_out.clear();
  swap_in.clear();
  copies.clear();
  finished.clear();
  preempted.clear();
  parked.clear();
  tier_grants.clear();
  tier_blocks.clear();
  total_tokens = 0;
  compress_auto = false;
}

std::string StepPlan::ToString() const {
  std::string s = absl::StrCat("step ", step_id, " tokens=", total_tokens, "\n");
  for (const auto& q : seqs) {
    absl::StrAppend(&s, "  seq ", q.seq.value(), " pos=", q.first_position, " n=", q.num_tokens,
                    " kv=", q.kv_len_after);
    if (q.num_new_blocks > 0 || q.table_reset) {
      absl::StrAppend(&s, q.table_reset ? " table=[" : absl::StrCat(" table@", q.table_offset, "+=["));
      for (int i = 0; i < q.num_new_blocks; ++i) {
        absl::StrAppend(&s, i ? "," : "", new_blocks[q.blocks_begin + i].value());
      }
      absl::StrAppend(&s, "]");
    }
    if (q.num_window_blocks > 0) {
      absl::StrAppend(&s, " window@", q.window_table_offset, "=[");
      for (int i = 0; i < q.num_window_blocks; ++i) {
        absl::StrAppend(&s, i ? "," : "", window_blocks[q.window_blocks_begin + i].value());
      }
      absl::StrAppend(&s, "]");
    }
    if (q.sample) absl::StrAppend(&s, " sample#", q.num_generated);
    if (q.num_draft > 0) absl::StrAppend(&s, " draft=", q.num_draft);
    absl::StrAppend(&s, "\n");
  }
  if (!new_seqs.empty()) {
    absl::StrAppend(&s, "  new=[", absl::StrJoin(new_seqs, ",", [](std::string* out, const NewSeq& n) {
                      absl::StrAppend(out, n.seq.value(), "(", n.history.size(), " tok");
                      if (n.compression.kind != config::CompressionPolicyKind::kFull) {
                        absl::StrAppend(out, " ", base::AsAbsl(config::Name(n.compression.kind)), n.compression_auto ? "/auto" : "",
                                        " target=", compression::TargetLength(n.compression));
                      }
                      absl::StrAppend(out, n.resume ? " resume)" : ")");
                    }), "]\n");
  }
  if (!swap_out.empty()) absl::StrAppend(&s, "  swap_out=[", Copies(swap_out), "]\n");
  if (!swap_in.empty()) absl::StrAppend(&s, "  swap_in=[", Copies(swap_in), "]\n");
  if (!copies.empty()) absl::StrAppend(&s, "  cow=[", Copies(copies), "]\n");
  if (!preempted.empty()) absl::StrAppend(&s, "  preempted=[", Ids(preempted), "]\n");
  if (!parked.empty()) absl::StrAppend(&s, "  parked=[", Ids(parked), "]\n");
  if (!finished.empty()) absl::StrAppend(&s, "  finished=[", Ids(finished), "]\n");
  if (compress_auto) absl::StrAppend(&s, "  compress_auto\n");
  return s;
}

void StepResult::clear() {
  step_id = 0;
  sampled.clear();
  compactions.clear();
  prompt_logprobs.clear();
  hidden.clear();
  status = absl::OkStatus();
}

std::string StepResult::ToString() const {
  std::string s = absl::StrCat("result ", step_id, ":");
  for (const auto& t : sampled) absl::StrAppend(&s, " ", t.seq.value(), "->", t.token_id);
  for (const auto& c : compactions) {
    absl::StrAppend(&s, " compact(", c.seq.value(), ":", c.phys_len_before, "->", c.new_phys_len, ")");
  }
  if (!status.ok()) absl::StrAppend(&s, " status=", status.ToString());
  return s;
}

}  // namespace kvserve::scheduler
