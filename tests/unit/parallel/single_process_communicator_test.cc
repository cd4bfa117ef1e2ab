#include "parallel/single_process_communicator.h"

#include <gtest/gtest.h>

namespace kvserve::parallel {
namespace {

std::vector<std::byte> Bytes(std::initializer_list<int> values) {
  std::vector<std::byte> out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

TEST(SingleProcessCommunicatorTest, IsRankZeroOfOne) {
  SingleProcessCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
}

TEST(SingleProcessCommunicatorTest, CollectivesLeaveDataAsIs) {
  SingleProcessCommunicator comm;
  std::vector<std::byte> bytes = Bytes({1, 2, 3});
  ASSERT_TRUE(comm.Broadcast(bytes, 0, absl::Seconds(1)).ok());
  EXPECT_EQ(bytes, Bytes({1, 2, 3}));
  std::vector<float> values = {1.5f, -2.25f, 0.1f};
  ASSERT_TRUE(comm.AllReduceSum(values, absl::Seconds(1)).ok());
  EXPECT_EQ(values, (std::vector<float>{1.5f, -2.25f, 0.1f}));  // a sum over one rank
  std::vector<int64_t> counts = {7, -3, int64_t{1} << 40};
  ASSERT_TRUE(comm.AllReduceMin(counts, absl::Seconds(1)).ok());
  EXPECT_EQ(counts, (std::vector<int64_t>{7, -3, int64_t{1} << 40}));  // a minimum over one rank
  EXPECT_TRUE(comm.Barrier(absl::Seconds(1)).ok());
}

TEST(SingleProcessCommunicatorTest, RefusesRanksOtherThanZero) {
  SingleProcessCommunicator comm;
  std::vector<std::byte> bytes;
  absl::Status s = comm.Broadcast(bytes, 1, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("root rank 1"), std::string::npos) << s;
  EXPECT_EQ(comm.Send(2, 0, bytes, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Recv(-1, 0, bytes, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.Send(0, -3, bytes, absl::Seconds(1)).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SingleProcessCommunicatorTest, MessagesToItselfArriveInOrderPerTag) {
  SingleProcessCommunicator comm;
  ASSERT_TRUE(comm.Send(0, 7, Bytes({1}), absl::Seconds(1)).ok());
  ASSERT_TRUE(comm.Send(0, 9, Bytes({9, 9}), absl::Seconds(1)).ok());
  ASSERT_TRUE(comm.Send(0, 7, Bytes({2, 2, 2}), absl::Seconds(1)).ok());
  std::vector<std::byte> got;
  ASSERT_TRUE(comm.Recv(0, 7, got, absl::Seconds(1)).ok());
  EXPECT_EQ(got, Bytes({1}));
  ASSERT_TRUE(comm.Recv(0, 7, got, absl::Seconds(1)).ok());
  EXPECT_EQ(got, Bytes({2, 2, 2}));
  ASSERT_TRUE(comm.Recv(0, 9, got, absl::Seconds(1)).ok());
  EXPECT_EQ(got, Bytes({9, 9}));
  absl::Status s = comm.Recv(0, 7, got, absl::Milliseconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("tag 7"), std::string::npos) << s;
}

}  // namespace
}  // namespace kvserve::parallel
