#include "parallel/rank_handshake.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <utility>

#include "parallel/build_id.h"
#include "parallel/single_process_communicator.h"
#include "parallel/wire_format.h"

namespace kvserve::parallel {
namespace {

// One rank's view of a group, scripted: what each peer "sent" this rank, what rank 0
// broadcasts (seen by a worker), and a record of what this rank sent and broadcast.
class ScriptedCommunicator final : public Communicator {
 public:
  ScriptedCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status Broadcast(std::vector<std::byte>& bytes, int root,
                         absl::Duration /*timeout*/) override {
    if (root == rank_) {
      broadcasts.push_back(bytes);
      return absl::OkStatus();
    }
    if (!from_root) return absl::DeadlineExceededError("broadcast: root never sent");
    bytes = *from_root;
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(std::span<float> /*values*/, absl::Duration /*timeout*/) override {
    return absl::UnimplementedError("not scripted");
  }
  absl::Status AllReduceMin(std::span<int64_t> /*values*/, absl::Duration /*timeout*/) override {
    return absl::UnimplementedError("not scripted");
  }
  absl::Status Send(int dest, int tag, std::span<const std::byte> bytes,
                    absl::Duration /*timeout*/) override {
    sent.push_back({dest, tag, std::vector<std::byte>(bytes.begin(), bytes.end())});
    return absl::OkStatus();
  }
  absl::Status Recv(int source, int tag, std::vector<std::byte>& bytes,
                    absl::Duration /*timeout*/) override {
    recv_order.push_back(source);
    auto it = inbox.find({source, tag});
    if (it == inbox.end())
      return absl::DeadlineExceededError(absl::StrCat("recv: source rank ", source, " silent"));
    bytes = it->second;
    return absl::OkStatus();
  }
  absl::Status Barrier(absl::Duration /*timeout*/) override { return absl::OkStatus(); }

  struct Sent {
    int dest;
    int tag;
    std::vector<std::byte> bytes;
  };
  std::map<std::pair<int, int>, std::vector<std::byte>> inbox;  // (source, tag) -> message
  std::optional<std::vector<std::byte>> from_root;
  std::vector<Sent> sent;
  std::vector<std::vector<std::byte>> broadcasts;
  std::vector<int> recv_order;

 private:
  int rank_;
  int size_;
};

RankFingerprint Leader() {
  return RankFingerprint{"/models/a", 0x1234, "0.1.0-abc/step-message-v1"};
}

std::vector<std::byte> Encoded(const RankFingerprint& f) {
  std::vector<std::byte> out;
  EncodeRankFingerprint(f, out);
  return out;
}

// The verdict as the header documents it: u8 accepted, u32 length + text, u64 checksum.
std::pair<bool, std::string> ReadVerdict(const std::vector<std::byte>& bytes) {
  EXPECT_GE(bytes.size(), 13u);
  const bool accepted = bytes[0] == std::byte{1};
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= std::to_integer<uint32_t>(bytes[1 + i]) << (8 * i);
  EXPECT_EQ(bytes.size(), 5u + n + 8u);
  return {accepted, std::string(reinterpret_cast<const char*>(bytes.data() + 5), n)};
}

std::vector<std::byte> Verdict(bool accepted, const std::string& text) {
  std::vector<std::byte> out;
  WireWriter w(out);
  w.U8(accepted ? 1 : 0);
  w.String(text);
  w.Checksum();
  return out;
}

const base::FakeClock clock_at_zero;  // never advances: every step gets the whole timeout

TEST(RankFingerprintTest, RoundTripsAndRefusesEveryTruncationAndCorruption) {
  const RankFingerprint f = Leader();
  const std::vector<std::byte> bytes = Encoded(f);
  // magic 4 + version 2 + (4 + 9) path + 8 hash + (4 + 25) build id + 8 checksum
  EXPECT_EQ(bytes.size(), 4u + 2 + 4 + f.model_path.size() + 8 + 4 + f.build_id.size() + 8);
  RankFingerprint out;
  ASSERT_TRUE(DecodeRankFingerprint(bytes, out).ok());
  EXPECT_EQ(out, f);
  for (size_t k = 0; k < bytes.size(); ++k) {
    absl::Status s = DecodeRankFingerprint(std::span(bytes).first(k), out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << k;
    EXPECT_NE(s.message().find("truncated in field"), std::string::npos) << s;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::vector<std::byte> bad = bytes;
    bad[i] ^= std::byte{0x10};
    EXPECT_FALSE(DecodeRankFingerprint(bad, out).ok()) << i;
  }
}

TEST(RankFingerprintTest, HashesConfigTextAndTakesThisBuildId) {
  // FNV-1a 64 of "" is the offset basis; of "a" a published test vector.
  EXPECT_EQ(HashConfigJson(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(HashConfigJson("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_NE(HashConfigJson(R"({"engine":{"max_batch":8}})"),
            HashConfigJson(R"({"engine":{"max_batch":9}})"));
  const RankFingerprint f = MakeRankFingerprint("/m", R"({"x":1})");
  EXPECT_EQ(f.model_path, "/m");
  EXPECT_EQ(f.config_hash, HashConfigJson(R"({"x":1})"));
  EXPECT_EQ(f.build_id, ThisBuildId());
  EXPECT_NE(ThisBuildId().find("/step-message-v1"), std::string::npos) << ThisBuildId();
  EXPECT_GT(ThisBuildId().find('-'), 0u) << ThisBuildId();  // "<version>-<revision>"
}

TEST(RankFingerprintTest, ComparisonNamesRankAndEveryDifferingField) {
  EXPECT_TRUE(CompareRankFingerprints(Leader(), Leader(), 3).ok());
  RankFingerprint other = Leader();
  other.model_path = "/models/b";
  absl::Status s = CompareRankFingerprints(Leader(), other, 3);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "rank 3 was started with a different model path '/models/b' (rank 0: '/models/a')");
  other = Leader();
  other.config_hash = 0x99;
  other.build_id = "0.1.0-def/step-message-v1";
  s = CompareRankFingerprints(Leader(), other, 1);
  EXPECT_NE(s.message().find(
                "rank 1 was started with a different configuration (config hash 0000000000000099, "
                "rank 0: 0000000000001234)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("a different build id '0.1.0-def/step-message-v1' (rank 0: "
                             "'0.1.0-abc/step-message-v1')"),
            std::string::npos)
      << s;
}

TEST(RankHandshakeTest, LeaderAcceptsMatchingRanksAndAnnouncesIt) {
  ScriptedCommunicator comm(0, 3);
  comm.inbox[{1, kHandshakeTag}] = Encoded(Leader());
  comm.inbox[{2, kHandshakeTag}] = Encoded(Leader());
  ASSERT_TRUE(RunRankHandshake(comm, Leader(), clock_at_zero, absl::Seconds(1)).ok());
  EXPECT_EQ(comm.recv_order, (std::vector<int>{1, 2}));
  ASSERT_EQ(comm.broadcasts.size(), 1u);
  EXPECT_EQ(ReadVerdict(comm.broadcasts[0]), std::make_pair(true, std::string()));
}

TEST(RankHandshakeTest, LeaderRefusesAMismatchedRankByName) {
  ScriptedCommunicator comm(0, 3);
  RankFingerprint wrong = Leader();
  wrong.model_path = "/models/b";
  comm.inbox[{1, kHandshakeTag}] = Encoded(Leader());
  comm.inbox[{2, kHandshakeTag}] = Encoded(wrong);
  absl::Status s = RunRankHandshake(comm, Leader(), clock_at_zero, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("rank 2 was started with a different model path '/models/b'"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.message().find("rank 1"), std::string::npos) << s;  // rank 1 matched
  ASSERT_EQ(comm.broadcasts.size(), 1u);                          // the workers learn why
  EXPECT_EQ(ReadVerdict(comm.broadcasts[0]), std::make_pair(false, std::string(s.message())));
}

TEST(RankHandshakeTest, LeaderNamesASilentOrGarbledRank) {
  ScriptedCommunicator silent(0, 2);
  absl::Status s = RunRankHandshake(silent, Leader(), clock_at_zero, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("rank 1 gave no fingerprint"), std::string::npos) << s;
  ASSERT_EQ(silent.broadcasts.size(), 1u);
  EXPECT_FALSE(ReadVerdict(silent.broadcasts[0]).first);

  ScriptedCommunicator garbled(0, 2);
  std::vector<std::byte> bytes = Encoded(Leader());
  bytes.pop_back();
  garbled.inbox[{1, kHandshakeTag}] = bytes;
  s = RunRankHandshake(garbled, Leader(), clock_at_zero, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find(
                "rank 1 gave no fingerprint: rank fingerprint truncated in field 'checksum'"),
            std::string::npos)
      << s;
}

TEST(RankHandshakeTest, WorkerSendsItsFingerprintAndFollowsTheVerdict) {
  RankFingerprint mine = Leader();
  mine.config_hash = 7;
  ScriptedCommunicator accepted(1, 2);
  accepted.from_root = Verdict(true, "");
  ASSERT_TRUE(RunRankHandshake(accepted, mine, clock_at_zero, absl::Seconds(1)).ok());
  ASSERT_EQ(accepted.sent.size(), 1u);
  EXPECT_EQ(accepted.sent[0].dest, 0);
  EXPECT_EQ(accepted.sent[0].tag, kHandshakeTag);
  RankFingerprint sent;
  ASSERT_TRUE(DecodeRankFingerprint(accepted.sent[0].bytes, sent).ok());
  EXPECT_EQ(sent, mine);

  ScriptedCommunicator refused(1, 2);
  refused.from_root = Verdict(false, "rank 1 was started with a different configuration");
  absl::Status s = RunRankHandshake(refused, mine, clock_at_zero, absl::Seconds(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "rank 0 refused the group (this is rank 1): rank 1 was started with a different "
            "configuration");

  ScriptedCommunicator garbled(1, 2);
  std::vector<std::byte> verdict = Verdict(true, "");
  verdict[0] = std::byte{0};  // accepted flipped to refused without resealing
  garbled.from_root = verdict;
  EXPECT_EQ(RunRankHandshake(garbled, mine, clock_at_zero, absl::Seconds(1)).code(),
            absl::StatusCode::kDataLoss);

  ScriptedCommunicator no_verdict(1, 2);
  EXPECT_EQ(RunRankHandshake(no_verdict, mine, clock_at_zero, absl::Seconds(1)).code(),
            absl::StatusCode::kDeadlineExceeded);
}

TEST(RankHandshakeTest, SingleProcessHasNothingToCompare) {
  SingleProcessCommunicator comm;
  EXPECT_TRUE(RunRankHandshake(comm, Leader(), clock_at_zero, absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace kvserve::parallel
