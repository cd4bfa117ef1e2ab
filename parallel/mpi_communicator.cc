#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvserve::parallel {
namespace {

// A started request and the buffer MPI may still read or write until it completes.
struct InFlight {
  MPI_Request request = MPI_REQUEST_NULL;
  std::vector<std::byte> buffer;
};

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return absl::StrCat("MPI error ", rc);
  return std::string(text, static_cast<size_t>(len));
}

// Polling backoff: spin briefly (decode-step collectives complete in microseconds), then
// yield, then sleep so a rank waiting on a slow peer does not burn the core it shares.
void Backoff(int64_t attempt) {
  if (attempt < 256) return;
  if (attempt < 2048) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// Polls every request of `pending` once; drops the completed ones.
void TestAll(std::vector<InFlight>& pending) {
  for (size_t i = 0; i < pending.size();) {
    int done = 0;
    const int rc = MPI_Test(&pending[i].request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || done) {
      pending[i] = std::move(pending.back());
      pending.pop_back();
    } else {
      ++i;
    }
  }
}

// Polls until `pending` is empty or `grace` has passed on `clock`.
void Drain(std::vector<InFlight>& pending, const base::Clock& clock, absl::Duration grace) {
  const base::Nanos deadline = clock.now_ns() + absl::ToInt64Nanoseconds(grace);
  for (int64_t attempt = 0; !pending.empty(); ++attempt) {
    TestAll(pending);
    if (pending.empty() || clock.now_ns() >= deadline) break;
    Backoff(attempt);
  }
}

}  // namespace

struct MpiEnvironment::Orphans {
  std::vector<InFlight> requests;
};

MpiEnvironment::MpiEnvironment() : orphans_(std::make_unique<Orphans>()) {}

absl::StatusOr<std::unique_ptr<MpiEnvironment>> MpiEnvironment::Init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized)
    return absl::FailedPreconditionError(
        "MPI is initialised already: one MpiEnvironment per process");
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat("MPI_Init_thread failed: ", MpiError(rc)));
  }
  std::unique_ptr<MpiEnvironment> env(new MpiEnvironment());
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return absl::FailedPreconditionError(
        absl::StrCat("MPI gives thread level ", provided, ", kvserve needs MPI_THREAD_SERIALIZED"));
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &env->world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &env->world_size_);
  return env;
}

bool MpiEnvironment::will_finalize() const {
  TestAll(orphans_->requests);
  return orphans_->requests.empty();
}

MpiEnvironment::~MpiEnvironment() {
  if (will_finalize()) {
    MPI_Finalize();
    return;
  }
  // Leave MPI running: MPI_Finalize would wait for the peer that never answered. The
  // orphaned buffers are leaked on purpose: MPI may still write into them until exit.
  (void)orphans_.release();
}

struct MpiCommunicator::State {
  MpiEnvironment* env = nullptr;
  const base::Clock* clock = nullptr;
  Options options;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  int tag_ub = 32767;   // MPI guarantees at least this; the attribute may say more
  absl::Status broken;  // OK while usable; else the first timeout or MPI failure
  // Buffers handed to MPI; reused from call to call, moved to `abandoned` on timeout.
  InFlight op;
  std::vector<std::byte> header;  // the broadcast length
  std::vector<InFlight> abandoned;

  base::Nanos DeadlineAfter(absl::Duration timeout) const {
    return clock->now_ns() + absl::ToInt64Nanoseconds(std::max(timeout, absl::ZeroDuration()));
  }

  // The peer(s) an operation waits on, for error messages: exact with two ranks.
  std::string Others() const {
    if (size == 2) return absl::StrCat("rank ", 1 - rank);
    return absl::StrCat("another of the ", size, " ranks");
  }

  absl::Status Usable(absl::string_view what) const {
    if (broken.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, " on rank ", rank,
                     ": communicator unusable after an earlier failure: ", broken.message()));
  }

  absl::Status Fail(absl::Status status) {
    if (broken.ok()) broken = status;
    return status;
  }

  absl::Status Started(int rc, absl::string_view what) {
    if (rc == MPI_SUCCESS) return absl::OkStatus();
    return Fail(absl::InternalError(
        absl::StrCat(what, " on rank ", rank, " failed to start: ", MpiError(rc))));
  }

  // Polls op.request until it completes or `deadline` passes. On timeout the request and its
  // buffer move to `abandoned` (MPI may still use the buffer) and the communicator breaks.
  absl::Status Wait(base::Nanos deadline, base::Nanos started, absl::string_view what,
                    absl::string_view peer) {
    for (int64_t attempt = 0;; ++attempt) {
      int done = 0;
      if (int rc = MPI_Test(&op.request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
        return Fail(
            absl::InternalError(absl::StrCat(what, " on rank ", rank, " failed: ", MpiError(rc))));
      }
      if (done) return absl::OkStatus();
      const base::Nanos now = clock->now_ns();
      if (now >= deadline) {
        abandoned.push_back(std::move(op));
        op = InFlight{};
        return Fail(absl::DeadlineExceededError(absl::StrCat(
            what, " on rank ", rank, " of ", size, ": ", peer, " did not answer within ",
            absl::FormatDuration(absl::Nanoseconds(now - started)))));
      }
      Backoff(attempt);
    }
  }

  absl::Status CheckRank(absl::string_view what, absl::string_view role, int peer) const {
    if (peer < 0 || peer >= size) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", role, " rank ", peer,
                                                     " is outside the world of ", size, " ranks"));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status AllReduce(std::span<T> values, MPI_Datatype type, MPI_Op op_kind,
                         absl::string_view name, absl::Duration timeout);

  absl::Status CheckTag(absl::string_view what, int tag) const {
    if (tag < 0 || tag > tag_ub) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": tag ", tag, " is outside [0, ", tag_ub, "]"));
    }
    return absl::OkStatus();
  }
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(MpiEnvironment& env,
                                                                         const base::Clock& clock,
                                                                         absl::Duration timeout,
                                                                         Options options) {
  auto state = std::make_unique<State>();
  state->env = &env;
  state->clock = &clock;
  state->options = options;
  const base::Nanos started = clock.now_ns();
  const base::Nanos deadline = state->DeadlineAfter(timeout);
  state->rank = env.world_rank();
  state->size = env.world_size();
  // MPI writes the new handle when the duplicate completes, possibly after a timeout: into the
  // owned buffer that is orphaned with the request, never into a local.
  state->op.buffer.assign(sizeof(MPI_Comm), std::byte{0});
  auto* new_comm = reinterpret_cast<MPI_Comm*>(state->op.buffer.data());
  if (absl::Status s = state->Started(MPI_Comm_idup(MPI_COMM_WORLD, new_comm, &state->op.request),
                                      "communicator dup");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = state->Wait(deadline, started, "communicator dup", state->Others());
      !s.ok()) {
    env.orphans_->requests.insert(env.orphans_->requests.end(),
                                  std::make_move_iterator(state->abandoned.begin()),
                                  std::make_move_iterator(state->abandoned.end()));
    return s;
  }
  MPI_Comm comm = MPI_COMM_NULL;
  std::memcpy(&comm, state->op.buffer.data(), sizeof(MPI_Comm));
  state->comm = comm;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);  // failures become Statuses, not aborts
  void* attr = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &attr, &found);
  if (found && attr != nullptr) state->tag_ub = *static_cast<int*>(attr);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(state)));
}

MpiCommunicator::~MpiCommunicator() {
  State& s = *state_;
  Drain(s.abandoned, *s.clock, s.options.drain_grace);
  if (s.abandoned.empty()) {
    if (s.comm != MPI_COMM_NULL) MPI_Comm_free(&s.comm);
    return;
  }
  // A peer never completed them: keep their buffers alive with the environment, which will
  // not finalize. The MPI communicator is leaked with them.
  auto& orphans = s.env->orphans_->requests;
  orphans.insert(orphans.end(), std::make_move_iterator(s.abandoned.begin()),
                 std::make_move_iterator(s.abandoned.end()));
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }

absl::Status MpiCommunicator::Broadcast(std::vector<std::byte>& bytes, int root,
                                        absl::Duration timeout) {
  State& s = *state_;
  if (absl::Status st = s.Usable("broadcast"); !st.ok()) return st;
  if (absl::Status st = s.CheckRank("broadcast", "root", root); !st.ok()) return st;
  const base::Nanos started = s.clock->now_ns();
  const base::Nanos deadline = s.DeadlineAfter(timeout);
  const std::string peer = s.rank == root ? s.Others() : absl::StrCat("root rank ", root);
  const std::string what = absl::StrCat("broadcast from rank ", root);

  // Phase 1: the length (8 bytes, little-endian), so receivers can size their buffer.
  s.op.buffer.assign(8, std::byte{0});
  if (s.rank == root) {
    const uint64_t n = bytes.size();
    for (int i = 0; i < 8; ++i) s.op.buffer[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  }
  if (absl::Status st =
          s.Started(MPI_Ibcast(s.op.buffer.data(), 8, MPI_BYTE, root, s.comm, &s.op.request), what);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = s.Wait(deadline, started, absl::StrCat(what, " (length)"), peer); !st.ok())
    return st;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(s.op.buffer[i]) << (8 * i);
  // Every rank sees the same length, so every rank refuses alike and none is left waiting.
  if (n > static_cast<uint64_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", n, " bytes exceed the ", INT_MAX, "-byte limit"));
  }
  if (n == 0) {
    bytes.clear();
    return absl::OkStatus();
  }

  // Phase 2: the payload, through the owned buffer.
  if (s.rank == root) {
    s.op.buffer.assign(bytes.begin(), bytes.end());
  } else {
    s.op.buffer.resize(n);
  }
  if (absl::Status st = s.Started(MPI_Ibcast(s.op.buffer.data(), static_cast<int>(n), MPI_BYTE,
                                             root, s.comm, &s.op.request),
                                  what);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = s.Wait(deadline, started, what, peer); !st.ok()) return st;
  if (s.rank != root) bytes.assign(s.op.buffer.begin(), s.op.buffer.end());
  return absl::OkStatus();
}

// Both all-reduces: copy in, reduce the owned buffer in place, copy out.
template <typename T>
absl::Status MpiCommunicator::State::AllReduce(std::span<T> values, MPI_Datatype type,
                                               MPI_Op op_kind, absl::string_view name,
                                               absl::Duration timeout) {
  if (absl::Status st = Usable(name); !st.ok()) return st;
  if (values.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", values.size(), " values exceed the MPI count"));
  }
  const base::Nanos started = clock->now_ns();
  const base::Nanos deadline = DeadlineAfter(timeout);
  const size_t bytes = values.size_bytes();
  op.buffer.resize(bytes);  // operator new's alignment suffices for float and int64_t
  if (bytes > 0) std::memcpy(op.buffer.data(), values.data(), bytes);
  if (absl::Status st =
          Started(MPI_Iallreduce(MPI_IN_PLACE, op.buffer.data(), static_cast<int>(values.size()),
                                 type, op_kind, comm, &op.request),
                  name);
      !st.ok()) {
    return st;
  }
  if (absl::Status st =
          Wait(deadline, started, absl::StrCat(name, " of ", values.size(), " values"), Others());
      !st.ok()) {
    return st;
  }
  if (bytes > 0) std::memcpy(values.data(), op.buffer.data(), bytes);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllReduceSum(std::span<float> values, absl::Duration timeout) {
  return state_->AllReduce(values, MPI_FLOAT, MPI_SUM, "all-reduce", timeout);
}

absl::Status MpiCommunicator::AllReduceMin(std::span<int64_t> values, absl::Duration timeout) {
  return state_->AllReduce(values, MPI_INT64_T, MPI_MIN, "all-reduce min", timeout);
}

absl::Status MpiCommunicator::Send(int dest, int tag, std::span<const std::byte> bytes,
                                   absl::Duration timeout) {
  State& s = *state_;
  if (absl::Status st = s.Usable("send"); !st.ok()) return st;
  if (absl::Status st = s.CheckRank("send", "destination", dest); !st.ok()) return st;
  if (absl::Status st = s.CheckTag("send", tag); !st.ok()) return st;
  if (bytes.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat("send: ", bytes.size(), " bytes exceed the MPI count"));
  }
  const base::Nanos started = s.clock->now_ns();
  const base::Nanos deadline = s.DeadlineAfter(timeout);
  const std::string what = absl::StrCat("send of ", bytes.size(), " bytes (tag ", tag, ")");
  s.op.buffer.assign(bytes.begin(), bytes.end());
  if (absl::Status st = s.Started(MPI_Isend(s.op.buffer.data(), static_cast<int>(bytes.size()),
                                            MPI_BYTE, dest, tag, s.comm, &s.op.request),
                                  what);
      !st.ok()) {
    return st;
  }
  return s.Wait(deadline, started, what, absl::StrCat("destination rank ", dest));
}

namespace {
constexpr absl::Duration kRecvTransferGrace = absl::Seconds(10);
}  // namespace

absl::Status MpiCommunicator::Recv(int source, int tag, std::vector<std::byte>& bytes,
                                   absl::Duration timeout) {
  State& s = *state_;
  if (absl::Status st = s.Usable("recv"); !st.ok()) return st;
  if (absl::Status st = s.CheckRank("recv", "source", source); !st.ok()) return st;
  if (absl::Status st = s.CheckTag("recv", tag); !st.ok()) return st;
  const base::Nanos started = s.clock->now_ns();
  const base::Nanos deadline = s.DeadlineAfter(timeout);
  const std::string what = absl::StrCat("recv (tag ", tag, ")");
  // Match first (nothing is in flight while probing, so a timeout here breaks nothing), then
  // receive exactly that message into a buffer of its size.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  for (int64_t attempt = 0;; ++attempt) {
    int found = 0;
    if (int rc = MPI_Improbe(source, tag, s.comm, &found, &message, &status); rc != MPI_SUCCESS) {
      return s.Fail(
          absl::InternalError(absl::StrCat(what, " on rank ", s.rank, " failed: ", MpiError(rc))));
    }
    if (found) break;
    const base::Nanos now = s.clock->now_ns();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " on rank ", s.rank, ": source rank ", source, " sent nothing within ",
                       absl::FormatDuration(absl::Nanoseconds(now - started))));
    }
    Backoff(attempt);
  }
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  s.op.buffer.resize(static_cast<size_t>(count));
  if (absl::Status st =
          s.Started(MPI_Imrecv(s.op.buffer.data(), count, MPI_BYTE, &message, &s.op.request), what);
      !st.ok()) {
    return st;
  }
  // The timeout bounds the wait for a peer to send; a message that matched in time gets
  // kRecvTransferGrace to arrive (a large one is still in transfer), so that a caller polling
  // with short timeouts does not break the communicator in the middle of a transfer.
  const base::Nanos transfer_deadline = std::max(deadline, s.DeadlineAfter(kRecvTransferGrace));
  if (absl::Status st =
          s.Wait(transfer_deadline, started, what, absl::StrCat("source rank ", source));
      !st.ok())
    return st;
  bytes.assign(s.op.buffer.begin(), s.op.buffer.end());
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Barrier(absl::Duration timeout) {
  State& s = *state_;
  if (absl::Status st = s.Usable("barrier"); !st.ok()) return st;
  const base::Nanos started = s.clock->now_ns();
  const base::Nanos deadline = s.DeadlineAfter(timeout);
  if (absl::Status st = s.Started(MPI_Ibarrier(s.comm, &s.op.request), "barrier"); !st.ok())
    return st;
  return s.Wait(deadline, started, "barrier", s.Others());
}

}  // namespace kvserve::parallel
