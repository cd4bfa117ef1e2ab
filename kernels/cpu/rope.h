// Rotary position embedding, Hugging Face `rotate_half` layout: frequency f in [0, d/2)
// rotates the pair of dims (f, f + d/2) of every head (d = head_dim):
//
//   head row:  [ x_0 .. x_{d/2-1} | x_{d/2} .. x_{d-1} ]
//                 \___ pair f = (x_f, x_{f+d/2}) ___/
//   x_f'       = x_f * cos(p * inv_freq[f]) - x_{f+d/2} * sin(p * inv_freq[f])
//   x_{f+d/2}' = x_{f+d/2} * cos(p * inv_freq[f]) + x_f * sin(p * inv_freq[f])
//
// Positions are explicit per token (after KV compression a token's position is not its
// slot). The angle tables are computed once per step (RopeCosSin) and shared by every
// layer and by Q and K; the same two calls with position deltas re-rotate cached keys.
#pragma once

#include <cstdint>

namespace kvserve::kernels::cpu {

// positions: [num_tokens]    absolute positions (or deltas, for re-rotation)
// inv_freq:  [half]          after rope scaling; half = head_dim / 2
// cos_sin:   [num_tokens][2 * half]   out: cos in [0, half), sin in [half, 2*half)
// Angles are formed in double so large positions keep full fp32 accuracy.
void RopeCosSin(const int32_t* positions, int64_t num_tokens, const float* inv_freq, int half,
                float* cos_sin);

// x:       [num_tokens][row_stride]; each row holds num_heads heads of head_dim floats at
//          offset 0 (pass a pointer into a fused QKV row to rotate its Q or K part in place)
// cos_sin: [num_tokens][head_dim] from RopeCosSin with half = head_dim / 2
void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int64_t row_stride,
               const float* cos_sin);
// Partial rotary embedding (Phi-4-mini's partial_rotary_factor): only the first rotary_dim
// dims of each head rotate, pairs (f, f + rotary_dim/2); dims [rotary_dim, head_dim) pass.
// cos_sin: [num_tokens][rotary_dim] from RopeCosSin with half = rotary_dim / 2.
void ApplyRope(float* x, int64_t num_tokens, int num_heads, int head_dim, int rotary_dim, int64_t row_stride,
               const float* cos_sin);

}  // namespace kvserve::kernels::cpu
