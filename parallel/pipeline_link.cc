#include "parallel/pipeline_link.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::parallel {
namespace {

constexpr int kTagStep = 1;
constexpr int kTagHidden = 2;
constexpr int kTagLogits = 3;
constexpr size_t kMaxHandoffSamples = 1 << 20;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::span<const std::byte> AsBytes(std::span<const float> x) {
  return {reinterpret_cast<const std::byte*>(x.data()), x.size() * sizeof(float)};
}

}  // namespace

StageLayers StageLayersFor(int num_layers, int stage, int num_stages) {
  const int64_t l = num_layers;
  return {static_cast<int>(l * stage / num_stages), static_cast<int>(l * (stage + 1) / num_stages)};
}

PipelineLink::PipelineLink(Communicator& comm, Options options)
    : comm_(comm), options_(std::move(options)) {}

absl::Status PipelineLink::Fail(absl::Status st) {
  if (st.ok() || !failed_.ok()) return st;
  // A failed exchange means another stage is unreachable (dead, hung, or its communicator
  // broken by an earlier timeout): Unavailable, whatever code the communicator gave (requests
  // then end with 503). Only a step the link cannot carry (LoRA rows) keeps its own code.
  const absl::StatusCode code =
      absl::IsUnimplemented(st) ? st.code() : absl::StatusCode::kUnavailable;
  failed_ = absl::Status(code, absl::StrCat("pipeline stage ", comm_.rank(), " of ", comm_.size(),
                                            ": ", st.message()));
  if (options_.on_failure) options_.on_failure(failed_);
  return failed_;
}

absl::Status PipelineLink::RecvPolled(int source, int tag) {
  const int64_t started = NowNs();
  int64_t stop_seen = -1;
  for (;;) {
    absl::Status st = comm_.Recv(source, tag, bytes_, options_.recv_slice);
    if (!absl::IsDeadlineExceeded(st)) return Fail(st);  // a timed-out Recv matched nothing
    const int64_t now = NowNs();
    if (now - started > absl::ToInt64Nanoseconds(options_.step_timeout)) {
      return Fail(absl::DeadlineExceededError(
          absl::StrCat("rank ", source, " sent nothing (tag ", tag, ") within ",
                       absl::FormatDuration(options_.step_timeout))));
    }
    if (stopping_.load()) {
      if (stop_seen < 0) stop_seen = now;
      if (now - stop_seen > absl::ToInt64Nanoseconds(options_.stop_patience)) {
        return Fail(absl::UnavailableError(
            absl::StrCat("stopping, and rank ", source, " has not answered the step in flight")));
      }
    }
  }
}

absl::Status PipelineLink::BeginStep(int64_t step_id, std::span<const cache::BlockCopy> swap_out,
                                     std::span<const cache::BlockCopy> swap_in,
                                     std::span<const cache::BlockCopy> copies) {
  if (!failed_.ok()) return failed_;
  message_.clear();
  message_.kind = StepKind::kForward;
  message_.step_id = step_id;
  message_.swap_out.assign(swap_out.begin(), swap_out.end());
  message_.swap_in.assign(swap_in.begin(), swap_in.end());
  message_.copies.assign(copies.begin(), copies.end());
  pending_ = true;
  return absl::OkStatus();
}

absl::Status PipelineLink::SendStep() {
  EncodeStepMessage(message_, bytes_);
  for (int r = 1; r < comm_.size(); ++r) {
    if (absl::Status st = comm_.Send(r, kTagStep, bytes_, options_.send_timeout); !st.ok()) {
      return Fail(st);
    }
  }
  pending_ = false;
  return absl::OkStatus();
}

absl::Status PipelineLink::ReceiveHidden(std::span<float> x) {
  if (!failed_.ok()) return failed_;
  KVS_RETURN_IF_ERROR(RecvPolled(comm_.rank() - 1, kTagHidden));
  if (bytes_.size() != x.size_bytes()) {
    return Fail(absl::DataLossError(absl::StrCat("hidden states of ", bytes_.size(),
                                                 " bytes, the step needs ", x.size_bytes())));
  }
  std::memcpy(x.data(), bytes_.data(), bytes_.size());
  return absl::OkStatus();
}

absl::Status PipelineLink::HandOff(const model::ForwardBatch& batch, std::span<const float> x,
                                   std::span<float> logits) {
  if (!failed_.ok()) return failed_;
  const int next = comm_.rank() + 1;
  if (comm_.rank() != 0) {
    // A middle stage only passes the residual stream on.
    return Fail(comm_.Send(next, kTagHidden, AsBytes(x), options_.send_timeout));
  }
  const int64_t started = NowNs();
  if (!pending_) return Fail(absl::FailedPreconditionError("HandOff without BeginStep"));
  // The step message carries no adapters, so the other stages could not apply them.
  if (batch.lora != nullptr) {
    return Fail(
        absl::UnimplementedError("LoRA adapters are not served under pipeline parallelism yet"));
  }
  message_.AssignBatch(batch);
  KVS_RETURN_IF_ERROR(SendStep());
  if (absl::Status st = comm_.Send(next, kTagHidden, AsBytes(x), options_.send_timeout); !st.ok()) {
    return Fail(st);
  }
  KVS_RETURN_IF_ERROR(RecvPolled(comm_.size() - 1, kTagLogits));
  const size_t want =
      batch.logits_rows.size() * (logits.size() / std::max<size_t>(1, batch.logits_rows.size()));
  if (bytes_.size() != want * sizeof(float) + sizeof(int64_t) || want > logits.size()) {
    return Fail(
        absl::DataLossError(absl::StrCat("logits of ", bytes_.size(), " bytes, the step needs ",
                                         want * sizeof(float) + sizeof(int64_t))));
  }
  std::memcpy(logits.data(), bytes_.data(), want * sizeof(float));
  int64_t forward_ns = 0;
  std::memcpy(&forward_ns, bytes_.data() + want * sizeof(float), sizeof(forward_ns));
  if (handoff_ns_.size() < kMaxHandoffSamples)
    handoff_ns_.push_back(NowNs() - started - forward_ns);
  return absl::OkStatus();
}

absl::Status PipelineLink::EndStep() {
  if (!failed_.ok()) return failed_;
  if (!pending_) return absl::OkStatus();
  // No forward carried this step (no rows): only moves, if any.
  const bool moves =
      !message_.swap_out.empty() || !message_.swap_in.empty() || !message_.copies.empty();
  if (!moves) {
    pending_ = false;
    return absl::OkStatus();
  }
  return SendStep();
}

absl::Status PipelineLink::ReceiveStep(StepMessage& out) {
  if (!failed_.ok()) return failed_;
  for (;;) {
    absl::Status st = comm_.Recv(0, kTagStep, bytes_, options_.idle_poll);
    if (absl::IsDeadlineExceeded(st)) continue;  // idle: nothing matched, the link is usable
    if (!st.ok()) return Fail(st);
    return Fail(DecodeStepMessage(bytes_, out));
  }
}

absl::Status PipelineLink::SendLogits(std::span<const float> logits, int64_t forward_ns) {
  if (!failed_.ok()) return failed_;
  bytes_.resize(logits.size_bytes() + sizeof(forward_ns));
  std::memcpy(bytes_.data(), logits.data(), logits.size_bytes());
  std::memcpy(bytes_.data() + logits.size_bytes(), &forward_ns, sizeof(forward_ns));
  return Fail(comm_.Send(0, kTagLogits, bytes_, options_.send_timeout));
}

absl::Status PipelineLink::Shutdown() {
  if (!failed_.ok()) return failed_;
  message_.clear();
  message_.kind = StepKind::kShutdown;
  return SendStep();
}

}  // namespace kvserve::parallel
