// The forward pass with adapters. For random checkpoints written at test time:
//  * serving the base with an adapter gives the logits of the checkpoint with the adapter
//    merged (W + scale·B·A, written at test time), against the float64 reference forward of
//    the merged checkpoint: max |log-prob difference| <= 1e-4 (the bound the base forward
//    meets against the same reference, tests/unit/hf_models);
//  * a batch mixing the base and four adapters of ranks 2, 4, 8, 16 gives every sequence
//    bit for bit what it gets alone.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "lora/adapter.h"
#include "lora/lora_step.h"
#include "model/llama_model.h"
#include "model/safetensors.h"
#include "tests/support/hf_models/checkpoint_writer.h"
#include "tests/support/hf_models/presets.h"
#include "tests/support/hf_models/reference_forward.h"
#include "tests/unit/lora/lora_session.h"
#include "tests/unit/lora/lora_test_util.h"

namespace kvserve::lora {
namespace {

using testing::FreshDir;
using testing::LoraConfigJson;
using testing::LoraSession;
using testing::ModuleWeights;
using testing::RandomModule;
using testing::WriteAdapter;
namespace hf = kvserve::testing::hf;

constexpr double kLogprobTol = 1e-4;

// [out, in] of a base projection tensor "<module>.weight".
std::pair<int, int> BaseShape(const model::SafetensorsCheckpoint& ckpt, const std::string& module) {
  auto f = ckpt.Find(module + ".weight");
  EXPECT_TRUE(f.ok()) << f.status();
  return {static_cast<int>(f->second->shape[0]), static_cast<int>(f->second->shape[1])};
}

// Random modules for `names` with shapes from the base checkpoint; rank per module.
std::map<std::string, ModuleWeights> MakeModules(
    const std::string& base_dir, const std::vector<std::pair<std::string, int>>& names,
    uint64_t seed) {
  auto ckpt = model::SafetensorsCheckpoint::Open(base_dir);
  EXPECT_TRUE(ckpt.ok()) << ckpt.status();
  std::map<std::string, ModuleWeights> out;
  for (const auto& [name, r] : names) {
    const auto [o, i] = BaseShape(*ckpt, name);
    out[name] = RandomModule(r, i, o, seed++, 0.25f, 0.25f);
  }
  return out;
}

// Writes <merged> = <base> with W += scale_m · B_m · A_m (float64, rounded once to fp32).
void WriteMerged(const std::string& base, const std::string& merged,
                 const std::map<std::string, ModuleWeights>& mods,
                 const std::map<std::string, double>& scales) {
  std::filesystem::copy_file(base + "/config.json", merged + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto ckpt = model::SafetensorsCheckpoint::Open(base);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  std::vector<hf::TensorBlob> tensors;
  for (const std::string& name : ckpt->TensorNames()) {
    auto f = ckpt->Find(name);
    ASSERT_TRUE(f.ok());
    const std::vector<int64_t> shape = f->second->shape;
    std::vector<float> w(static_cast<size_t>(f->second->num_elements()));
    ASSERT_TRUE(ckpt->LoadF32(name, shape, w).ok());
    const std::string module = name.size() > 7 ? name.substr(0, name.size() - 7) : "";
    auto it = mods.find(module);
    if (it != mods.end() && name.ends_with(".weight")) {
      const ModuleWeights& m = it->second;
      const double s = scales.at(module);
      for (int o = 0; o < m.out; ++o) {
        for (int k = 0; k < m.in; ++k) {
          double acc = 0;
          for (int j = 0; j < m.r; ++j) {
            acc += static_cast<double>(m.b[static_cast<size_t>(o) * m.r + j]) *
                   m.a[static_cast<size_t>(j) * m.in + k];
          }
          float& x = w[static_cast<size_t>(o) * m.in + k];
          x = static_cast<float>(static_cast<double>(x) + s * acc);
        }
      }
    }
    tensors.push_back(hf::MakeFloatTensor(name, shape, w, false));
  }
  ASSERT_TRUE(hf::WriteSafetensors(tensors, merged, 1).ok());
}

std::unique_ptr<model::LlamaModel> LoadModel(const std::string& dir, int threads = 1) {
  model::ModelOptions opts;
  opts.threads = threads;
  opts.max_tokens_per_step = 64;
  auto m = model::LlamaModel::Load(dir, opts);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *std::move(m) : nullptr;
}

std::vector<int32_t> Ids(int n, int vocab, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 37 + salt * 11 + 5) % vocab));
  return ids;
}

int32_t Argmax(const float* row, int n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

struct MergeCase {
  std::string name;
  hf::FixtureSpec spec;
  std::vector<std::pair<std::string, int>> modules;  // (module, rank)
  std::string config_extra;                          // rank_pattern etc.
  std::function<double(const std::string&, int)> scale;
  bool bf16 = false;  // adapter tensors stored as BF16 (served as bf16, scale apart)
};

void PrintTo(const MergeCase& c, std::ostream* os) { *os << c.name; }

std::vector<std::pair<std::string, int>> PerLayer(int layers,
                                                  const std::vector<std::pair<std::string, int>>& m,
                                                  const std::vector<int>& only = {}) {
  std::vector<std::pair<std::string, int>> out;
  for (int l = 0; l < layers; ++l) {
    for (const auto& [suffix, r] : m) {
      if (!only.empty() && std::find(only.begin(), only.end(), l) == only.end() &&
          suffix.starts_with("mlp."))
        continue;
      out.emplace_back("model.layers." + std::to_string(l) + "." + suffix, r);
    }
  }
  return out;
}

std::vector<MergeCase> MergeCases() {
  const std::vector<std::pair<std::string, int>> seven = {
      {"self_attn.q_proj", 8}, {"self_attn.k_proj", 8}, {"self_attn.v_proj", 4},
      {"self_attn.o_proj", 8}, {"mlp.gate_proj", 8},    {"mlp.up_proj", 8},
      {"mlp.down_proj", 8}};
  auto plain = [](const std::string&, int r) { return 16.0 / r; };
  std::vector<MergeCase> v;
  v.push_back(
      {"llama", hf::LlamaPreset(), PerLayer(2, seven), R"("rank_pattern": {"v_proj": 4})", plain});
  v.push_back({"llama_bf16_adapter", hf::LlamaPreset(), PerLayer(2, seven),
               R"("rank_pattern": {"v_proj": 4}, "alpha_pattern": {"o_proj": 5})",
               [](const std::string& m, int r) { return (m.ends_with("o_proj") ? 5.0 : 16.0) / r; },
               true});
  // Qwen3: the q delta must land before the per-head q_norm. rsLoRA scale.
  v.push_back({"qwen3", hf::Qwen3Preset(), PerLayer(2, seven),
               R"("rank_pattern": {"v_proj": 4}, "use_rslora": true)",
               [](const std::string&, int r) { return 16.0 / std::sqrt(static_cast<double>(r)); }});
  // Phi-3: fused qkv_proj / gate_up_proj, one A and one B each.
  v.push_back({"phi3", hf::Phi3Preset(),
               PerLayer(2, {{"self_attn.qkv_proj", 8},
                            {"self_attn.o_proj", 8},
                            {"mlp.gate_up_proj", 8},
                            {"mlp.down_proj", 8}}),
               "", plain});
  // Gemma 2: sandwich norms, so the o and down deltas must land before the post norms.
  v.push_back({"gemma2", hf::Gemma2Preset(), PerLayer(2, seven), R"("rank_pattern": {"v_proj": 4})",
               plain});
  // Mixtral: every expert's w1 / w3 / w2 (gate, up, down) and attention, on both layers.
  std::vector<std::pair<std::string, int>> mixtral = {
      {"self_attn.q_proj", 8}, {"self_attn.v_proj", 8}, {"self_attn.o_proj", 8}};
  for (int e = 0; e < 4; ++e) {
    for (const char* w : {"w1", "w3", "w2"}) {
      mixtral.emplace_back("block_sparse_moe.experts." + std::to_string(e) + "." + w, 8);
    }
  }
  v.push_back({"mixtral_experts", hf::MixtralPreset(), PerLayer(2, mixtral), "", plain});
  // Qwen3-MoE: attention on every layer, the dense MLP of layer 1 (mlp_only_layers).
  // and every expert's gate / up / down on the MoE layers 0 and 2.
  std::vector<std::pair<std::string, int>> qwen3moe = PerLayer(3, seven, {1});
  for (int l : {0, 2}) {
    for (int e = 0; e < 4; ++e) {
      for (const char* w : {"gate_proj", "up_proj", "down_proj"}) {
        qwen3moe.emplace_back(
            "model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + "." + w, 8);
      }
    }
  }
  v.push_back(
      {"qwen3moe", hf::Qwen3MoePreset(), qwen3moe, R"("rank_pattern": {"v_proj": 4})", plain});
  return v;
}

class LoraMergeTest : public ::testing::TestWithParam<MergeCase> {};

TEST_P(LoraMergeTest, AdapterServedUnmergedMatchesTheMergedCheckpointsFloat64Reference) {
  const MergeCase& c = GetParam();
  const std::string base = FreshDir("base"), adapter = FreshDir("adapter"),
                    merged = FreshDir("merged");
  ASSERT_TRUE(hf::WriteRandomCheckpoint(c.spec, base).ok());
  auto mods = MakeModules(base, c.modules, 1000);
  if (c.bf16) {  // the merged reference uses the values the bf16 file holds
    for (auto& [name, m] : mods) {
      m.a = testing::Bf16Rounded(m.a);
      m.b = testing::Bf16Rounded(m.b);
    }
  }
  WriteAdapter(adapter, LoraConfigJson(8, 16, c.config_extra), mods, c.bf16);
  std::map<std::string, double> scales;
  for (const auto& [name, r] : c.modules) scales[name] = c.scale(name, r);
  WriteMerged(base, merged, mods, scales);

  auto m = LoadModel(base);
  ASSERT_NE(m, nullptr);
  const TargetTable targets = TargetTable::ForModel(m->config());
  auto ad = Adapter::Load(adapter, targets, AdapterLoadOptions{16});
  ASSERT_TRUE(ad.ok()) << ad.status();
  auto ref = hf::ReferenceModel::Load(merged);
  ASSERT_TRUE(ref.ok()) << ref.status();
  const int vocab = c.spec.vocab_size;

  // A 20-token prefill, then 6 greedy decode steps, with the adapter; the base alone alongside.
  LoraSession session(*m, &targets);
  const int s = session.NewSequence(), sb = session.NewSequence();
  std::vector<int32_t> ids = Ids(20, vocab, 1);
  std::vector<std::vector<float>> rows;  // the adapter sequence's logits, one per position
  std::vector<std::vector<float>> base_rows;
  auto keep = [&](const std::vector<float>& l, std::vector<std::vector<float>>& into) {
    for (size_t t = 0; t < l.size() / static_cast<size_t>(vocab); ++t) {
      into.emplace_back(l.begin() + static_cast<int64_t>(t * vocab),
                        l.begin() + static_cast<int64_t>((t + 1) * vocab));
    }
  };
  auto out = session.Step({{s, ids, ad->get()}, {sb, ids, nullptr}});
  keep(out[0], rows);
  keep(out[1], base_rows);
  for (int step = 0; step < 6; ++step) {
    const int32_t next = Argmax(rows.back().data(), vocab);
    ids.push_back(next);
    out = session.Step({{sb, {next}, nullptr}, {s, {next}, ad->get()}});
    keep(out[1], rows);
    keep(out[0], base_rows);
  }
  auto want = (*ref)->Forward(ids);
  ASSERT_TRUE(want.ok()) << want.status();
  double worst = 0, moved = 0;
  for (size_t t = 0; t < ids.size(); ++t) {
    const std::vector<double> lp = want->LogProbs(t);
    const float* row = rows[t].data();
    const double mx = *std::max_element(row, row + vocab);
    double sum = 0;
    for (int v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
    const double lse = mx + std::log(sum);
    for (int v = 0; v < vocab; ++v) {
      worst = std::max(worst, std::abs(row[v] - lse - lp[static_cast<size_t>(v)]));
      moved = std::max(
          moved, std::abs(static_cast<double>(row[v]) - base_rows[t][static_cast<size_t>(v)]));
    }
  }
  std::printf(
      "[ lora merge ] %s: max |logprob diff| vs merged float64 = %.3g, adapter moved logits by up "
      "to %.3g\n",
      c.name.c_str(), worst, moved);
  EXPECT_LE(worst, kLogprobTol);
  EXPECT_GT(moved, 0.1)
      << "the adapter barely changes the logits: the comparison would prove nothing";
}

INSTANTIATE_TEST_SUITE_P(Models, LoraMergeTest, ::testing::ValuesIn(MergeCases()),
                         [](const auto& p) { return p.param.name; });

// One adapter of the mixed-batch tests: its rank, the module suffixes it adapts on every
// layer that has them, a different rank for k_proj (0: r), extra config fields.
struct MixSpec {
  int r;
  std::vector<std::string> suffixes;
  std::string extra;
  int k_rank = 0;
  bool bf16 = false;  // a BF16 adapter file (served as bf16)
};

// Sequences on the base and on each adapter, prefilled together and decoded together, give
// bit for bit what each gets alone (other thread count, own session).
void CheckMixedBatch(const hf::FixtureSpec& fixture, const std::vector<MixSpec>& specs) {
  const std::string base = FreshDir("base");
  ASSERT_TRUE(hf::WriteRandomCheckpoint(fixture, base).ok());
  auto batch_model = LoadModel(base, /*threads=*/2);
  auto alone_model = LoadModel(base, /*threads=*/1);
  ASSERT_TRUE(batch_model && alone_model);
  const TargetTable targets = TargetTable::ForModel(batch_model->config());
  auto ckpt = model::SafetensorsCheckpoint::Open(base);
  ASSERT_TRUE(ckpt.ok());
  std::vector<std::shared_ptr<const Adapter>> adapters;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::pair<std::string, int>> names;
    for (const auto& sfx : specs[i].suffixes) {
      for (int l = 0; l < fixture.num_hidden_layers; ++l) {
        const std::string name = "model.layers." + std::to_string(l) + "." + sfx;
        if (!ckpt->Contains(name + ".weight")) continue;  // e.g. experts on a dense layer
        const bool k = sfx == "self_attn.k_proj" && specs[i].k_rank > 0;
        names.emplace_back(name, k ? specs[i].k_rank : specs[i].r);
      }
    }
    const std::string dir = FreshDir("adapter" + std::to_string(i));
    WriteAdapter(dir, LoraConfigJson(specs[i].r, 2.0 * specs[i].r, specs[i].extra),
                 MakeModules(base, names, 50 * i), specs[i].bf16);
    auto a = Adapter::Load(dir, targets, AdapterLoadOptions{16});
    ASSERT_TRUE(a.ok()) << a.status();
    adapters.push_back(*a);
  }
  const int vocab = batch_model->config().vocab_size;
  // Sequence i uses adapter i - 1 (sequence 0: the base), prompts of different lengths.
  const int n = static_cast<int>(specs.size()) + 1;
  auto adapter_of = [&](int i) {
    return i == 0 ? nullptr : adapters[static_cast<size_t>(i - 1)].get();
  };
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(Ids(5 + 3 * i, vocab, i));

  // Together: one prefill step of all five, then three decode steps of all five (order
  // shuffled per step so rows move around in the batch).
  LoraSession together(*batch_model, &targets);
  std::vector<int> seq(n);
  for (int i = 0; i < n; ++i) seq[static_cast<size_t>(i)] = together.NewSequence();
  std::vector<std::vector<std::vector<float>>> got(n);  // [seq][step] logits
  std::vector<std::vector<int32_t>> fed(n);             // [seq][step] decode token
  std::vector<LoraSession::Work> work;
  for (int i = n - 1; i >= 0; --i)
    work.push_back({seq[static_cast<size_t>(i)], prompts[static_cast<size_t>(i)], adapter_of(i)});
  auto out = together.Step(work);
  for (int k = 0; k < n; ++k)
    got[static_cast<size_t>(n - 1 - k)].push_back(out[static_cast<size_t>(k)]);
  for (int step = 0; step < 3; ++step) {
    work.clear();
    std::vector<int> order(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = n - 1 - i;
    std::rotate(order.begin(), order.begin() + step, order.end());
    for (int i : order) {
      const auto& last = got[static_cast<size_t>(i)].back();
      const int32_t next = Argmax(last.data() + last.size() - vocab, vocab);
      fed[static_cast<size_t>(i)].push_back(next);
      work.push_back({seq[static_cast<size_t>(i)], {next}, adapter_of(i)});
    }
    out = together.Step(work);
    for (size_t k = 0; k < order.size(); ++k) got[static_cast<size_t>(order[k])].push_back(out[k]);
  }
  // Alone: each sequence in its own session, same tokens, other thread count.
  for (int i = 0; i < n; ++i) {
    LoraSession alone(*alone_model, &targets);
    const int s = alone.NewSequence();
    std::vector<std::vector<float>> mine;
    mine.push_back(alone.Step({{s, prompts[static_cast<size_t>(i)], adapter_of(i)}})[0]);
    for (int32_t t : fed[static_cast<size_t>(i)])
      mine.push_back(alone.Step({{s, {t}, adapter_of(i)}})[0]);
    ASSERT_EQ(mine.size(), got[static_cast<size_t>(i)].size());
    for (size_t st = 0; st < mine.size(); ++st) {
      const auto& a = mine[st];
      const auto& b = got[static_cast<size_t>(i)][st];
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0)
          << "sequence " << i << " (adapter rank "
          << (i == 0 ? 0 : specs[static_cast<size_t>(i - 1)].r) << ") step " << st;
    }
  }
  // The adapters really differ from the base and from each other on the same prompt.
  LoraSession probe(*alone_model, &targets);
  std::vector<std::vector<float>> last;
  for (int i = 0; i < n; ++i)
    last.push_back(probe.Step({{probe.NewSequence(), prompts[0], adapter_of(i)}})[0]);
  for (int i = 1; i < n; ++i)
    EXPECT_NE(last[0], last[static_cast<size_t>(i)]) << "adapter " << i << " changed nothing";
}

TEST(LoraForward, MixedBatchOfBaseAndFourAdaptersIsBitForBitEachAlone) {
  // Ranks 2, 4, 8 (a bf16 file), 16; different targets and scale rules.
  CheckMixedBatch(
      hf::LlamaPreset(),
      {{2, {"self_attn.q_proj", "self_attn.v_proj"}, ""},
       {4,
        {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"},
        R"("use_rslora": true)"},
       {8,
        {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"},
        R"("alpha_pattern": {"down_proj": 3})",
        0,
        /*bf16=*/true},
       {16,
        {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"},
        R"("rank_pattern": {"k_proj": 8})",
        8}});
}

TEST(LoraForward, MixedBatchOnMixtureOfExpertsExpertsIsBitForBitEachAlone) {
  // Qwen3-MoE: layers 0 and 2 route over 4 experts, layer 1 is dense.
  std::vector<std::string> experts;
  for (int e = 0; e < 4; ++e) {
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      experts.push_back("mlp.experts." + std::to_string(e) + "." + p);
    }
  }
  std::vector<std::string> all = experts;
  for (const char* p :
       {"self_attn.q_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
    all.push_back(p);
  }
  CheckMixedBatch(hf::Qwen3MoePreset(),
                  {{4, experts, ""},
                   {8, {"self_attn.q_proj", "self_attn.o_proj"}, ""},
                   {2, {"mlp.experts.1.down_proj", "mlp.experts.3.down_proj", "mlp.down_proj"}, ""},
                   {16, all, R"("use_rslora": true)"}});
}

TEST(LoraForward, StepRefusesMoreThanMaxLorasAndTheModelRefusesBadRows) {
  const std::string base = FreshDir("base");
  ASSERT_TRUE(hf::WriteRandomCheckpoint(hf::LlamaPreset(), base).ok());
  auto m = LoadModel(base);
  ASSERT_NE(m, nullptr);
  const TargetTable targets = TargetTable::ForModel(m->config());
  std::vector<std::shared_ptr<const Adapter>> ads;
  for (int i = 0; i < 3; ++i) {
    const std::string dir = FreshDir(std::to_string(i));
    WriteAdapter(dir, LoraConfigJson(4, 8),
                 MakeModules(base, {{"model.layers.0.self_attn.q_proj", 4}}, 7 + i));
    auto a = Adapter::Load(dir, targets, {});
    ASSERT_TRUE(a.ok());
    ads.push_back(*a);
  }
  LoraStep step(targets, /*max_loras=*/2, 16, 64);
  EXPECT_EQ(step.SlotFor(*ads[0]), 0);
  EXPECT_EQ(step.SlotFor(*ads[1]), 1);
  EXPECT_EQ(step.SlotFor(*ads[0]), 0);
  EXPECT_EQ(step.SlotFor(*ads[2]), -1);  // a third distinct adapter does not fit the step
  step.Clear();
  EXPECT_EQ(step.SlotFor(*ads[2]), 0);
  EXPECT_EQ(step.Finish(), nullptr);  // no row carries an adapter: the base runs alone

  // Rows whose weight table does not fit the model are an InvalidArgument before any work.
  step.AddRows(0, 3);
  model::LoraRows rows = *step.Finish();
  rows.views = rows.views.first(rows.views.size() - 1);
  model::BatchBuilder builder(4);
  const std::vector<int32_t> table = {0};
  builder.AddSequence(std::vector<int32_t>{1, 2, 3}, 0, 0, table, model::LogitsWanted::kLast);
  model::ForwardBatch batch = builder.batch();
  batch.lora = &rows;
  model::HostKvBuffer kv(m->KvLayoutFor(4, config::KvDtype::kFp32), 4);
  std::vector<float> logits(static_cast<size_t>(m->config().vocab_size));
  const absl::Status st = m->Forward(batch, kv.view(), logits);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lora"), std::string::npos) << st;
}

}  // namespace
}  // namespace kvserve::lora
