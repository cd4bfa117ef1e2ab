// Grouped low-rank deltas of many LoRA adapters over one step's rows (Punica's SGMV shape):
// each row carries an adapter slot (-1: the base alone); rows of one slot are gathered into
// one segment, and per segment a "shrink" then an "expand" adds the adapter's delta to the
// base projection's output:
//
//   rows:      0   1   2   3   4   5          row_slots = { 1, -1, 0, 1, -1, 0 }
//   grouped:   [ 2   5 ][ 0   3 ]             segments  = { slot 0: [0,2), slot 1: [2,4) }
//
//   shrink:  t[g][j]                 = Σ_k x[row][k] · a_t[k][j]          j < rank, k ascending
//   expand:  y[row][out_begin + o]  += Σ_j (scale_s · t[g][rank_begin + j]) · b_t[j][o]
//                                                               per slice, j ascending
//
// Weights of one adapter on one stacked projection (LoraWeightsView), the scale already
// folded into B (so mixed ranks and scales need no per-row factor):
//
//   a_t   [in][rank]           column block [rank_begin, rank_begin + rank_s) = slice s's Aᵀ
//   slice s: b_t [rank_s][out_rows]   = (scale_s · B_s)ᵀ, written to y columns
//                                       [out_begin, out_begin + out_rows)
//
// e.g. q|k|v stacked with q_proj and v_proj adapted: rank = r_q + r_v, slices {q rows, ranks
// [0, r_q)} and {v rows, ranks [r_q, r_q + r_v)}; k's rows get nothing.
//
// Batch invariance: every t and every y element is one sequential chain in a fixed order
// (k ascending, then j ascending, accumulated onto y), whatever the grouping, the blocking
// or the thread count, so a row's result never depends on what else is in the step. The
// compiler may fuse a multiply-add into an FMA (the AVX2 clone): the same expression in every
// row-block and chunk variant, and whether an output uses the vector body or the scalar tail
// depends on the slice's width only, so the fusing never depends on the batch either.
// Nothing allocates per call: LoraRowGroups::Reserve sizes its arrays once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvserve::kernels::cpu {

// Weights are fp32, or bf16 (raw bits, widened exactly in the kernels: half the bytes to
// hold and to stream). One view is all fp32 (a_t, b_t) or all bf16 (a_t_bf16, b_t_bf16).
struct LoraSliceWeights {
  int32_t out_begin = 0;  // first y column this slice writes
  int32_t out_rows = 0;
  int32_t rank_begin = 0;  // its columns of t
  int32_t rank = 0;
  const float* b_t = nullptr;  // [rank][out_rows]
  const uint16_t* b_t_bf16 = nullptr;
  // Multiplies t before the expand: 1 when the scale is folded into fp32 B; bf16 B keeps
  // its stored values (folding would round them again) and carries the scale here.
  float scale = 1.0f;
};

struct LoraWeightsView {
  int32_t rank = 0;            // Σ slice ranks; 0: no delta on this projection
  const float* a_t = nullptr;  // [in][round_up(rank, 8)]
  const uint16_t* a_t_bf16 = nullptr;
  const LoraSliceWeights* slices = nullptr;
  int32_t num_slices = 0;
};

// The step's rows grouped by slot. Built once per step, read by every projection.
class LoraRowGroups {
 public:
  static constexpr int kBlockRows = 4;  // rows per parallel chunk

  struct Segment {
    int32_t slot = 0;
    int32_t begin = 0;  // into rows()
    int32_t end = 0;
  };
  struct Block {
    int32_t segment = 0;
    int32_t begin = 0;  // into rows()
    int32_t end = 0;
  };

  // Sizes every array for steps of up to `max_rows` rows and `max_slots` slots.
  void Reserve(int64_t max_rows, int max_slots);
  // row_slots[t] in [-1, num_slots); rows keep their order within a slot. Rows and slots
  // beyond the reserved sizes grow the arrays (an allocation, never in a reserved step).
  void Build(std::span<const int16_t> row_slots, int num_slots);

  std::span<const int32_t> rows() const { return {rows_.data(), static_cast<size_t>(num_rows_)}; }
  std::span<const Segment> segments() const {
    return {segments_.data(), static_cast<size_t>(num_segments_)};
  }
  std::span<const Block> blocks() const {
    return {blocks_.data(), static_cast<size_t>(num_blocks_)};
  }
  int64_t num_rows() const { return num_rows_; }  // rows with an adapter
  bool empty() const { return num_rows_ == 0; }

 private:
  std::vector<int32_t> rows_;
  std::vector<Segment> segments_;
  std::vector<Block> blocks_;
  std::vector<int32_t> counts_;  // [slots + 1]
  int64_t num_rows_ = 0;
  int32_t num_segments_ = 0;
  int32_t num_blocks_ = 0;
};

// Floats of scratch LoraShrinkExpand needs: one t row of `max_rank` per grouped row.
inline size_t LoraScratchFloats(int64_t grouped_rows, int max_rank) {
  return static_cast<size_t>(grouped_rows) * static_cast<size_t>(max_rank);
}

// y[row] += delta of the row's slot (views[slot]; rank 0 adds nothing), for every grouped
// row. x: [rows][x_stride] (first `in` floats read); y: [rows][y_stride]. scratch holds at
// least LoraScratchFloats(groups.num_rows(), max over views of rank) floats. Runs on the
// calling thread's compute team (compute_pool.h).
void LoraShrinkExpand(const LoraRowGroups& groups, std::span<const LoraWeightsView> views,
                      const float* x, int64_t x_stride, int in, float* y, int64_t y_stride,
                      std::span<float> scratch);

}  // namespace kvserve::kernels::cpu
