// The CUDA model and KV access against the CPU model on the bundled kvs-tiny model (fp32
// weights, head_dim 48, GQA 2): three steps mixing prefill chunks and decode rows over
// non-contiguous block tables, for every KV dtype. Tolerances:
//   logits: 2e-3 absolute with fp32 KV: GEMM, RMSNorm and attention sum in another order.
//           1e-2 (fp16, bf16) and 5e-2 (fp8_e4m3, int8) with quantized KV: a K/V value within
//           ~1e-6 of a rounding boundary may take the neighbouring code on one backend (for fp8
//           a few of the ~1e5 values a step writes), which moves that element by one code step.
//   pre-RoPE queries: 1e-3 absolute.
//   attention mass: 1e-3 relative to (1 + mass) with fp32 KV, the logits' bound otherwise.
//   CudaKvAccess: bit-exact (it runs the CPU's dequantization and compaction on the same codes).
// Needs a GPU (label gpu).
#include "cuda/cuda_llama_model.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include "cache/host_kv_storage.h"
#include "compression/host_kv_access.h"
#include "cuda/cuda_kv_access.h"
#include "cuda/cuda_kv_storage.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/device_probe.h"
#include "model/batch_builder.h"
#include "model/llama_model.h"

namespace kvserve::cuda {
namespace {

using config::KvDtype;

// The source tree: tools/gpu_check.sh --bundle runs these binaries in a copy of the tree
// elsewhere and says where through the environment.
std::string TinyDir() {
  const char* env = std::getenv("KVSERVE_SOURCE_DIR");
  return std::string(env != nullptr ? env : KVSERVE_SOURCE_DIR) + "/models/kvs-tiny";
}

struct Views {
  std::vector<std::byte*> data;
  std::vector<float*> scales;
  model::KvCacheView view;
};

void HostView(cache::HostKvStorage& s, Views& v) {
  for (int l = 0; l < s.layout().num_layers; ++l) {
    v.data.push_back(s.layer_data(l));
    v.scales.push_back(s.layer_scales(l));
  }
  v.view.layout = s.layout();
  v.view.num_blocks = s.num_blocks();
  v.view.layer_data = v.data;
  if (s.layout().has_scales()) v.view.layer_scales = v.scales;
}

void DeviceView(CudaKvStorage& s, Views& v) {
  for (int l = 0; l < s.layout().num_layers; ++l) {
    v.data.push_back(s.device_layer_data(l));
    v.scales.push_back(s.device_layer_scales(l));
  }
  v.view.layout = s.layout();
  v.view.num_blocks = s.num_blocks();
  v.view.layer_data = v.data;
  if (s.layout().has_scales()) v.view.layer_scales = v.scales;
}

class CudaModel : public testing::Test {
 protected:
  void SetUp() override {
    const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
    ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
    model::ModelOptions mo;
    mo.threads = 1;
    mo.max_tokens_per_step = 256;
    auto cpu = model::LlamaModel::Load(TinyDir(), mo);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    cpu_ = std::move(*cpu);
    CudaModelOptions co;
    co.max_tokens_per_step = 256;
    co.max_logits_rows = 8;  // smaller than a step's rows: Forward must chunk the LM head
    auto dev = CudaLlamaModel::Create(cpu_->config(), cpu_->weights(), co);
    ASSERT_TRUE(dev.ok()) << dev.status();
    gpu_ = std::move(*dev);
  }

  std::unique_ptr<model::LlamaModel> cpu_;
  std::unique_ptr<CudaLlamaModel> gpu_;
};

TEST_F(CudaModel, StepsMatchTheCpuModelForEveryKvDtype) {
  const int vocab = cpu_->config().vocab_size;
  for (KvDtype dtype : {KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    for (int bs : {16, 32}) {
      SCOPED_TRACE(testing::Message() << "dtype " << static_cast<int>(dtype) << " block " << bs);
      const cache::KvLayout layout = cpu_->KvLayoutFor(bs, dtype);
      const int32_t blocks = 40;
      auto host = std::move(cache::HostKvStorage::Create(layout, blocks)).value();
      auto dev = std::move(CudaKvStorage::Create(layout, blocks)).value();
      Views hv, dv;
      HostView(*host, hv);
      DeviceView(*dev, dv);
      std::mt19937 rng(static_cast<uint32_t>(bs) * 7 + static_cast<uint32_t>(dtype));
      std::vector<int32_t> ids(blocks - 1);
      std::iota(ids.begin(), ids.end(), 1);
      std::shuffle(ids.begin(), ids.end(), rng);
      // Three sequences with tables of 8 shuffled blocks each.
      std::vector<std::vector<int32_t>> tables(3);
      for (int s = 0; s < 3; ++s) tables[static_cast<size_t>(s)].assign(ids.begin() + s * 8, ids.begin() + s * 8 + 8);
      auto tokens = [&](int n) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = 3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3));
        return t;
      };
      std::vector<int> lens(3, 0);
      // step: (seq, rows, logits) entries
      const std::vector<std::vector<std::tuple<int, int, model::LogitsWanted>>> steps = {
          {{0, 37, model::LogitsWanted::kAll}, {1, 20, model::LogitsWanted::kLast}},
          {{0, 1, model::LogitsWanted::kLast}, {1, 33, model::LogitsWanted::kLast}, {2, 61, model::LogitsWanted::kLast}},
          {{0, 1, model::LogitsWanted::kLast}, {1, 1, model::LogitsWanted::kLast}, {2, 1, model::LogitsWanted::kLast}},
      };
      const float tol = dtype == KvDtype::kFp32 ? 2e-3f
                        : (dtype == KvDtype::kFp16 || dtype == KvDtype::kBf16) ? 1e-2f
                                                                               : 5e-2f;
      for (size_t step = 0; step < steps.size(); ++step) {
        model::BatchBuilder bb(bs);
        for (auto [s, n, want] : steps[step]) {
          const auto t = tokens(n);
          bb.AddSequence(t, lens[static_cast<size_t>(s)], lens[static_cast<size_t>(s)], tables[static_cast<size_t>(s)],
                         want);
          lens[static_cast<size_t>(s)] += n;
        }
        const model::ForwardBatch b = bb.batch();
        const size_t n_logits = b.logits_rows.size() * static_cast<size_t>(vocab);
        std::vector<float> ref(n_logits), got(n_logits);
        const size_t q_floats =
            static_cast<size_t>(cpu_->config().num_layers) * b.token_ids.size() * static_cast<size_t>(cpu_->config().q_size());
        std::vector<float> ref_q(q_floats), got_q(q_floats);
        // Attention mass (H2O) with a stride wider than any kv_len.
        const int64_t stride = 300;
        const size_t mass_floats = static_cast<size_t>(cpu_->config().num_layers) * b.kv_lens.size() *
                                   static_cast<size_t>(cpu_->config().num_kv_heads) * stride;
        std::vector<float> ref_m(mass_floats), got_m(mass_floats, -1.0f);
        model::ForwardObservers ref_obs, got_obs;
        ref_obs.pre_rope_queries = ref_q;
        got_obs.pre_rope_queries = got_q;
        ref_obs.attention_mass = ref_m;
        got_obs.attention_mass = got_m;
        ref_obs.mass_stride = got_obs.mass_stride = stride;
        ASSERT_TRUE(cpu_->Forward(b, hv.view, ref, &ref_obs).ok());
        const absl::Status st = gpu_->Forward(b, dv.view, got, &got_obs);
        ASSERT_TRUE(st.ok()) << st;
        float worst = 0.0f;
        for (size_t i = 0; i < n_logits; ++i) worst = std::max(worst, std::fabs(got[i] - ref[i]));
        EXPECT_LT(worst, tol) << "step " << step << ": max |logit diff|";
        float worst_q = 0.0f;
        for (size_t i = 0; i < q_floats; ++i) worst_q = std::max(worst_q, std::fabs(got_q[i] - ref_q[i]));
        EXPECT_LT(worst_q, 1e-3f) << "step " << step << ": pre-RoPE queries";
        // Mass per slot sums softmax weights of up to rows x group (query, head) pairs; the CPU
        // uses a polynomial exp (3e-7 relative) and both see scores differing by ~1e-5.
        float worst_m = 0.0f;
        for (size_t i = 0; i < mass_floats; ++i) {
          worst_m = std::max(worst_m, std::fabs(got_m[i] - ref_m[i]) / (1.0f + std::fabs(ref_m[i])));
        }
        EXPECT_LT(worst_m, dtype == KvDtype::kFp32 ? 1e-3f : tol) << "step " << step << ": attention mass";
      }
    }
  }
}

TEST_F(CudaModel, RejectsBadBatchesWithoutTouchingTheDevice) {
  const cache::KvLayout layout = cpu_->KvLayoutFor(16, KvDtype::kFp32);
  auto dev = std::move(CudaKvStorage::Create(layout, 4)).value();
  Views dv;
  DeviceView(*dev, dv);
  model::BatchBuilder bb(16);
  const std::vector<int32_t> toks{1, 2, 3}, table{9};  // block 9 of a 4-block pool
  bb.AddSequence(toks, 0, 0, table, model::LogitsWanted::kLast);
  std::vector<float> logits(static_cast<size_t>(cpu_->config().vocab_size));
  const absl::Status st = gpu_->Forward(bb.batch(), dv.view, logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block id 9"), std::string::npos) << st;
  // An attention-mass stride shorter than the context is refused as well.
  model::BatchBuilder ok(16);
  const std::vector<int32_t> t2{1, 2, 3, 4}, table2{1};
  ok.AddSequence(t2, 0, 0, table2, model::LogitsWanted::kLast);
  std::vector<float> mass(static_cast<size_t>(cpu_->config().num_layers * cpu_->config().num_kv_heads * 3));
  model::ForwardObservers obs;
  obs.attention_mass = mass;
  obs.mass_stride = 3;
  EXPECT_EQ(gpu_->Forward(ok.batch(), dv.view, logits, &obs).code(), absl::StatusCode::kInvalidArgument);
}

// kvs-tiny's head_dim 48 keeps prefill on the tiled kernel; a random head_dim-64 model (GQA 4)
// takes the vectorised split-KV kernel for every row. Both routes of the same weights must give
// the same logits up to fp32 summation order (each route is held to the CPU kernel in
// paged_attention_test): prefill chunks of 37-150 rows next to decode rows, shuffled tables.
TEST(CudaModelRoutes, SplitKvPrefillMatchesTheTiledKernel) {
  const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
  ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  model::ModelConfig c;
  c.architecture_name = "LlamaForCausalLM";
  c.num_layers = 2;
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 4096;
  CudaModelOptions o;
  o.max_tokens_per_step = 256;
  o.max_logits_rows = 64;
  auto vec = CudaLlamaModel::CreateRandom(c, model::DeviceWeightDtype::kBf16, 7, o);
  ASSERT_TRUE(vec.ok()) << vec.status();
  o.force_tiled_prefill = true;
  auto tiled = CudaLlamaModel::CreateRandom(c, model::DeviceWeightDtype::kBf16, 7, o);
  ASSERT_TRUE(tiled.ok()) << tiled.status();
  for (KvDtype dtype : {KvDtype::kBf16, KvDtype::kInt8}) {
    SCOPED_TRACE(testing::Message() << "dtype " << static_cast<int>(dtype));
    const cache::KvLayout layout = (*vec)->KvLayoutFor(16, dtype);
    ASSERT_TRUE(kernels::cuda::VecSplitCovers(layout, c.num_heads));
    const int32_t blocks = 64;
    auto kv_vec = std::move(CudaKvStorage::Create(layout, blocks)).value();
    auto kv_tiled = std::move(CudaKvStorage::Create(layout, blocks)).value();
    Views vv, tv;
    DeviceView(*kv_vec, vv);
    DeviceView(*kv_tiled, tv);
    std::mt19937 rng(11);
    std::vector<int32_t> ids(blocks - 1);
    std::iota(ids.begin(), ids.end(), 1);
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<std::vector<int32_t>> tables(3);
    for (int s = 0; s < 3; ++s) tables[static_cast<size_t>(s)].assign(ids.begin() + s * 20, ids.begin() + s * 20 + 20);
    std::vector<int> lens(3, 0);
    const std::vector<std::vector<std::pair<int, int>>> steps = {
        {{0, 37}, {1, 150}}, {{0, 1}, {1, 40}, {2, 90}}, {{0, 1}, {1, 1}, {2, 1}}};
    for (size_t step = 0; step < steps.size(); ++step) {
      model::BatchBuilder bb(16);
      for (auto [s, n] : steps[step]) {
        std::vector<int32_t> t(static_cast<size_t>(n));
        for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
        bb.AddSequence(t, lens[static_cast<size_t>(s)], lens[static_cast<size_t>(s)], tables[static_cast<size_t>(s)],
                       model::LogitsWanted::kAll);
        lens[static_cast<size_t>(s)] += n;
      }
      const model::ForwardBatch b = bb.batch();
      std::vector<float> a(b.logits_rows.size() * static_cast<size_t>(c.vocab_size)), t(a.size());
      ASSERT_TRUE((*vec)->Forward(b, vv.view, a).ok());
      ASSERT_TRUE((*tiled)->Forward(b, tv.view, t).ok());
      float worst = 0.0f, scale = 0.0f;
      for (size_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::fabs(a[i] - t[i]));
        scale = std::max(scale, std::fabs(t[i]));
      }
      EXPECT_GT(scale, 0.05f) << "step " << step << ": logits this small test nothing";
      EXPECT_LT(worst, 2e-3f * std::max(1.0f, scale)) << "step " << step << ": max |logit diff|";
    }
  }
}

TEST(CudaKvAccessTest, ReadsAndCompactsExactlyAsTheHostAccess) {
  const kernels::DeviceProbe probe = kernels::ProbeCudaDevice();
  ASSERT_TRUE(probe.usable()) << "the gpu tests need a CUDA device: " << probe.reason;
  for (KvDtype dtype : {KvDtype::kFp32, KvDtype::kBf16, KvDtype::kFp8E4M3, KvDtype::kInt8}) {
    SCOPED_TRACE(testing::Message() << "dtype " << static_cast<int>(dtype));
    cache::KvLayout l;
    l.num_layers = 3;
    l.num_kv_heads = 2;
    l.head_dim = 64;
    l.block_size = 16;
    l.dtype = dtype;
    const int32_t blocks = 12;
    auto host = std::move(cache::HostKvStorage::Create(l, blocks)).value();
    std::mt19937 rng(17);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const std::vector<int32_t> table{7, 2, 9, 4, 11, 1};  // 96 slots
    const int64_t len = 90;
    std::vector<float> k(static_cast<size_t>(l.num_kv_heads * l.head_dim)), v(k.size());
    for (int layer = 0; layer < l.num_layers; ++layer) {
      for (int64_t i = 0; i < len; ++i) {
        for (auto& x : k) x = normal(rng);
        for (auto& x : v) x = normal(rng);
        cache::WriteKvToken(*host, layer, table[static_cast<size_t>(i / 16)] * 16 + i % 16, k.data(), v.data());
      }
    }
    auto dev = std::move(CudaKvStorage::Create(l, blocks)).value();
    std::vector<cache::BlockCopy> all;
    for (int32_t b = 0; b < blocks; ++b) all.push_back({cache::BlockId{b}, cache::BlockId{b}});
    ASSERT_TRUE(dev->copy_blocks_from(*host, all).ok());
    Views hv;
    HostView(*host, hv);
    compression::HostKvAccess href(l, hv.data, hv.scales);
    CudaKvAccess dacc(*dev);
    std::vector<float> a(static_cast<size_t>(len) * 64), b(a.size());
    href.ReadRows(table, 1, 0, 1, 5, 83, a.data());
    dacc.ReadRows(table, 1, 0, 1, 5, 83, b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 78 * 64 * sizeof(float)), 0) << "ReadRows";

    // Keep 40 of the candidates [20, 80) per (layer, head), different sets per row.
    compression::KeepPlan plan;
    plan.lo = 20;
    plan.scored_end = 80;
    plan.phys_len = len;
    plan.num_keep = 40;
    std::vector<int32_t> keep;
    for (int row = 0; row < l.num_layers * l.num_kv_heads; ++row) {
      std::vector<int32_t> cand(60);
      std::iota(cand.begin(), cand.end(), 20);
      std::shuffle(cand.begin(), cand.end(), rng);
      cand.resize(40);
      std::sort(cand.begin(), cand.end());
      keep.insert(keep.end(), cand.begin(), cand.end());
    }
    plan.keep = keep.data();
    const compression::CompactStats hs = href.Compact(table, plan);
    const compression::CompactStats ds = dacc.Compact(table, plan);
    EXPECT_EQ(hs.new_len, ds.new_len);
    EXPECT_EQ(hs.rows_moved, ds.rows_moved);
    auto back = std::move(cache::HostKvStorage::Create(l, blocks)).value();
    ASSERT_TRUE(dev->copy_blocks_to(*back, all).ok());
    ASSERT_TRUE(dev->synchronize().ok());
    // Every live slot of the compacted sequence is bit-identical.
    const int64_t new_len = plan.new_len();
    for (int layer = 0; layer < l.num_layers; ++layer) {
      for (int kvi = 0; kvi < 2; ++kvi) {
        for (int head = 0; head < l.num_kv_heads; ++head) {
          for (int64_t i = 0; i < new_len; ++i) {
            const int64_t block = table[static_cast<size_t>(i / 16)];
            const size_t off = l.elem_offset(block, kvi, head, static_cast<int>(i % 16)) * l.elem_bytes();
            ASSERT_EQ(std::memcmp(back->layer_data(layer) + off, host->layer_data(layer) + off, 64 * l.elem_bytes()), 0)
                << "layer " << layer << " kv " << kvi << " head " << head << " slot " << i;
            if (l.has_scales()) {
              const size_t so = l.scale_offset(block, kvi, head, static_cast<int>(i % 16));
              ASSERT_EQ(back->layer_scales(layer)[so], host->layer_scales(layer)[so]);
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace kvserve::cuda
