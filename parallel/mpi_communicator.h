// MpiCommunicator: ranks as MPI processes (mpirun -np N), for CPU backends on one host or
// many. MpiEnvironment owns MPI_Init_thread / MPI_Finalize for the process; each
// MpiCommunicator works on its own duplicate of MPI_COMM_WORLD, so its traffic and its broken
// state (communicator.h) are its own. No MPI type appears in this header.
//
// Deadlines: every operation is started non-blocking (MPI_Ibcast, MPI_Iallreduce,
// MPI_Isend, MPI_Improbe + MPI_Imrecv, MPI_Ibarrier) and polled with MPI_Test against the
// injected clock. MPI cannot cancel a started collective, so on timeout the request stays
// in flight together with the buffer it reads or writes (always a buffer the communicator
// owns: callers' memory is copied in and out, never handed to MPI), and the communicator is
// broken from then on.
//
// Shutdown: destroying a communicator polls its abandoned requests for `drain_grace` (a late
// peer may still complete them) and then frees the MPI communicator. Requests still pending
// are handed to the environment, which keeps their buffers alive and then skips MPI_Finalize
// (it would wait for the hung peer): the process exits without finalizing and mpirun ends
// the whole job with an error, which is what a hung rank should cause.
//
// Lifetimes: one MpiEnvironment per process, created before and destroyed after every
// MpiCommunicator. MPI is initialised with MPI_THREAD_SERIALIZED: any thread may call, one
// at a time.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "base/clock.h"
#include "parallel/communicator.h"

namespace kvserve::parallel {

class MpiEnvironment {
 public:
  // Fails if MPI was initialised already or cannot give MPI_THREAD_SERIALIZED.
  static absl::StatusOr<std::unique_ptr<MpiEnvironment>> Init(int* argc, char*** argv);
  ~MpiEnvironment();
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // False once a communicator was destroyed with requests still in flight: the destructor
  // will then not call MPI_Finalize.
  bool will_finalize() const;

  struct Orphans;  // requests abandoned by destroyed communicators (mpi_communicator.cc)

 private:
  MpiEnvironment();
  friend class MpiCommunicator;

  int world_rank_ = 0;
  int world_size_ = 0;
  std::unique_ptr<Orphans> orphans_;
};

class MpiCommunicator final : public Communicator {
 public:
  struct Options {
    absl::Duration drain_grace = absl::Seconds(2);  // see "Shutdown" above
  };

  // Duplicates MPI_COMM_WORLD: a collective, so every rank calls it (within `timeout`).
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(MpiEnvironment& env,
                                                                 const base::Clock& clock,
                                                                 absl::Duration timeout,
                                                                 Options options);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  absl::Status Broadcast(std::vector<std::byte>& bytes, int root, absl::Duration timeout) override;
  absl::Status AllReduceSum(std::span<float> values, absl::Duration timeout) override;
  absl::Status AllReduceMin(std::span<int64_t> values, absl::Duration timeout) override;
  absl::Status Send(int dest, int tag, std::span<const std::byte> bytes,
                    absl::Duration timeout) override;
  absl::Status Recv(int source, int tag, std::vector<std::byte>& bytes,
                    absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;

  struct State;  // MPI handles and owned buffers (mpi_communicator.cc)

 private:
  explicit MpiCommunicator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kvserve::parallel
