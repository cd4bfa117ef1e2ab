// The registry: names, the host-memory LRU bounded by max_cpu_loras, pins that are never
// evicted, unload under use, reloads with new weights, and concurrent acquisition.
#include "lora/adapter_registry.h"

#include <atomic>
#include <map>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/support/hf_models/presets.h"
#include "tests/unit/lora/lora_test_util.h"

namespace kvserve::lora {
namespace {

using testing::ConfigOf;
using testing::FreshDir;
using testing::LoraConfigJson;
using testing::RandomModule;
using testing::WriteAdapter;
namespace hf = kvserve::testing::hf;

class RegistryTest : public ::testing::Test {
 protected:
  // An adapter on layer 0's q_proj whose weights depend on `seed`.
  std::string MakeAdapterDir(const std::string& tag, uint64_t seed) {
    const std::string dir = FreshDir(tag);
    std::map<std::string, testing::ModuleWeights> mods;
    mods["model.layers.0.self_attn.q_proj"] = RandomModule(4, 64, 64, seed);
    WriteAdapter(dir, LoraConfigJson(4, 8), mods);
    return dir;
  }
  std::unique_ptr<AdapterRegistry> Make(int max_loras, int max_cpu) {
    auto r = AdapterRegistry::Create(config_, RegistryOptions{max_loras, 16, max_cpu});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }
  static std::map<std::string, bool> Resident(const AdapterRegistry& r) {
    std::map<std::string, bool> out;
    for (const auto& i : r.List()) out[i.name] = i.resident;
    return out;
  }
  model::ModelConfig config_ = ConfigOf(hf::LlamaPreset());
};

TEST_F(RegistryTest, OptionsAreChecked) {
  EXPECT_FALSE(AdapterRegistry::Create(config_, RegistryOptions{0, 16, 1}).ok());
  EXPECT_FALSE(AdapterRegistry::Create(config_, RegistryOptions{1, 0, 1}).ok());
  auto r = AdapterRegistry::Create(config_, RegistryOptions{4, 16, 2});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("max_cpu_loras (2) must be >= lora.max_loras (4)"),
            std::string::npos);
}

TEST_F(RegistryTest, NamesUnknownDuplicateAndFailedLoads) {
  auto reg = Make(1, 2);
  EXPECT_EQ(reg->Acquire("nope").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(reg->Add("a", MakeAdapterDir("a", 1)).ok());
  EXPECT_EQ(reg->Add("a", MakeAdapterDir("a2", 2)).code(), absl::StatusCode::kAlreadyExists);
  // A load that fails at Add leaves no name behind.
  EXPECT_FALSE(reg->Add("bad", FreshDir("missing")).ok());
  EXPECT_EQ(reg->Acquire("bad").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(reg->resident_count(), 1);
  EXPECT_EQ(reg->Remove("nope").code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistryTest, LeastRecentlyUsedUnpinnedAdapterIsEvicted) {
  auto reg = Make(1, 2);
  for (const char* n : {"a", "b", "c"})
    ASSERT_TRUE(reg->Add(n, MakeAdapterDir(n, n[0]), /*load_now=*/false).ok());
  EXPECT_EQ(reg->resident_count(), 0);
  ASSERT_TRUE(reg->Acquire("a").ok());
  ASSERT_TRUE(reg->Acquire("b").ok());
  ASSERT_TRUE(reg->Acquire("a").ok());  // a is now more recent than b
  ASSERT_TRUE(reg->Acquire("c").ok());  // evicts b
  EXPECT_EQ(Resident(*reg), (std::map<std::string, bool>{{"a", true}, {"b", false}, {"c", true}}));
  EXPECT_EQ(reg->resident_count(), 2);
  ASSERT_TRUE(reg->Acquire("b").ok());  // reloads, evicting a (c was used last)
  EXPECT_EQ(Resident(*reg), (std::map<std::string, bool>{{"a", false}, {"b", true}, {"c", true}}));
}

TEST_F(RegistryTest, PinnedAdaptersAreNeverEvicted) {
  auto reg = Make(2, 2);
  for (const char* n : {"a", "b", "c"})
    ASSERT_TRUE(reg->Add(n, MakeAdapterDir(n, n[0]), false).ok());
  auto a = reg->Acquire("a");
  auto b = reg->Acquire("b");
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = reg->Acquire("c");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("max_cpu_loras"), std::string::npos);
  a->Release();
  auto c2 = reg->Acquire("c");
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ(Resident(*reg), (std::map<std::string, bool>{{"a", false}, {"b", true}, {"c", true}}));
  // Two pins on one adapter are one resident copy.
  auto b2 = reg->Acquire("b");
  ASSERT_TRUE(b2.ok());
  EXPECT_EQ(b2->get(), b->get());
  for (const auto& i : reg->List()) {
    if (i.name == "b") {
      EXPECT_EQ(i.pins, 2);
    }
  }
}

TEST_F(RegistryTest, RemoveUnderUseKeepsWeightsUntilReleaseAndReloadHasANewDigest) {
  auto reg = Make(1, 1);
  ASSERT_TRUE(reg->Add("t", MakeAdapterDir("v1", 1)).ok());
  auto h = reg->Acquire("t");
  ASSERT_TRUE(h.ok());
  const AdapterDigest old = (*h)->digest();
  ASSERT_TRUE(reg->Remove("t").ok());
  EXPECT_EQ(reg->Acquire("t").status().code(), absl::StatusCode::kNotFound);
  // The running request still reads its weights.
  EXPECT_EQ((*h)->view(reg->targets().Index(0, ProjectionKind::kQkv)).rank, 4);
  EXPECT_EQ(reg->resident_count(), 1);  // its seat is held until the pin goes
  // Re-adding now would need the only seat, which the unloaded-but-pinned copy holds.
  EXPECT_EQ(reg->Add("t", MakeAdapterDir("v2", 2)).code(), absl::StatusCode::kResourceExhausted);
  h->Release();
  EXPECT_EQ(reg->resident_count(), 0);
  ASSERT_TRUE(reg->Add("t", MakeAdapterDir("v2b", 2)).ok());
  auto h2 = reg->Acquire("t");
  ASSERT_TRUE(h2.ok());
  EXPECT_NE((*h2)->digest(), old);
}

TEST_F(RegistryTest, ConcurrentAcquireAndReleaseKeepTheBounds) {
  auto reg = Make(2, 3);
  std::map<std::string, AdapterDigest> want;
  for (int i = 0; i < 6; ++i) {
    const std::string n = "n" + std::to_string(i);
    ASSERT_TRUE(reg->Add(n, MakeAdapterDir(n, 100 + i)).ok());  // each load evicts as needed
    auto h = reg->Acquire(n);
    ASSERT_TRUE(h.ok()) << h.status();
    want[n] = (*h)->digest();
  }
  std::atomic<int> wrong{0}, exhausted{0}, ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 gen(static_cast<uint32_t>(t));
      for (int it = 0; it < 60; ++it) {
        const std::string n = "n" + std::to_string(gen() % 6);
        auto h = reg->Acquire(n);
        if (!h.ok()) {
          if (h.status().code() == absl::StatusCode::kResourceExhausted)
            ++exhausted;
          else
            ++wrong;
          continue;
        }
        if ((*h)->digest() != want[n]) ++wrong;
        if (reg->resident_count() > 3) ++wrong;
        ++ok;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(ok.load(), 0);
  EXPECT_LE(reg->resident_count(), 3);
  for (const auto& i : reg->List()) EXPECT_EQ(i.pins, 0) << i.name;
}

}  // namespace
}  // namespace kvserve::lora
