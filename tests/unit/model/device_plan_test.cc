// Host-side planning of the device forward pass (model/device_plan.h, device_weight_layout.h):
// what the CUDA model uploads and how it addresses it, checked without a GPU.
#include "model/device_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "model/batch_builder.h"
#include "model/device_weight_layout.h"

namespace kvserve::model {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 50;
  return c;
}

cache::KvLayout LayoutFor(const ModelConfig& c, int block_size) {
  cache::KvLayout l;
  l.num_layers = c.num_layers;
  l.num_kv_heads = c.num_kv_heads;
  l.head_dim = c.head_dim;
  l.block_size = block_size;
  return l;
}

int64_t ReadInt64(const std::vector<int32_t>& staging, int64_t at) {
  int64_t v;
  std::memcpy(&v, staging.data() + at, sizeof(v));
  return v;
}

TEST(PackForwardBatchTest, SectionsRoundTripAndAreAligned) {
  // A prefill chunk, a decode row on a non-contiguous table, and a sequence with no logits.
  BatchBuilder bb(4);
  const std::vector<int32_t> t0{5, 6, 7}, t1{9}, t2{1, 2};
  const std::vector<int32_t> table0{3}, table1{8, 2, 11}, table2{4, 5};
  bb.AddSequence(t0, 0, 0, table0, LogitsWanted::kLast);
  bb.AddSequence(t1, 40, 10, table1, LogitsWanted::kLast);
  bb.AddSequence(t2, 5, 5, table2, LogitsWanted::kNone);
  const ForwardBatch b = bb.batch();
  std::vector<int32_t> staging;
  const PackedBatch p = PackForwardBatch(b, staging);

  EXPECT_EQ(p.num_tokens, 6);
  EXPECT_EQ(p.num_seqs, 3);
  EXPECT_EQ(p.num_logits_rows, 2);
  EXPECT_EQ(p.max_kv_len, 11);
  EXPECT_EQ(static_cast<int64_t>(staging.size()), p.total_int32);
  for (int64_t off : {p.token_ids, p.positions, p.seq_starts, p.kv_lens, p.table_offsets, p.block_tables,
                      p.logits_rows, p.row_seq, p.slot_mapping}) {
    EXPECT_EQ(off % 4, 0) << "sections start on 16 bytes";
  }
  auto section = [&](int64_t off, size_t n) {
    return std::vector<int32_t>(staging.begin() + off, staging.begin() + off + static_cast<int64_t>(n));
  };
  EXPECT_EQ(section(p.token_ids, 6), std::vector<int32_t>({5, 6, 7, 9, 1, 2}));
  EXPECT_EQ(section(p.positions, 6), std::vector<int32_t>({0, 1, 2, 40, 5, 6}));
  EXPECT_EQ(section(p.seq_starts, 4), std::vector<int32_t>({0, 3, 4, 6}));
  EXPECT_EQ(section(p.kv_lens, 3), std::vector<int32_t>({3, 11, 7}));
  EXPECT_EQ(section(p.table_offsets, 4), std::vector<int32_t>({0, 1, 4, 6}));
  EXPECT_EQ(section(p.block_tables, 6), std::vector<int32_t>({3, 8, 2, 11, 4, 5}));
  EXPECT_EQ(section(p.logits_rows, 2), std::vector<int32_t>({2, 3}));
  EXPECT_EQ(section(p.row_seq, 6), std::vector<int32_t>({0, 0, 0, 1, 2, 2}));
  // Slots: seq 1's physical index 10 is block table1[2] = 11, offset 2; seq 2's 5 and 6 are
  // block table2[1] = 5, offsets 1 and 2.
  const std::vector<int64_t> want_slots{12, 13, 14, 46, 21, 22};
  for (int r = 0; r < 6; ++r) {
    EXPECT_EQ(ReadInt64(staging, p.slot_mapping + 2 * r), want_slots[static_cast<size_t>(r)]) << "row " << r;
    EXPECT_EQ(b.slot_mapping[static_cast<size_t>(r)], want_slots[static_cast<size_t>(r)]);
  }
}

TEST(PackForwardBatchTest, RoutesDecodeRowsToSplitKvAndPrefillRowsToTiles) {
  // Sequences of 3 rows (prefill chunk), 1 (decode), 2, 1, 7 (a chunk longer than two tiles).
  const std::vector<int32_t> starts{0, 3, 4, 6, 7, 14};
  const AttentionRowCounts c = CountAttentionRows(starts, 3);
  EXPECT_EQ(c.split_rows, 2);
  EXPECT_EQ(c.tiles, 1 + 1 + 3);
  std::vector<int32_t> split(static_cast<size_t>(c.split_rows)), tiles(2 * static_cast<size_t>(c.tiles));
  PlanAttentionRows(starts, 3, split, tiles);
  EXPECT_EQ(split, (std::vector<int32_t>{3, 6}));
  EXPECT_EQ(tiles, (std::vector<int32_t>{0, 3, 4, 2, 7, 3, 10, 3, 13, 1}));
  // Every row exactly once, each tile within one sequence.
  std::vector<int> seen(14, 0);
  for (int32_t r : split) ++seen[static_cast<size_t>(r)];
  for (size_t i = 0; i < tiles.size(); i += 2) {
    for (int32_t r = tiles[i]; r < tiles[i] + tiles[i + 1]; ++r) ++seen[static_cast<size_t>(r)];
    const auto seq = std::upper_bound(starts.begin(), starts.end(), tiles[i]) - starts.begin() - 1;
    EXPECT_LE(tiles[i] + tiles[i + 1], starts[static_cast<size_t>(seq) + 1]) << "tile " << i / 2;
  }
  EXPECT_EQ(seen, std::vector<int>(14, 1));

  // Packed: the same lists in the staging array, 16-byte aligned; tile_rows 0 packs none.
  std::vector<int32_t> tokens(14, 5), positions(14, 0), lens{3, 9, 2, 30, 7}, offsets{0, 1, 2, 3, 4, 5},
      tables{1, 2, 3, 4, 5}, logits{2};
  std::vector<int64_t> slots(14, -1);
  ForwardBatch b{tokens, positions, slots, starts, lens, offsets, tables, logits};
  std::vector<int32_t> staging;
  const PackedBatch p = PackForwardBatch(b, staging, 3);
  EXPECT_EQ(p.num_split_rows, 2);
  EXPECT_EQ(p.num_tiles, 5);
  EXPECT_EQ(p.tile_rows, 3);
  EXPECT_EQ(p.split_rows % 4, 0);
  EXPECT_EQ(p.tiles % 4, 0);
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + p.split_rows, staging.begin() + p.split_rows + 2), split);
  EXPECT_EQ(std::vector<int32_t>(staging.begin() + p.tiles, staging.begin() + p.tiles + 10), tiles);
  const PackedBatch none = PackForwardBatch(b, staging, 0);
  EXPECT_EQ(none.num_split_rows, 0);
  EXPECT_EQ(none.num_tiles, 0);
}

TEST(PackForwardBatchTest, PrefillTileRowsKeepTheTileInItsBudget) {
  EXPECT_EQ(PrefillTileRows(128, 1, 8192), 32);  // capped
  EXPECT_EQ(PrefillTileRows(128, 4, 8192), 16);
  EXPECT_EQ(PrefillTileRows(128, 8, 8192), 8);
  EXPECT_EQ(PrefillTileRows(256, 8, 8192), 4);
  EXPECT_EQ(PrefillTileRows(48, 2, 8192), 32);
  EXPECT_EQ(PrefillTileRows(256, 8, 1024), 0);  // not even one row
  for (int hd : {48, 64, 128, 256}) {
    for (int g : {1, 2, 4, 8}) EXPECT_LE(PrefillTileRows(hd, g, 8192) * hd * g, 8192) << hd << " " << g;
  }
}

TEST(PackForwardBatchTest, NegativeSlotsSurviveAsInt64AndStagingIsReused) {
  const std::vector<int32_t> tokens{1, 2}, positions{0, 1}, starts{0, 2}, lens{2}, offsets{0, 1}, tables{7},
      logits{1};
  const std::vector<int64_t> slots{-1, 7LL * 16 + 1};
  ForwardBatch b{tokens, positions, slots, starts, lens, offsets, tables, logits};
  std::vector<int32_t> staging(1000, 42);
  const PackedBatch p = PackForwardBatch(b, staging);
  EXPECT_EQ(ReadInt64(staging, p.slot_mapping), -1);
  EXPECT_EQ(ReadInt64(staging, p.slot_mapping + 2), 113);
  EXPECT_EQ(static_cast<int64_t>(staging.size()), p.total_int32);
}

TEST(ValidateForwardBatchTest, AcceptsGoodBatchesAndNamesWhatIsWrong) {
  const ModelConfig c = SmallConfig();
  const cache::KvLayout l = LayoutFor(c, 4);
  BatchBuilder bb(4);
  const std::vector<int32_t> toks{1, 2, 3}, table{2};
  bb.AddSequence(toks, 0, 0, table, LogitsWanted::kLast);
  ForwardBatch b = bb.batch();
  EXPECT_TRUE(ValidateForwardBatch(c, 16, b, l, 4).ok());

  auto error_of = [&](const ForwardBatch& fb, int64_t blocks, int max_tokens = 16) {
    return std::string(ValidateForwardBatch(c, max_tokens, fb, l, blocks).message());
  };
  EXPECT_NE(error_of(b, 2).find("block id 2 out of range"), std::string::npos);
  EXPECT_NE(error_of(b, 4, 2).find("exceed max_tokens_per_step"), std::string::npos);

  const std::vector<int32_t> bad_tokens{1, 50, 3};
  ForwardBatch bt = b;
  bt.token_ids = bad_tokens;
  EXPECT_NE(error_of(bt, 4).find("token id 50"), std::string::npos);

  const std::vector<int64_t> bad_slots{8, 9, 16};
  ForwardBatch bs = b;
  bs.slot_mapping = bad_slots;
  EXPECT_NE(error_of(bs, 4).find("slot 16"), std::string::npos);

  const std::vector<int32_t> long_len{5};
  ForwardBatch bl = b;
  bl.kv_lens = long_len;
  EXPECT_NE(error_of(bl, 4).find("needs more than its 1 blocks"), std::string::npos);

  cache::KvLayout other = l;
  other.head_dim = 8;
  EXPECT_FALSE(ValidateForwardBatch(c, 16, b, other, 4).ok());
}

TEST(ChooseSplitTokensTest, FillsTheDeviceForFewLongRowsAndRespectsTheWorkspace) {
  // One decode row, 8 KV heads, 8k context: splits so rows x heads x splits ~ 264 CTAs.
  const int split = ChooseSplitTokens(1, 8, 32, 128, 8192, 264, 64, size_t{64} << 20);
  const int splits = (8192 + split - 1) / split;
  EXPECT_GE(splits * 8, 264);
  EXPECT_LE(splits * 8, 264 + 8);
  // Never below the minimum split.
  EXPECT_EQ(ChooseSplitTokens(1, 1, 1, 64, 100, 10000, 64, size_t{1} << 30), 50);
  EXPECT_GE(ChooseSplitTokens(1, 1, 1, 64, 100, 10000, 64, size_t{1} << 30) * 2, 100);
  // Many rows: one split.
  EXPECT_EQ(ChooseSplitTokens(4096, 8, 32, 128, 4096, 264, 64, size_t{64} << 20), 4096);
  // Workspace-bound: 256 rows x 32 heads x 130 floats = 4.26 MB per split; 10 MB allows 2.
  const int ws_split = ChooseSplitTokens(256, 8, 32, 128, 8192, 100000, 64, size_t{10} << 20);
  EXPECT_EQ(ws_split, 4096);
  EXPECT_LE(SplitWorkspaceBytes(256, 32, 128, 8192, ws_split), size_t{10} << 20);
  // Every result covers the context.
  std::mt19937 rng(7);
  for (int i = 0; i < 500; ++i) {
    const int rows = 1 + static_cast<int>(rng() % 300), kv_heads = 1 + static_cast<int>(rng() % 8);
    const int len = 1 + static_cast<int>(rng() % 20000);
    const size_t ws = (size_t{1} << 20) * (1 + rng() % 128);
    const int s = ChooseSplitTokens(rows, kv_heads, kv_heads * 4, 128, len, 264, 64, ws);
    ASSERT_GE(s, 1);
    ASSERT_LE(s, std::max(len, 64));
    const size_t one_split = SplitWorkspaceBytes(rows, kv_heads * 4, 128, len, len);
    if (one_split <= ws) {
      ASSERT_LE(SplitWorkspaceBytes(rows, kv_heads * 4, 128, len, s), ws) << rows << " " << len << " " << ws;
    }
  }
}

TEST(RouteForTest, OnlyPlainGreedyStaysOnTheDevice) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(RouteFor(p), SampleRoute::kDeviceGreedy);
  p.logprobs = 0;
  EXPECT_EQ(RouteFor(p), SampleRoute::kDeviceGreedy);
  p.logprobs = 3;
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);  // top-N logprobs: host
  p.logprobs.reset();
  p.logit_bias.emplace_back(3, 1.0f);
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
  p.logit_bias.clear();
  p.repetition_penalty = 1.1f;
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.5f;
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
  p.frequency_penalty = 0.0f;
  // The request masks (min_tokens, allowed_token_ids, bad_words) are applied on the host.
  p.min_tokens = 2;
  p.min_tokens_banned = {1};
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
  p.min_tokens = 0;
  EXPECT_EQ(RouteFor(p), SampleRoute::kDeviceGreedy);
  p.allowed_token_ids = {1};
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
  p.allowed_token_ids.clear();
  p.bad_words = {{1, 2}};
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
  p.bad_words.clear();
  p.temperature = 0.7f;
  EXPECT_EQ(RouteFor(p), SampleRoute::kHost);
}

TEST(DeviceMasksTest, OnlyConstrainedRowsCarryAMaskPaddedOrCutToTheVocabulary) {
  DeviceMasks m;
  m.Reset(4, 3);  // a 130..192-token vocabulary
  EXPECT_EQ(m.mask_index, (std::vector<int32_t>{-1, -1, -1, -1}));
  EXPECT_EQ(m.num_masks, 0);
  EXPECT_TRUE(m.words.empty());
  const std::vector<uint64_t> short_mask{0x5ull};                         // a smaller tokenizer vocabulary
  const std::vector<uint64_t> long_mask{0x1ull, 0x2ull, 0x4ull, 0xffull};  // one word past the model's
  m.Set(2, short_mask);
  m.Set(0, long_mask);
  EXPECT_EQ(m.mask_index, (std::vector<int32_t>{1, -1, 0, -1}));
  EXPECT_EQ(m.num_masks, 2);
  // Row 2's mask first (set first), zero-padded: ids past the grammar's mask are never allowed.
  EXPECT_EQ(m.words, (std::vector<uint64_t>{0x5ull, 0, 0, 0x1ull, 0x2ull, 0x4ull}));
  // A new step reuses the buffers and forgets the previous masks.
  m.Reset(2, 3);
  EXPECT_EQ(m.mask_index, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(m.num_masks, 0);
  EXPECT_TRUE(m.words.empty());
}

TEST(DeviceWeightLayoutTest, PiecesAreAlignedDisjointAndSized) {
  for (DeviceWeightDtype dt : {DeviceWeightDtype::kFp32, DeviceWeightDtype::kBf16}) {
    for (bool biases : {false, true}) {
      ModelConfig c = SmallConfig();
      c.qkv_bias = biases;
      c.o_bias = biases;
      c.qk_norm = biases;  // Qwen3's per-head norms and gpt-oss's sinks ride with the biased variant
      c.attention_sinks = biases;
      if (biases) {        // and layer 1 is a mixture of experts
        c.moe.num_experts = 3;
        c.moe.top_k = 2;
        c.moe.intermediate_size = 40;
        c.moe.router_bias = true;  // gpt-oss's biases
        c.moe.expert_bias = true;
        c.layer_moe = {0, 1, 0};
      }
      const DeviceWeightLayout w = PlanDeviceWeights(c, dt);
      const size_t wb = DeviceWeightDtypeBytes(dt);
      const size_t d = 64, v = 50, q = 64, qkv = 64 + 2 * 32, inter = 96;
      std::vector<std::pair<size_t, size_t>> pieces{{w.embed, v * d * 4}, {w.final_norm, d * 4}, {w.lm_head, v * d * wb}};
      ASSERT_EQ(w.layers.size(), 3u);
      for (size_t li = 0; li < w.layers.size(); ++li) {
        const DeviceLayerOffsets& l = w.layers[li];
        pieces.push_back({l.input_norm, d * 4});
        pieces.push_back({l.qkv, qkv * d * wb});
        pieces.push_back({l.o, d * q * wb});
        pieces.push_back({l.post_norm, d * 4});
        if (c.is_moe_layer(static_cast<int>(li))) {
          EXPECT_EQ(l.gate_up, kNoTensor);
          EXPECT_EQ(l.down, kNoTensor);
          const size_t ie = 40;
          pieces.push_back({l.router, 3 * d * 4});
          pieces.push_back({l.router_bias, 3 * 4});
          for (size_t e = 0; e < 3; ++e) {
            pieces.push_back({l.expert_gate_up_bias + e * l.expert_gate_up_bias_stride, 2 * ie * 4});
            pieces.push_back({l.expert_down_bias + e * l.expert_down_bias_stride, d * 4});
            EXPECT_GE(l.expert_gate_up_stride, 2 * ie * d * wb);
            EXPECT_GE(l.expert_down_stride, d * ie * wb);
            pieces.push_back({l.expert_gate_up + e * l.expert_gate_up_stride, 2 * ie * d * wb});
            pieces.push_back({l.expert_down + e * l.expert_down_stride, d * ie * wb});
          }
        } else {
          EXPECT_EQ(l.router, kNoTensor);
          pieces.push_back({l.gate_up, 2 * inter * d * wb});
          pieces.push_back({l.down, d * inter * wb});
        }
        EXPECT_EQ(l.qkv_bias != kNoTensor, biases);
        EXPECT_EQ(l.o_bias != kNoTensor, biases);
        EXPECT_EQ(l.q_norm != kNoTensor, biases);
        EXPECT_EQ(l.k_norm != kNoTensor, biases);
        EXPECT_EQ(l.sinks != kNoTensor, biases);
        if (biases) {
          pieces.push_back({l.qkv_bias, qkv * 4});
          pieces.push_back({l.o_bias, d * 4});
          pieces.push_back({l.q_norm, static_cast<size_t>(c.head_dim) * 4});
          pieces.push_back({l.k_norm, static_cast<size_t>(c.head_dim) * 4});
          pieces.push_back({l.sinks, 4 * 4});  // num_heads 4
        }
      }
      std::sort(pieces.begin(), pieces.end());
      for (size_t i = 0; i < pieces.size(); ++i) {
        EXPECT_EQ(pieces[i].first % kDeviceWeightAlign, 0u);
        const size_t end = pieces[i].first + pieces[i].second;
        if (i + 1 < pieces.size()) {
          EXPECT_LE(end, pieces[i + 1].first);
        } else {
          EXPECT_LE(end, w.total_bytes);
        }
      }
      EXPECT_EQ(w.total_bytes % kDeviceWeightAlign, 0u);
    }
  }
}

}  // namespace
}  // namespace kvserve::model
