// The sampler's random numbers, in one header that compiles as host code and as CUDA device
// code, so the CPU sampler and the GPU sampler draw the same tokens for the same request.
//
//   request seed ──► TokenSeed(seed, k)          one seed per generated token k (0-based)
//                └─► SamplerRng(token_seed, n)   n = sample index of an n > 1 request
//                       splitmix64 ×4 ──► xoshiro256** state ──► Uniform() in [0, 1)
//
// Seeding per token (not per sequence) is what makes sampling stateless: a sequence draws the
// same token k alone or batched, before or after preemption and recompute, on either backend.
// Everything is 64-bit integer arithmetic (identical on every platform and on the device); the
// only floating-point step is Uniform()'s exact conversion of 53 bits to a double.
//
// No std:: facilities are used on purpose: std:: distributions differ between standard
// libraries, and device code cannot call them.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KVS_HOST_DEVICE __host__ __device__
#else
#define KVS_HOST_DEVICE
#endif

namespace kvserve::model {

// splitmix64 (Steele, Lea, Flood 2014): advances `x` and returns the next output.
KVS_HOST_DEVICE inline uint64_t SplitMix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The seed of the k-th generated token (k = 0 for the first) of a request seeded `seed`: the
// splitmix64 finaliser of seed + golden-ratio step * (k + 1).
KVS_HOST_DEVICE inline uint64_t TokenSeed(uint64_t seed, int64_t token_index) {
  uint64_t x = seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(token_index + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// xoshiro256** (Blackman, Vigna) seeded through splitmix64: small, fast and reproducible.
class SamplerRng {
 public:
  // `stream` separates the samples of one request (n > 1) that share a seed.
  KVS_HOST_DEVICE explicit SamplerRng(uint64_t seed, uint64_t stream = 0) {
    uint64_t x = seed ^ (stream * 0xd1342543de82ef95ull);
    for (int i = 0; i < 4; ++i) s_[i] = SplitMix64(x);
  }

  KVS_HOST_DEVICE uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // [0, 1) with 53 random bits; exact (no rounding) on host and device.
  KVS_HOST_DEVICE double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  KVS_HOST_DEVICE static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

  uint64_t s_[4];
};

// The generator of one sampled token: what both backends construct per (request, token).
KVS_HOST_DEVICE inline SamplerRng TokenRng(uint64_t request_seed, int64_t token_index, int sample_index) {
  return SamplerRng(TokenSeed(request_seed, token_index), static_cast<uint64_t>(sample_index));
}

}  // namespace kvserve::model
