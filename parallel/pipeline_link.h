// PipelineLink: model::StageLink over a Communicator, for pipeline parallelism with one rank
// per stage (parallel.tensor 1: rank = stage). Rank 0 is stage 0 and the leader; the other
// ranks run RunPipelineWorker (pipeline_worker.h) around the same link.
//
// One step, the simple schedule (one micro-batch, stages take turns):
//
//   rank 0 (stage 0)                     rank s (0 < s < P-1)          rank P-1 (last)
//   BeginStep: keep the KV moves
//   Forward: embed, layers of stage 0
//   HandOff: ─ step message (tag 1) ──▶ every worker
//            ─ x [T][D] (tag 2) ──────▶ ReceiveHidden, its layers,
//                                       HandOff: x (tag 2) ─────────▶ ReceiveHidden, layers,
//                                                                     norm, lm_head
//            ◀────────────────────────────── logits [R][V] + forward ns (tag 3) ─ SendLogits
//   EndStep: a step that ran no rows still sends its moves (a message with no rows)
//
// The step message travels point to point to each worker rather than through Broadcast so a
// worker can wait for work with a short Recv timeout in a loop (a timed-out Recv before any
// match leaves the communicator usable; a timed-out collective would break it), idle for as
// long as the server is. Every other operation has the step timeout: a stage that died or
// hangs turns into DeadlineExceeded, after which the link refuses every call with the first
// error and calls the failure callback once (the server fails the requests and exits
// non-zero; mpirun ends the job).
//
// Sampling stays on rank 0: the last stage computes the logits rows and sends them back, so
// sampling parameters, seeds, grammars, logprobs and speculative verification never leave
// rank 0 (R x V floats per step: 32 decode rows of a 2048-token vocabulary are 256 KiB).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "model/stage_link.h"
#include "parallel/communicator.h"
#include "parallel/step_message.h"

namespace kvserve::parallel {

// Stage s of P over L layers holds [s L / P, (s + 1) L / P): contiguous, sizes differ by at
// most one.
struct StageLayers {
  int begin = 0;
  int end = 0;
};
StageLayers StageLayersFor(int num_layers, int stage, int num_stages);

class PipelineLink final : public model::StageLink {
 public:
  struct Options {
    absl::Duration step_timeout = absl::Seconds(15);  // a reply (hidden states, logits)
    // A send: the peer only has to be in its loop (small messages are buffered, large ones
    // wait for its matching Recv, which a live stage posts at once).
    absl::Duration send_timeout = absl::Seconds(3);
    absl::Duration idle_poll = absl::Milliseconds(500);   // a worker's wait for the next step
    std::function<void(const absl::Status&)> on_failure;  // called once, on the first error
    // After RequestStop, how long a reply may still take: a live stage answers a step in
    // far less, a dead one never (mpirun kills the job 1 s after a rank died, by default).
    absl::Duration stop_patience = absl::Milliseconds(500);
    absl::Duration recv_slice = absl::Milliseconds(50);  // polls between stop checks
  };
  PipelineLink(Communicator& comm, Options options);

  int stage() const { return comm_.rank(); }
  int num_stages() const { return comm_.size(); }
  // OK, or the first error (after which every call returns it).
  const absl::Status& status() const { return failed_; }

  // model::StageLink (rank 0: BeginStep, HandOff, EndStep; workers: ReceiveHidden, HandOff).
  absl::Status BeginStep(int64_t step_id, std::span<const cache::BlockCopy> swap_out,
                         std::span<const cache::BlockCopy> swap_in,
                         std::span<const cache::BlockCopy> copies) override;
  absl::Status ReceiveHidden(std::span<float> x) override;
  absl::Status HandOff(const model::ForwardBatch& batch, std::span<const float> x,
                       std::span<float> logits) override;
  absl::Status EndStep() override;

  // Workers: the next step message (waits in idle_poll slices for as long as it takes).
  absl::Status ReceiveStep(StepMessage& out);
  // Last stage: the logits rows of the step and how long its forward took.
  absl::Status SendLogits(std::span<const float> logits, int64_t forward_ns);
  // Rank 0 at exit: tells every worker to leave its loop.
  absl::Status Shutdown();
  // Any thread (the server on SIGTERM): the job is stopping, maybe because a stage died, so
  // an exchange still waiting stop_patience later fails (Unavailable) instead of waiting the
  // whole step timeout: the requests of that step then fail with an error, not a cut stream.
  void RequestStop() { stopping_.store(true); }

  // Rank 0: per step that ran rows, the hand-off cost in ns (HandOff's wall time minus the
  // other stages' forward time: encoding, messages, waiting), in step order (capped).
  const std::vector<int64_t>& handoff_ns() const { return handoff_ns_; }

 private:
  absl::Status Fail(absl::Status st);
  // Recv within the step timeout, polled in recv_slice pieces to honour RequestStop.
  absl::Status RecvPolled(int source, int tag);
  absl::Status SendStep();

  Communicator& comm_;
  Options options_;
  absl::Status failed_;
  StepMessage message_;   // rank 0: the step being built; workers: scratch
  bool pending_ = false;  // rank 0: BeginStep's moves not sent yet
  std::atomic<bool> stopping_{false};
  std::vector<std::byte> bytes_;
  std::vector<int64_t> handoff_ns_;
};

}  // namespace kvserve::parallel
