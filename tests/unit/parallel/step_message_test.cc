#include "parallel/step_message.h"

#include "parallel/wire_format.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace kvserve::parallel {
namespace {

using cache::BlockCopy;
using cache::BlockId;

// Three sequences as model/forward_batch.h draws them (block size 16): a fresh 4-row
// prefill, a decode at position 89, the second chunk (2 rows) of a prompt.
StepMessage ThreeSequences(bool windows) {
  StepMessage m;
  m.step_id = 41;
  m.token_ids = {11, 12, 13, 14, 500, 7, 8};
  m.positions = {0, 1, 2, 3, 89, 10, 11};
  m.slot_mapping = {16, 17, 18, 19, 7 * 16 + 9, 8 * 16 + 10, 8 * 16 + 11};
  m.seq_starts = {0, 4, 5, 7};
  m.kv_lens = {4, 90, 12};
  m.block_table_offsets = {0, 1, 7, 8};
  m.block_tables = {1, 2, 3, 4, 5, 6, 7, 8};
  m.logits_rows = {3, 4, 6};
  if (windows) {
    m.window_kv_lens = {4, 90, 12};
    m.window_table_offsets = {0, 1, 2, 3};
    m.window_block_tables = {20, 21, 22};
  }
  m.swap_out = {BlockCopy{BlockId(3), BlockId(1)}};
  m.swap_in = {BlockCopy{BlockId(2), BlockId(4)}, BlockCopy{BlockId(9), BlockId(10)}};
  m.copies = {BlockCopy{BlockId(5), BlockId(9)}};
  return m;
}

std::vector<std::byte> Encode(const StepMessage& m) {
  std::vector<std::byte> out;
  EncodeStepMessage(m, out);
  return out;
}

// The reference checksum, from its definition in wire_format.h (FNV-1a's offset basis,
// prime and step over little-endian 64-bit words, then the trailing bytes), not the code's.
uint64_t ReferenceChecksum(std::span<const std::byte> bytes) {
  uint64_t h = 14695981039346656037ull;
  size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    uint64_t word = 0;
    for (int b = 7; b >= 0; --b) word = (word << 8) | std::to_integer<uint64_t>(bytes[i + b]);
    h = (h ^ word) * 1099511628211ull;
  }
  for (; i < bytes.size(); ++i) h = (h ^ std::to_integer<uint64_t>(bytes[i])) * 1099511628211ull;
  return h;
}

// Byte-level reference encoder written from the layout table in step_message.h; it also
// records which field every byte belongs to, for the truncation test.
struct Reference {
  std::vector<std::byte> bytes;
  std::vector<std::string> field_of;  // per byte

  void Le(uint64_t v, int n, const std::string& field) {
    for (int i = 0; i < n; ++i) {
      bytes.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
      field_of.push_back(field);
    }
  }
  template <typename T>
  void Array(const std::vector<T>& v, const std::string& field) {
    Le(v.size(), 4, field);
    for (T x : v) Le(static_cast<uint64_t>(x), sizeof(T), field);
  }
  void Copies(const std::vector<BlockCopy>& v, const std::string& field) {
    Le(v.size(), 4, field);
    for (const BlockCopy& c : v) {
      Le(static_cast<uint32_t>(c.src.value()), 4, field);
      Le(static_cast<uint32_t>(c.dst.value()), 4, field);
    }
  }
};

Reference ReferenceEncode(const StepMessage& m) {
  Reference r;
  for (char c : std::string("KVSM")) r.Le(static_cast<uint8_t>(c), 1, "magic");
  r.Le(1, 2, "version");
  r.Le(static_cast<uint16_t>(m.kind), 2, "kind");
  r.Le(static_cast<uint64_t>(m.step_id), 8, "step_id");
  r.Array(m.token_ids, "token_ids");
  r.Array(m.positions, "positions");
  r.Array(m.slot_mapping, "slot_mapping");
  r.Array(m.seq_starts, "seq_starts");
  r.Array(m.kv_lens, "kv_lens");
  r.Array(m.block_table_offsets, "block_table_offsets");
  r.Array(m.block_tables, "block_tables");
  r.Array(m.logits_rows, "logits_rows");
  r.Array(m.window_kv_lens, "window_kv_lens");
  r.Array(m.window_table_offsets, "window_table_offsets");
  r.Array(m.window_block_tables, "window_block_tables");
  r.Copies(m.swap_out, "swap_out");
  r.Copies(m.swap_in, "swap_in");
  r.Copies(m.copies, "copies");
  r.Le(ReferenceChecksum(r.bytes), 8, "checksum");
  return r;
}

// Re-seals a hand-edited encoding with a correct checksum, so only validation can object.
std::vector<std::byte> Reseal(std::vector<std::byte> bytes) {
  bytes.resize(bytes.size() - 8);
  const uint64_t h = ReferenceChecksum(bytes);
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((h >> (8 * i)) & 0xff));
  return bytes;
}

TEST(WireChecksumTest, MatchesItsDefinitionAtEveryLengthAndSeesEveryByte) {
  std::vector<std::byte> bytes;
  for (int i = 0; i < 40; ++i) bytes.push_back(static_cast<std::byte>(i * 37 + 11));
  for (size_t n = 0; n <= bytes.size(); ++n) {
    const auto prefix = std::span(bytes).first(n);
    ASSERT_EQ(WireChecksum(prefix), ReferenceChecksum(prefix)) << n;
    for (size_t i = 0; i < n; ++i) {
      std::vector<std::byte> changed(prefix.begin(), prefix.end());
      changed[i] ^= std::byte{0x40};
      EXPECT_NE(WireChecksum(changed), WireChecksum(prefix)) << n << " " << i;
    }
  }
}

TEST(StepMessageTest, EncodingMatchesTheDocumentedLayout) {
  for (bool windows : {false, true}) {
    const StepMessage m = ThreeSequences(windows);
    EXPECT_EQ(Encode(m), ReferenceEncode(m).bytes) << "windows " << windows;
  }
  StepMessage shutdown;
  shutdown.kind = StepKind::kShutdown;
  shutdown.step_id = -5;
  EXPECT_EQ(Encode(shutdown), ReferenceEncode(shutdown).bytes);
}

TEST(StepMessageTest, RoundTripsIntoAReusedMessage) {
  StepMessage out = ThreeSequences(true);  // stale contents must be replaced, not appended to
  for (bool windows : {false, true}) {
    const StepMessage m = ThreeSequences(windows);
    ASSERT_TRUE(DecodeStepMessage(Encode(m), out).ok());
    EXPECT_EQ(out, m) << out.ToString();
  }
  StepMessage empty;  // a step that only moves blocks
  empty.copies = {BlockCopy{BlockId(1), BlockId(2)}};
  ASSERT_TRUE(DecodeStepMessage(Encode(empty), out).ok());
  EXPECT_EQ(out, empty);
}

TEST(StepMessageTest, BatchViewAndAssignBatchCarryEveryArray) {
  const StepMessage m = ThreeSequences(true);
  const model::ForwardBatch b = m.batch();
  EXPECT_EQ(b.num_tokens(), 7);
  EXPECT_EQ(b.num_seqs(), 3);
  EXPECT_EQ(b.block_tables.data(), m.block_tables.data());  // a view, not a copy
  StepMessage copy;
  copy.step_id = m.step_id;
  copy.swap_out = m.swap_out;
  copy.swap_in = m.swap_in;
  copy.copies = m.copies;
  copy.AssignBatch(b);
  EXPECT_EQ(copy, m);
}

TEST(StepMessageTest, TruncationAtEveryByteNamesTheFieldBeingRead) {
  const StepMessage m = ThreeSequences(true);
  const Reference ref = ReferenceEncode(m);
  ASSERT_EQ(Encode(m), ref.bytes);
  StepMessage out;
  for (size_t k = 0; k < ref.bytes.size(); ++k) {
    absl::Status s = DecodeStepMessage(std::span(ref.bytes).first(k), out);
    ASSERT_EQ(s.code(), absl::StatusCode::kDataLoss) << "prefix " << k << ": " << s;
    EXPECT_NE(s.message().find("truncated in field '" + ref.field_of[k] + "'"), std::string::npos)
        << "prefix " << k << " (first missing byte in " << ref.field_of[k] << "): " << s;
  }
}

TEST(StepMessageTest, EveryCorruptedByteIsRefused) {
  const std::vector<std::byte> good = Encode(ThreeSequences(true));
  StepMessage out;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<std::byte> bad = good;
      bad[i] ^= static_cast<std::byte>(flip);
      EXPECT_FALSE(DecodeStepMessage(bad, out).ok()) << "byte " << i << " ^ " << int(flip);
    }
  }
}

TEST(StepMessageTest, NamesMagicVersionChecksumAndTrailingBytes) {
  const std::vector<std::byte> good = Encode(ThreeSequences(false));
  StepMessage out;
  std::vector<std::byte> bad = good;
  bad[0] = std::byte{'X'};
  absl::Status s = DecodeStepMessage(bad, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("magic"), std::string::npos) << s;

  bad = good;
  bad[4] = std::byte{2};  // version 2: another build
  s = DecodeStepMessage(Reseal(bad), out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("'version' is 2"), std::string::npos) << s;

  bad = good;
  bad[20] ^= std::byte{1};  // inside token_ids' values
  s = DecodeStepMessage(bad, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s;

  bad = good;
  bad.push_back(std::byte{0});
  s = DecodeStepMessage(bad, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("after the checksum"), std::string::npos) << s;
}

TEST(StepMessageTest, HugeCountIsRefusedWithoutAllocating) {
  std::vector<std::byte> bad = Encode(ThreeSequences(false));
  for (int i = 0; i < 4; ++i) bad[16 + i] = std::byte{0xff};  // token_ids count = 2^32 - 1
  StepMessage out;
  absl::Status s = DecodeStepMessage(bad, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("truncated in field 'token_ids': needs 17179869180 bytes"),
            std::string::npos)
      << s;
  EXPECT_LT(out.token_ids.capacity(), 1000u);
}

// Each invariant of model/forward_batch.h, broken once, sealed with a valid checksum.
TEST(StepMessageTest, ValidationNamesTheInconsistentField) {
  struct Case {
    const char* field;
    void (*edit)(StepMessage&);
  };
  const Case cases[] = {
      {"positions", [](StepMessage& m) { m.positions.pop_back(); }},
      {"slot_mapping", [](StepMessage& m) { m.slot_mapping.push_back(3); }},
      {"slot_mapping", [](StepMessage& m) { m.slot_mapping[2] = -2; }},
      {"seq_starts", [](StepMessage& m) { m.seq_starts.back() = 6; }},
      {"seq_starts",
       [](StepMessage& m) {
         m.seq_starts = {0, 5, 4, 7};
       }},
      {"seq_starts", [](StepMessage& m) { m.seq_starts.clear(); }},
      {"kv_lens", [](StepMessage& m) { m.kv_lens.pop_back(); }},
      {"kv_lens", [](StepMessage& m) { m.kv_lens[0] = 3; }},  // 4 rows need 4 entries
      {"block_table_offsets", [](StepMessage& m) { m.block_table_offsets.back() = 9; }},
      {"block_table_offsets", [](StepMessage& m) { m.block_table_offsets[0] = 1; }},
      {"logits_rows", [](StepMessage& m) { m.logits_rows.push_back(7); }},
      {"logits_rows", [](StepMessage& m) { m.logits_rows[0] = -1; }},
      {"window_kv_lens", [](StepMessage& m) { m.window_kv_lens.pop_back(); }},
      {"window_table_offsets", [](StepMessage& m) { m.window_table_offsets.clear(); }},
      {"window_table_offsets", [](StepMessage& m) { m.window_block_tables.push_back(1); }},
      {"copies", [](StepMessage& m) { m.copies[0].dst = BlockId(-1); }},
      {"swap_in", [](StepMessage& m) { m.swap_in[1].src = BlockId(-4); }},
      {"kind", [](StepMessage& m) { m.kind = StepKind::kShutdown; }},
      {"kind", [](StepMessage& m) { m.kind = static_cast<StepKind>(9); }},
  };
  for (const Case& c : cases) {
    StepMessage m = ThreeSequences(true);
    c.edit(m);
    absl::Status direct = ValidateStepMessage(m);
    EXPECT_EQ(direct.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(direct.message().find(std::string("field '") + c.field + "'"), std::string::npos)
        << c.field << ": " << direct;
    StepMessage out;
    absl::Status decoded = DecodeStepMessage(Encode(m), out);  // the receiver checks too
    EXPECT_EQ(decoded, direct) << c.field;
  }
  EXPECT_TRUE(ValidateStepMessage(ThreeSequences(true)).ok());
}

// The size quoted in step_message.h, counted from the layout: 16 header + 14 counts x 4 +
// 8 checksum, plus per decode sequence token, position, slot (8), seq start, kv len, table
// offset and logits row, plus one more seq start and table offset, plus 4 per table entry.
TEST(StepMessageTest, DecodeStepSizeFollowsTheLayout) {
  constexpr int kSeqs = 32, kBlocksPerSeq = 64, kBlockSize = 16;
  StepMessage m;
  m.seq_starts.push_back(0);
  m.block_table_offsets.push_back(0);
  for (int s = 0; s < kSeqs; ++s) {
    m.token_ids.push_back(s);
    m.positions.push_back(kBlocksPerSeq * kBlockSize - 1);
    m.slot_mapping.push_back(int64_t{s} * kBlocksPerSeq * kBlockSize + kBlockSize - 1);
    m.seq_starts.push_back(s + 1);
    m.kv_lens.push_back(kBlocksPerSeq * kBlockSize);
    for (int b = 0; b < kBlocksPerSeq; ++b) m.block_tables.push_back(1 + s * kBlocksPerSeq + b);
    m.block_table_offsets.push_back(static_cast<int32_t>(m.block_tables.size()));
    m.logits_rows.push_back(s);
  }
  ASSERT_TRUE(ValidateStepMessage(m).ok());
  EXPECT_EQ(Encode(m).size(), size_t{88 + 32 * kSeqs + 4 * kSeqs * kBlocksPerSeq});  // 9304 bytes
}

TEST(StepMessageTest, ToStringShowsSequencesAndMoves) {
  const std::string s = ThreeSequences(false).ToString();
  EXPECT_NE(s.find("step 41 forward: 7 rows"), std::string::npos) << s;
  EXPECT_NE(s.find("seq 1 rows [4,5) tokens [500] pos 89 kv 90 blocks [2 3 4 5 6 7]"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("logits rows [3 4 6]"), std::string::npos) << s;
  EXPECT_NE(s.find("swap in [2->4 9->10]"), std::string::npos) << s;
  EXPECT_NE(s.find("copies [5->9]"), std::string::npos) << s;
  StepMessage broken = ThreeSequences(false);
  broken.kv_lens.pop_back();
  EXPECT_NE(broken.ToString().find("inconsistent"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::parallel
