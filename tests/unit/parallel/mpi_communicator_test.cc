// Two real ranks under mpirun (tests/unit/parallel/CMakeLists.txt registers `parallel_mpi`):
// both processes run every test in the same order, each test on its own communicator (a
// duplicate of MPI_COMM_WORLD), so a communicator broken by a timeout stays in its test.
// Run by hand: mpirun -np 2 --oversubscribe build/bin/parallel_mpi_test
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <thread>

#include "base/clock.h"
#include "parallel/mpi_communicator.h"
#include "parallel/rank_handshake.h"

namespace kvserve::parallel {
namespace {

MpiEnvironment* g_env = nullptr;  // set by main() before any test runs

}  // namespace

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // gtest holds its lock while reporting a result, so the test's name is noted at its start.
  void OnTestStart(const ::testing::TestInfo& info) override { test_ = info.name(); }
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    fprintf(stderr, "[rank %d] %s:%d: Failure in %s\n%s\n", rank_,
            result.file_name() ? result.file_name() : "?", result.line_number(), test_.c_str(),
            result.message());
  }

 private:
  int rank_;
  std::string test_;
};

namespace {

class MpiCommunicatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(g_env, nullptr);
    ASSERT_EQ(g_env->world_size(), 2) << "run under mpirun -np 2";
    MpiCommunicator::Options options;
    options.drain_grace = absl::Seconds(5);  // the stalled peer of a timeout test joins after ~1 s
    auto comm = MpiCommunicator::Create(*g_env, clock_, absl::Seconds(10), options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }

  int rank() const { return comm_->rank(); }

  base::SteadyClock clock_;
  std::unique_ptr<MpiCommunicator> comm_;
};

std::vector<std::byte> Pattern(size_t n, int seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = static_cast<std::byte>((i * 31 + static_cast<size_t>(seed) * 7) & 0xff);
  return out;
}

// Rank r's all-reduce input: values with many mantissa bits, both signs, different magnitudes.
float Input(int r, int i) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(r) * 40503u;
  return (static_cast<float>(h % 1000003u) - 500000.0f) / (r == 0 ? 1024.0f : 7.0f);
}

TEST_F(MpiCommunicatorTest, HasTwoRanks) {
  EXPECT_EQ(comm_->size(), 2);
  EXPECT_EQ(comm_->rank(), g_env->world_rank());
}

TEST_F(MpiCommunicatorTest, BroadcastsFromEitherRootAtAnyLength) {
  for (int root : {0, 1}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, size_t{3} << 20}) {
      std::vector<std::byte> bytes = rank() == root ? Pattern(n, root) : Pattern(5, 99);
      ASSERT_TRUE(comm_->Broadcast(bytes, root, absl::Seconds(10)).ok());
      EXPECT_EQ(bytes, Pattern(n, root)) << "root " << root << " length " << n;
    }
  }
}

TEST_F(MpiCommunicatorTest, AllReduceSumIsBitExactSumOfBothRanks) {
  constexpr int kN = 4099;
  std::vector<float> values(kN);
  for (int i = 0; i < kN; ++i) values[i] = Input(rank(), i);
  ASSERT_TRUE(comm_->AllReduceSum(values, absl::Seconds(10)).ok());
  for (int i = 0; i < kN; ++i) {
    const float want = Input(0, i) + Input(1, i);  // one float addition: a + b == b + a exactly
    ASSERT_EQ(std::bit_cast<uint32_t>(values[i]), std::bit_cast<uint32_t>(want)) << "element " << i;
  }
}

TEST_F(MpiCommunicatorTest, AllReduceMinTakesTheSmallerOfEachPair) {
  // Block counts as two ranks would report them, and values beyond 32 bits.
  const std::vector<int64_t> rank0 = {4096, 17, -5, int64_t{3} << 40, 0};
  const std::vector<int64_t> rank1 = {3900, 18, -6, int64_t{5} << 40, 0};
  std::vector<int64_t> values = rank() == 0 ? rank0 : rank1;
  ASSERT_TRUE(comm_->AllReduceMin(values, absl::Seconds(10)).ok());
  EXPECT_EQ(values, (std::vector<int64_t>{3900, 17, -6, int64_t{3} << 40, 0}));
}

TEST_F(MpiCommunicatorTest, SendsAndReceivesByPeerAndTag) {
  const int peer = 1 - rank();
  if (rank() == 0) {
    ASSERT_TRUE(comm_->Send(peer, 3, Pattern(777, 3), absl::Seconds(10)).ok());
    ASSERT_TRUE(comm_->Send(peer, 4, {}, absl::Seconds(10)).ok());
    std::vector<std::byte> reply;
    ASSERT_TRUE(comm_->Recv(peer, 5, reply, absl::Seconds(10)).ok());
    EXPECT_EQ(reply, Pattern(1 << 20, 5));
  } else {
    std::vector<std::byte> got = Pattern(3, 0);
    // Tag 4 first: matching is by tag, not by arrival order.
    ASSERT_TRUE(comm_->Recv(peer, 4, got, absl::Seconds(10)).ok());
    EXPECT_TRUE(got.empty());
    ASSERT_TRUE(comm_->Recv(peer, 3, got, absl::Seconds(10)).ok());
    EXPECT_EQ(got, Pattern(777, 3));
    ASSERT_TRUE(comm_->Send(peer, 5, Pattern(1 << 20, 5), absl::Seconds(10)).ok());
  }
  EXPECT_TRUE(comm_->Barrier(absl::Seconds(10)).ok());
}

TEST_F(MpiCommunicatorTest, RefusesBadRanksAndTags) {
  std::vector<std::byte> bytes;
  EXPECT_EQ(comm_->Broadcast(bytes, 2, absl::Seconds(1)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Send(-1, 0, bytes, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Recv(0, -2, bytes, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm_->Barrier(absl::Seconds(10)).ok());  // refusals break nothing
}

TEST_F(MpiCommunicatorTest, HandshakeAcceptsRanksStartedAlike) {
  const RankFingerprint mine = MakeRankFingerprint("/models/tiny", R"({"engine":{"max_batch":8}})");
  EXPECT_TRUE(RunRankHandshake(*comm_, mine, clock_, absl::Seconds(10)).ok());
}

TEST_F(MpiCommunicatorTest, HandshakeRefusesARankWithAnotherConfigurationByName) {
  const RankFingerprint mine =
      MakeRankFingerprint("/models/tiny", rank() == 0 ? R"({"engine":{"max_batch":8}})"
                                                      : R"({"engine":{"max_batch":9}})");
  absl::Status s = RunRankHandshake(*comm_, mine, clock_, absl::Seconds(10));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("rank 1 was started with a different configuration"),
            std::string::npos)
      << s;
  if (rank() == 1) {
    EXPECT_NE(s.message().find("rank 0 refused the group (this is rank 1)"), std::string::npos)
        << s;
  }
  EXPECT_TRUE(comm_->Barrier(absl::Seconds(10)).ok());  // a refusal breaks nothing
}

// A Recv that matched nothing has nothing in flight: it times out and the communicator stays
// usable.
TEST_F(MpiCommunicatorTest, RecvFromSilentPeerTimesOutAndLeavesCommunicatorUsable) {
  if (rank() == 1) {
    std::vector<std::byte> bytes;
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = comm_->Recv(0, 11, bytes, absl::Milliseconds(200));
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("source rank 0"), std::string::npos) << s;
    EXPECT_GE(elapsed, std::chrono::milliseconds(200));
    EXPECT_LT(elapsed, std::chrono::milliseconds(700));
  }
  EXPECT_TRUE(comm_->Barrier(absl::Seconds(10)).ok());
}

// Rank 1 stops responding for 1 s; rank 0's collective must give up after its 200 ms, name
// the operation and rank 1, and leave the communicator refusing further work. Rank 1 then
// joins late (the abandoned request completes while rank 0 drains it), so both exit cleanly.
TEST_F(MpiCommunicatorTest, BarrierWithStalledPeerReturnsDeadlineExceeded) {
  if (rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = comm_->Barrier(absl::Milliseconds(200));
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("barrier"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
    EXPECT_GE(elapsed, std::chrono::milliseconds(200));
    EXPECT_LT(elapsed, std::chrono::milliseconds(700));
    absl::Status after = comm_->Barrier(absl::Seconds(1));
    EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition) << after;
    EXPECT_NE(after.message().find("barrier"), std::string::npos) << after;
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_TRUE(comm_->Barrier(absl::Seconds(10)).ok());
  }
}

// The root stalls: rank 0 waits for the length and gives up. The late root broadcasts an
// empty message (length only), which completes rank 0's abandoned request as it drains.
TEST_F(MpiCommunicatorTest, BroadcastWithStalledRootReturnsDeadlineExceeded) {
  std::vector<std::byte> bytes;
  if (rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = comm_->Broadcast(bytes, 1, absl::Milliseconds(200));
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("broadcast from rank 1"), std::string::npos) << s;
    EXPECT_NE(s.message().find("root rank 1 did not answer"), std::string::npos) << s;
    EXPECT_LT(elapsed, std::chrono::milliseconds(700));
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_TRUE(comm_->Broadcast(bytes, 1, absl::Seconds(10)).ok());
  }
}

TEST_F(MpiCommunicatorTest, AllReduceWithStalledPeerReturnsDeadlineExceeded) {
  std::vector<float> values = {Input(rank(), 0), Input(rank(), 1)};
  if (rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status s = comm_->AllReduceSum(values, absl::Milliseconds(200));
    const auto elapsed = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("all-reduce"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s;
    EXPECT_LT(elapsed, std::chrono::milliseconds(700));
    EXPECT_EQ(comm_->AllReduceSum(values, absl::Seconds(1)).code(),
              absl::StatusCode::kFailedPrecondition);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ASSERT_TRUE(comm_->AllReduceSum(values, absl::Seconds(10)).ok());
    // Rank 0's abandoned request still carried its copy of the input.
    EXPECT_EQ(values[0], Input(0, 0) + Input(1, 0));
    EXPECT_EQ(values[1], Input(0, 1) + Input(1, 1));
  }
}

}  // namespace
}  // namespace kvserve::parallel

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto env = kvserve::parallel::MpiEnvironment::Init(&argc, &argv);
  if (!env.ok()) {
    fprintf(stderr, "%s\n", std::string(env.status().message()).c_str());
    return 1;
  }
  kvserve::parallel::g_env = env->get();
  // Only rank 0 prints gtest's progress; the other ranks print their failures, tagged.
  if ((*env)->world_rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new kvserve::parallel::RankFailurePrinter((*env)->world_rank()));
  }
  const int rc = RUN_ALL_TESTS();
  kvserve::parallel::g_env = nullptr;
  return rc;
}
