// Randomized stress test of the whole cache: 100,000 mixed operations per KV dtype
// (new sequence with prefix match, append, fork, free, truncate, swap out/in, publish
// limits), with CheckCacheInvariants after every operation and real storage: every token's
// K/V rows hold a pattern of (token, position), copies (CoW, swap) are executed as the
// runner would, and sequences read back their own tokens after every change.
//
// A small pool (96 blocks of 4 tokens) keeps the cache under constant pressure, so
// allocation failures, preemption (swap or recompute), evictions of cached blocks and
// prefix hits on free blocks all happen thousands of times.
//
// The Tiered variant adds the host prefix tier (24 more host blocks): evicted cached blocks
// are offloaded and loaded back on hits, sharing the host pool with swap. Every operation is
// one scheduler step (begin_step first), and its copies run in the runner's order: device ->
// host (offloads, swap-outs), then host -> device (swap-ins, loads), then copy-on-write, then
// the writes of new tokens.
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cache/cache_invariants.h"
#include "cache/host_kv_storage.h"
#include "cache/kv_cache_manager.h"
#include "config/fields.h"
#include "tests/unit/cache/cache_test_util.h"

namespace kvserve::cache {
namespace {

using config::KvDtype;
using testing::VerifyPattern;
using testing::WritePattern;

constexpr int kOps = 100000;
constexpr int kBlockSize = 4;
constexpr int32_t kBlocks = 96;
constexpr int32_t kHostBlocks = 48;
constexpr int32_t kHostCacheBlocks = 24;
constexpr int kMaxSeqs = 24;
constexpr int kMaxLen = 64;

enum Op { kNew, kAppend, kFork, kFree, kTruncate, kSwapOut, kSwapIn, kLimit, kVerify, kNumOps };
const char* const kOpNames[kNumOps] = {"new",      "append",   "fork",  "free",  "truncate",
                                       "swap_out", "swap_in", "limit", "verify"};

struct SimSeq {
  std::vector<int32_t> tokens;  // tokens whose KV is stored (== manager's num_tokens)
  bool swapped = false;
};

class CacheRandomized : public ::testing::TestWithParam<KvDtype> {
 protected:
  virtual bool Tiered() const { return false; }
  int32_t HostBlocks() const { return kHostBlocks + (Tiered() ? kHostCacheBlocks : 0); }

  // The host tier's copies of the last manager call; `swap_in` copies run between the two
  // directions, as in the runner.
  void TierCopies(std::span<const BlockCopy> swap_in = {}) {
    std::vector<BlockCopy> to_host, to_device;
    m_->take_tier_copies(to_host, to_device);
    ASSERT_TRUE(dev_->copy_blocks_to(*host_, to_host).ok());
    ASSERT_TRUE(host_->copy_blocks_to(*dev_, swap_in).ok());
    ASSERT_TRUE(host_->copy_blocks_to(*dev_, to_device).ok());
  }

  void SetUp() override {
    const KvLayout layout = testing::SmallLayout(GetParam(), kBlockSize, /*layers=*/2,
                                                 /*kv_heads=*/2, /*head_dim=*/4);
    KvCacheManagerOptions o;
    o.layout = layout;
    o.num_blocks = kBlocks + 1;
    o.num_host_blocks = HostBlocks();
    o.host_cache_blocks = Tiered() ? kHostCacheBlocks : 0;
    m_ = std::make_unique<KvCacheManager>(o, base::Logger());
    dev_ = std::move(HostKvStorage::Create(layout, kBlocks + 1)).value();
    host_ = std::move(HostKvStorage::Create(layout, HostBlocks())).value();
    keys_ = {MakePrefixKey("m", "tenant-a", ""), MakePrefixKey("m", "tenant-b", "")};
  }

  // Prompts mix a few shared templates (prefix hits) with random tails.
  std::vector<int32_t> MakePrompt() {
    std::vector<int32_t> p;
    const int len = 1 + static_cast<int>(rng_() % 40);
    const int shared = static_cast<int>(rng_() % (len + 1));
    const int32_t tmpl = static_cast<int32_t>(rng_() % 4);
    for (int i = 0; i < shared; ++i) p.push_back(tmpl * 1000 + i);
    while (static_cast<int>(p.size()) < len) p.push_back(static_cast<int32_t>(50000 + rng_() % 500));
    return p;
  }
  int32_t NextToken() { return static_cast<int32_t>(1 + rng_() % 3000); }

  SeqId PickSeq(bool want_swapped) {
    std::vector<SeqId> c;
    for (const auto& [id, s] : seqs_) {
      if (s.swapped == want_swapped) c.push_back(SeqId{id});
    }
    if (c.empty()) return SeqId{-1};
    return c[rng_() % c.size()];
  }

  void Verify(SeqId id) {
    const SimSeq& s = seqs_.at(id.value());
    ASSERT_EQ(m_->num_tokens(id), static_cast<int64_t>(s.tokens.size()));
    if (s.swapped) return;
    const std::string err = VerifyPattern(*dev_, *m_, id, s.tokens);
    ASSERT_EQ(err, "");
  }

  void Commit(SeqId id) {
    if (rng_() % 4 != 0) m_->commit_full_blocks(id, seqs_.at(id.value()).tokens);
  }

  // Frees (recompute-style preemption) or swaps out a victim other than `keep`.
  void Preempt(SeqId keep) {
    SeqId victim = PickSeq(false);
    if (victim == keep || victim.value() < 0) return;
    if (rng_() % 2 == 0 && m_->can_swap_out(victim)) {
      auto copies = m_->swap_out(victim);
      ASSERT_TRUE(copies.has_value());
      ASSERT_TRUE(dev_->copy_blocks_to(*host_, *copies).ok());
      seqs_.at(victim.value()).swapped = true;
      ++preempt_swaps_;
    } else {
      m_->free(victim);
      seqs_.erase(victim.value());
      ++preempt_frees_;
    }
  }

  // Appends `tokens` to `id` (allocating first); false when there was no room.
  bool Append(SeqId id, const std::vector<int32_t>& more) {
    auto d = m_->allocate(id, static_cast<int>(more.size()));
    if (!d) return false;
    TierCopies();
    if (d->cow) {
      const BlockCopy c = *d->cow;
      EXPECT_TRUE(dev_->copy_blocks(std::span(&c, 1)).ok());
    }
    SimSeq& s = seqs_.at(id.value());
    const int64_t first = static_cast<int64_t>(s.tokens.size());
    EXPECT_EQ(d->first_pos, first);
    s.tokens.insert(s.tokens.end(), more.begin(), more.end());
    WritePattern(*dev_, *m_, id, s.tokens, first, static_cast<int64_t>(more.size()));
    return true;
  }

  void Step() {
    m_->begin_step();
    const int r = static_cast<int>(rng_() % 100);
    Op op = r < 18 ? kNew : r < 50 ? kAppend : r < 57 ? kFork : r < 65 ? kFree : r < 72 ? kTruncate
            : r < 80 ? kSwapOut : r < 90 ? kSwapIn : r < 93 ? kLimit : kVerify;
    switch (op) {
      case kNew: {
        if (static_cast<int>(seqs_.size()) >= kMaxSeqs) return;
        const SeqId id{next_id_++};
        const std::vector<int32_t> prompt = MakePrompt();
        const PrefixMatch hit = m_->match_prefix(id, prompt, keys_[rng_() % 2]);
        TierCopies();
        host_hits_ += hit.host_blocks;
        SimSeq& s = seqs_[id.value()];
        s.tokens.assign(prompt.begin(), prompt.begin() + hit.num_tokens);
        if (hit.num_tokens > 0) {
          ++hits_;
          Verify(id);  // the hit blocks already hold this prompt's KV
        }
        const std::vector<int32_t> rest(prompt.begin() + hit.num_tokens, prompt.end());
        if (!Append(id, rest)) {
          m_->free(id);
          seqs_.erase(id.value());
          ++failed_allocs_;
          return;
        }
        Commit(id);
        Verify(id);
        break;
      }
      case kAppend: {
        const SeqId id = PickSeq(false);
        if (id.value() < 0) return;
        if (static_cast<int>(seqs_.at(id.value()).tokens.size()) >= kMaxLen) {
          m_->free(id);  // finished
          seqs_.erase(id.value());
          break;
        }
        std::vector<int32_t> more(rng_() % 4 == 0 ? 1 + rng_() % 8 : 1);
        for (int32_t& t : more) t = NextToken();
        if (!Append(id, more)) {
          ++failed_allocs_;
          Preempt(id);
          return;
        }
        Commit(id);
        Verify(id);
        break;
      }
      case kFork: {
        const SeqId parent = PickSeq(false);
        if (parent.value() < 0 || static_cast<int>(seqs_.size()) >= kMaxSeqs) return;
        const SeqId child{next_id_++};
        m_->fork(parent, child);
        seqs_[child.value()] = seqs_.at(parent.value());
        // Diverge right away, as sampling would.
        if (Append(child, {NextToken()})) Verify(child);
        Verify(parent);
        break;
      }
      case kFree: {
        if (seqs_.empty()) return;
        auto it = seqs_.begin();
        std::advance(it, rng_() % seqs_.size());
        m_->free(SeqId{it->first});
        m_->free(SeqId{it->first});  // idempotent
        seqs_.erase(it);
        break;
      }
      case kTruncate: {
        const SeqId id = PickSeq(false);
        if (id.value() < 0) return;
        SimSeq& s = seqs_.at(id.value());
        const int64_t n = static_cast<int64_t>(rng_() % (s.tokens.size() + 1));
        const int32_t before = m_->usage().used_blocks;
        const int32_t freed = m_->truncate(id, n);
        EXPECT_GE(freed, 0);
        EXPECT_LE(m_->usage().used_blocks, before);
        s.tokens.resize(n);
        Verify(id);
        break;
      }
      case kSwapOut: {
        const SeqId id = PickSeq(false);
        if (id.value() < 0) return;
        auto copies = m_->swap_out(id);
        if (!copies) return;
        ASSERT_TRUE(dev_->copy_blocks_to(*host_, *copies).ok());
        seqs_.at(id.value()).swapped = true;
        ++swaps_out_;
        break;
      }
      case kSwapIn: {
        const SeqId id = PickSeq(true);
        if (id.value() < 0) return;
        auto copies = m_->swap_in(id);
        if (!copies) {
          Preempt(id);
          return;
        }
        TierCopies(*copies);
        seqs_.at(id.value()).swapped = false;
        ++swaps_in_;
        Verify(id);
        break;
      }
      case kLimit: {
        const SeqId id = PickSeq(false);
        if (id.value() < 0) return;
        m_->set_publish_limit(id, static_cast<int64_t>(rng_() % (kMaxLen + 8)));
        break;
      }
      case kVerify: {
        for (const auto& [id, s] : seqs_) Verify(SeqId{id});
        break;
      }
      case kNumOps:
        break;
    }
    ++op_counts_[op];
  }

  std::unique_ptr<KvCacheManager> m_;
  std::unique_ptr<HostKvStorage> dev_, host_;
  std::vector<PrefixKey> keys_;
  std::mt19937_64 rng_{20261202};
  std::map<int64_t, SimSeq> seqs_;
  int64_t next_id_ = 1;
  int op_counts_[kNumOps] = {};
  int host_hits_ = 0;
  int hits_ = 0, failed_allocs_ = 0, preempt_swaps_ = 0, preempt_frees_ = 0, swaps_out_ = 0,
      swaps_in_ = 0;
};

TEST_P(CacheRandomized, MixedOperationsKeepInvariantsAndData) {
  int ops = 0;
  for (int i = 0; i < kOps; ++i, ++ops) {
    Step();
    if (HasFatalFailure()) FAIL() << "at op " << i;
    const absl::Status st = CheckCacheInvariants(*m_);
    ASSERT_TRUE(st.ok()) << "after op " << i << ": " << st;
  }
  // Drain: every sequence freed, every block back in the free queue.
  for (const auto& [id, s] : seqs_) Verify(SeqId{id});
  for (const auto& [id, s] : seqs_) m_->free(SeqId{id});
  m_->begin_step();  // quarantined host blocks come back
  ASSERT_TRUE(CheckCacheInvariants(*m_).ok());
  const CacheUsage u = m_->usage();
  EXPECT_EQ(u.used_blocks, 0);
  EXPECT_EQ(u.swap_used_blocks, u.host_cache_blocks);  // only the prefix tier holds host blocks
  EXPECT_EQ(u.num_sequences, 0);

  std::string mix;
  for (int o = 0; o < kNumOps; ++o) mix += absl::StrCat(kOpNames[o], "=", op_counts_[o], " ");
  std::printf("%s: %d ops: %s\n  prefix hits=%d failed allocs=%d preempt swap=%d free=%d "
              "swaps out=%d in=%d\n  %s\n",
              std::string(config::Name(GetParam())).c_str(), ops, mix.c_str(), hits_,
              failed_allocs_, preempt_swaps_, preempt_frees_, swaps_out_, swaps_in_,
              u.ToString().c_str());
  // The mix really exercised every path.
  for (int o = 0; o < kNumOps; ++o) EXPECT_GT(op_counts_[o], 1000) << kOpNames[o];
  EXPECT_GT(hits_, 1000);
  EXPECT_GT(failed_allocs_, 100);
  EXPECT_GT(u.cow_copies, 1000u);
  EXPECT_GT(u.evicted_blocks, 1000u);
  EXPECT_GT(u.swap_in_reused_blocks, 100u);
  EXPECT_GT(swaps_in_, 1000);
  EXPECT_EQ(u.offloaded_blocks, 0u);  // no host prefix tier here
}

// The same mix with the host prefix tier on (fp32: the tier moves whole blocks, the dtype
// does not matter to it).
class CacheRandomizedTiered : public CacheRandomized {
 protected:
  bool Tiered() const override { return true; }
};
TEST_P(CacheRandomizedTiered, MixedOperationsKeepInvariantsAndData) {
  for (int i = 0; i < kOps; ++i) {
    Step();
    if (HasFatalFailure()) FAIL() << "at op " << i;
    const absl::Status st = CheckCacheInvariants(*m_);
    ASSERT_TRUE(st.ok()) << "after op " << i << ": " << st;
  }
  for (const auto& [id, s] : seqs_) Verify(SeqId{id});
  for (const auto& [id, s] : seqs_) m_->free(SeqId{id});
  m_->begin_step();
  ASSERT_TRUE(CheckCacheInvariants(*m_).ok());
  const CacheUsage u = m_->usage();
  EXPECT_EQ(u.used_blocks, 0);
  EXPECT_EQ(u.swap_used_blocks, u.host_cache_blocks);
  std::printf("tiered: prefix hits=%d host blocks loaded=%d swaps out=%d in=%d\n  %s\n", hits_, host_hits_,
              swaps_out_, swaps_in_, u.ToString().c_str());
  EXPECT_GT(hits_, 1000);
  EXPECT_GT(u.offloaded_blocks, 1000u);
  EXPECT_GT(host_hits_, 100);
  EXPECT_GT(swaps_in_, 1000);
}
INSTANTIATE_TEST_SUITE_P(Fp32, CacheRandomizedTiered, ::testing::Values(KvDtype::kFp32));

INSTANTIATE_TEST_SUITE_P(AllDtypes, CacheRandomized,
                         ::testing::Values(KvDtype::kFp32, KvDtype::kFp16, KvDtype::kBf16,
                                           KvDtype::kFp8E4M3, KvDtype::kInt8),
                         [](const ::testing::TestParamInfo<KvDtype>& p) {
                           return std::string(config::Name(p.param));
                         });

}  // namespace
}  // namespace kvserve::cache
