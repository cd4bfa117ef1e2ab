// Communicator: how the ranks of one model replica talk to each other. One rank is one
// process owning one device (a GPU, or a set of CPU cores); rank 0 is the leader (it runs the
// scheduler and owns the block tables), every rank executes its share of each step.
//
// The interface carries no transport types (MPI, NCCL), so model and engine code can take a
// Communicator& and run unchanged over SingleProcessCommunicator (world size 1: today's
// path), MpiCommunicator (CPU ranks, one or many hosts) and, later, a NCCL communicator for
// device buffers (bootstrapped through MPI).
//
// Contract shared by every implementation:
//  - Collectives (Broadcast, AllReduceSum, Barrier) are called by every rank of the
//    communicator in the same order with matching arguments (same root, same length).
//  - Every operation takes a timeout, so no rank waits forever for a peer that died or hangs:
//    past it the call returns DeadlineExceeded naming the operation and the peer (for a
//    collective the peer that did not join cannot be known; the message names the group).
//  - An operation that timed out while the transport still holds it in flight (a started
//    collective or send) leaves the communicator broken: every later call fails with
//    FailedPrecondition quoting the first error. The caller is expected to fail its requests
//    and exit, so that the orchestrator restarts the whole group. A Recv that timed out before
//    any message matched leaves the communicator usable.
//  - Calls are not thread-safe: one thread (the engine's step loop) drives a communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace kvserve::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Rank `root`'s bytes end up in `bytes` on every rank (resized on the others: they need
  // not know the length in advance).
  virtual absl::Status Broadcast(std::vector<std::byte>& bytes, int root,
                                 absl::Duration timeout) = 0;

  // values[i] = sum over ranks of values[i], in place, on every rank. Every rank passes the
  // same length. With two ranks the sum is a + b on both, bit for bit.
  virtual absl::Status AllReduceSum(std::span<float> values, absl::Duration timeout) = 0;

  // values[i] = minimum over ranks of values[i], in place, on every rank (e.g. the KV block
  // count every rank can hold: all allocate the smallest). Every rank passes the same length.
  virtual absl::Status AllReduceMin(std::span<int64_t> values, absl::Duration timeout) = 0;

  // Point to point, matched by (peer, tag); tag >= 0. Messages between one pair of ranks with
  // one tag arrive in the order sent. Recv resizes `bytes` to the message. Recv's timeout
  // bounds the wait for the message to be sent: one that matched in time may take a bounded
  // grace longer to arrive (MpiCommunicator: 10 s), so polling with short timeouts is safe.
  virtual absl::Status Send(int dest, int tag, std::span<const std::byte> bytes,
                            absl::Duration timeout) = 0;
  virtual absl::Status Recv(int source, int tag, std::vector<std::byte>& bytes,
                            absl::Duration timeout) = 0;

  virtual absl::Status Barrier(absl::Duration timeout) = 0;
};

}  // namespace kvserve::parallel
