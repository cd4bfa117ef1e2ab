// SingleProcessCommunicator: the world of one rank. Collectives are no-ops (a broadcast
// from rank 0 to itself, a sum over one rank), so a server started without mpirun runs
// exactly today's single-process path through the same code. Messages sent to itself are
// queued and received in order, as MPI allows a rank to message itself.
#pragma once

#include <deque>
#include <map>
#include <vector>

#include "parallel/communicator.h"

namespace kvserve::parallel {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

  absl::Status Broadcast(std::vector<std::byte>& bytes, int root, absl::Duration timeout) override;
  absl::Status AllReduceSum(std::span<float> values, absl::Duration timeout) override;
  absl::Status AllReduceMin(std::span<int64_t> values, absl::Duration timeout) override;
  absl::Status Send(int dest, int tag, std::span<const std::byte> bytes,
                    absl::Duration timeout) override;
  absl::Status Recv(int source, int tag, std::vector<std::byte>& bytes,
                    absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;

 private:
  std::map<int, std::deque<std::vector<std::byte>>> self_messages_;  // by tag, oldest first
};

}  // namespace kvserve::parallel
