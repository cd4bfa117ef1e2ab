#include "tests/support/hf_models/reference_forward.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/safetensors.h"
#include "tests/support/hf_models/mxfp4.h"
#include "tests/support/hf_models/reference_rope.h"

namespace kvserve::testing::hf {

using Vec = std::vector<double>;  // a matrix is row-major [out][in], as nn.Linear stores it

struct LayerWeights {
  Vec input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;
  Vec wq, wk, wv, wo, bq, bk, bv, bo;
  Vec q_norm, k_norm, sinks;
  int inter = 0;  // rows of gate / up (dense or per expert)
  Vec gate, up, down;
  Vec router, router_bias;                                  // [E][D], [E]
  std::vector<Vec> e_gate, e_up, e_down;                    // Mixtral / Qwen3-MoE, per expert
  std::vector<Vec> e_gate_up, e_gate_up_bias, e_down_bias;  // gpt-oss; e_down reused
};

struct ReferenceModel::Weights {
  ReferenceConfig c;
  Vec embed, final_norm, lm_head;
  std::vector<LayerWeights> layers;
};

namespace {

using model::SafetensorsCheckpoint;

class TensorLoader {
 public:
  explicit TensorLoader(const SafetensorsCheckpoint& ckpt) : ckpt_(ckpt) {}

  absl::StatusOr<Vec> Float(const std::string& name, std::vector<int64_t> shape) {
    auto found = ckpt_.Find(name);
    if (!found.ok()) return found.status();
    const auto* e = found->second;
    if (e->shape != shape) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\": shape [",
                                                     absl::StrJoin(e->shape, ", "), "], expected [",
                                                     absl::StrJoin(shape, ", "), "]"));
    }
    if (e->dtype != "F32" && e->dtype != "BF16") {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", name, "\": dtype ", e->dtype, " (F32 or BF16)"));
    }
    std::vector<float> f(static_cast<size_t>(e->num_elements()));
    if (auto st = found->first->ReadF32(*e, f); !st.ok()) return st;
    used_.insert(name);
    return Vec(f.begin(), f.end());
  }

  absl::StatusOr<std::span<const uint8_t>> Bytes(const std::string& name,
                                                 std::vector<int64_t> shape) {
    auto found = ckpt_.Find(name);
    if (!found.ok()) return found.status();
    const auto* e = found->second;
    if (e->shape != shape || e->dtype != "U8") {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor \"", name, "\": ", e->dtype, " [", absl::StrJoin(e->shape, ", "),
                       "], expected U8 [", absl::StrJoin(shape, ", "), "]"));
    }
    used_.insert(name);
    auto b = found->first->Bytes(*e);
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  }

  // Every stored tensor must have been consumed: an unexpected one means the checkpoint
  // has a part the oracle does not model.
  absl::Status CheckAllUsed() const {
    for (const std::string& n : ckpt_.TensorNames()) {
      if (!used_.count(n))
        return absl::InvalidArgumentError(absl::StrCat("unexpected tensor \"", n, "\""));
    }
    return absl::OkStatus();
  }

 private:
  const SafetensorsCheckpoint& ckpt_;
  std::set<std::string> used_;
};

// Assigns the value of a StatusOr expression to an existing lvalue or returns its error.
#define REF_LOAD(lhs, expr)                       \
  do {                                            \
    auto ref_tmp_ = (expr);                       \
    if (!ref_tmp_.ok()) return ref_tmp_.status(); \
    lhs = std::move(*ref_tmp_);                   \
  } while (0)

Vec Rows(const Vec& m, int64_t cols, int64_t begin, int64_t end) {
  return Vec(m.begin() + begin * cols, m.begin() + end * cols);
}

// [rows][cols] -> [cols][rows].
Vec Transpose(std::span<const double> m, int64_t rows, int64_t cols) {
  Vec t(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      t[static_cast<size_t>(c * rows + r)] = m[static_cast<size_t>(r * cols + c)];
  }
  return t;
}

absl::Status LoadLayer(TensorLoader& ld, const ReferenceConfig& c, int i, LayerWeights& w) {
  const int64_t d = c.hidden_size, hd = c.head_dim, qd = c.num_heads * hd,
                kvd = c.num_kv_heads * hd;
  const std::string p = absl::StrCat("model.layers.", i, ".");
  REF_LOAD(w.input_norm, ld.Float(p + "input_layernorm.weight", {d}));
  REF_LOAD(w.post_attn_norm, ld.Float(p + "post_attention_layernorm.weight", {d}));
  if (c.gemma) {
    REF_LOAD(w.pre_ff_norm, ld.Float(p + "pre_feedforward_layernorm.weight", {d}));
    REF_LOAD(w.post_ff_norm, ld.Float(p + "post_feedforward_layernorm.weight", {d}));
  }
  if (c.arch == Arch::kPhi3) {
    Vec qkv;
    REF_LOAD(qkv, ld.Float(p + "self_attn.qkv_proj.weight", {qd + 2 * kvd, d}));
    w.wq = Rows(qkv, d, 0, qd);
    w.wk = Rows(qkv, d, qd, qd + kvd);
    w.wv = Rows(qkv, d, qd + kvd, qd + 2 * kvd);
  } else {
    REF_LOAD(w.wq, ld.Float(p + "self_attn.q_proj.weight", {qd, d}));
    REF_LOAD(w.wk, ld.Float(p + "self_attn.k_proj.weight", {kvd, d}));
    REF_LOAD(w.wv, ld.Float(p + "self_attn.v_proj.weight", {kvd, d}));
  }
  REF_LOAD(w.wo, ld.Float(p + "self_attn.o_proj.weight", {d, qd}));
  if (c.qkv_bias) {
    REF_LOAD(w.bq, ld.Float(p + "self_attn.q_proj.bias", {qd}));
    REF_LOAD(w.bk, ld.Float(p + "self_attn.k_proj.bias", {kvd}));
    REF_LOAD(w.bv, ld.Float(p + "self_attn.v_proj.bias", {kvd}));
  }
  if (c.o_bias) REF_LOAD(w.bo, ld.Float(p + "self_attn.o_proj.bias", {d}));
  if (c.qk_norm) {
    REF_LOAD(w.q_norm, ld.Float(p + "self_attn.q_norm.weight", {hd}));
    REF_LOAD(w.k_norm, ld.Float(p + "self_attn.k_norm.weight", {hd}));
  }
  if (c.sinks) REF_LOAD(w.sinks, ld.Float(p + "self_attn.sinks", {c.num_heads}));

  const int64_t e = c.num_experts;
  if (!c.layers[static_cast<size_t>(i)].sparse_moe) {
    w.inter = c.intermediate_size;
    const int64_t in = w.inter;
    if (c.arch == Arch::kPhi3) {
      Vec gu;
      REF_LOAD(gu, ld.Float(p + "mlp.gate_up_proj.weight", {2 * in, d}));
      w.gate = Rows(gu, d, 0, in);
      w.up = Rows(gu, d, in, 2 * in);
    } else {
      REF_LOAD(w.gate, ld.Float(p + "mlp.gate_proj.weight", {in, d}));
      REF_LOAD(w.up, ld.Float(p + "mlp.up_proj.weight", {in, d}));
    }
    REF_LOAD(w.down, ld.Float(p + "mlp.down_proj.weight", {d, in}));
    return absl::OkStatus();
  }
  if (c.arch == Arch::kMixtral) {
    w.inter = c.intermediate_size;
    REF_LOAD(w.router, ld.Float(p + "block_sparse_moe.gate.weight", {e, d}));
    for (int x = 0; x < e; ++x) {
      const std::string ep = absl::StrCat(p, "block_sparse_moe.experts.", x, ".");
      Vec g, u, dn;
      REF_LOAD(g, ld.Float(ep + "w1.weight", {w.inter, d}));
      REF_LOAD(dn, ld.Float(ep + "w2.weight", {d, w.inter}));
      REF_LOAD(u, ld.Float(ep + "w3.weight", {w.inter, d}));
      w.e_gate.push_back(std::move(g));
      w.e_up.push_back(std::move(u));
      w.e_down.push_back(std::move(dn));
    }
  } else if (c.arch == Arch::kQwen3Moe) {
    w.inter = c.moe_intermediate_size;
    REF_LOAD(w.router, ld.Float(p + "mlp.gate.weight", {e, d}));
    for (int x = 0; x < e; ++x) {
      const std::string ep = absl::StrCat(p, "mlp.experts.", x, ".");
      Vec g, u, dn;
      REF_LOAD(g, ld.Float(ep + "gate_proj.weight", {w.inter, d}));
      REF_LOAD(u, ld.Float(ep + "up_proj.weight", {w.inter, d}));
      REF_LOAD(dn, ld.Float(ep + "down_proj.weight", {d, w.inter}));
      w.e_gate.push_back(std::move(g));
      w.e_up.push_back(std::move(u));
      w.e_down.push_back(std::move(dn));
    }
  } else {  // gpt-oss
    w.inter = c.intermediate_size;
    const int64_t in = w.inter;
    REF_LOAD(w.router, ld.Float(p + "mlp.router.weight", {e, d}));
    REF_LOAD(w.router_bias, ld.Float(p + "mlp.router.bias", {e}));
    Vec gub, db;
    REF_LOAD(gub, ld.Float(p + "mlp.experts.gate_up_proj_bias", {e, 2 * in}));
    REF_LOAD(db, ld.Float(p + "mlp.experts.down_proj_bias", {e, d}));
    const std::string gu = p + "mlp.experts.gate_up_proj", dp = p + "mlp.experts.down_proj";
    if (c.mxfp4) {
      std::span<const uint8_t> gb, gs, dbk, ds;
      REF_LOAD(gb, ld.Bytes(gu + "_blocks", {e, 2 * in, d / kMxfp4Block, 16}));
      REF_LOAD(gs, ld.Bytes(gu + "_scales", {e, 2 * in, d / kMxfp4Block}));
      REF_LOAD(dbk, ld.Bytes(dp + "_blocks", {e, d, in / kMxfp4Block, 16}));
      REF_LOAD(ds, ld.Bytes(dp + "_scales", {e, d, in / kMxfp4Block}));
      const size_t gbn = static_cast<size_t>(2 * in * d / 2),
                   gsn = static_cast<size_t>(2 * in * d / kMxfp4Block);
      const size_t dbn = static_cast<size_t>(d * in / 2),
                   dsn = static_cast<size_t>(d * in / kMxfp4Block);
      for (int64_t x = 0; x < e; ++x) {
        w.e_gate_up.push_back(
            DequantMxfp4(gb.subspan(x * gbn, gbn), gs.subspan(x * gsn, gsn), 2 * in, d));
        w.e_down.push_back(
            DequantMxfp4(dbk.subspan(x * dbn, dbn), ds.subspan(x * dsn, dsn), d, in));
      }
    } else {
      // transformers' layout is input-major for x @ W: [E, D, 2I] and [E, I, D].
      Vec g, dn;
      REF_LOAD(g, ld.Float(gu, {e, d, 2 * in}));
      REF_LOAD(dn, ld.Float(dp, {e, in, d}));
      for (int64_t x = 0; x < e; ++x) {
        w.e_gate_up.push_back(Transpose(std::span(g).subspan(static_cast<size_t>(x * d * 2 * in),
                                                             static_cast<size_t>(d * 2 * in)),
                                        d, 2 * in));
        w.e_down.push_back(Transpose(
            std::span(dn).subspan(static_cast<size_t>(x * in * d), static_cast<size_t>(in * d)), in,
            d));
      }
    }
    for (int64_t x = 0; x < e; ++x) {
      w.e_gate_up_bias.push_back(Rows(gub, 2 * in, x, x + 1));
      w.e_down_bias.push_back(Rows(db, d, x, x + 1));
    }
  }
  return absl::OkStatus();
}

// out = W x (+ b), W [out][in].
Vec Linear(std::span<const double> x, const Vec& w, const Vec& b) {
  const size_t in = x.size(), out = w.size() / in;
  Vec y(out);
  for (size_t o = 0; o < out; ++o) {
    double s = b.empty() ? 0.0 : b[o];
    for (size_t i = 0; i < in; ++i) s += w[o * in + i] * x[i];
    y[o] = s;
  }
  return y;
}

Vec RmsNorm(std::span<const double> x, const Vec& w, double eps, bool one_plus) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * (one_plus ? 1.0 + w[i] : w[i]);
  return y;
}

double Silu(double v) { return v / (1.0 + std::exp(-v)); }
double GeluTanh(double v) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * v * (1.0 + std::tanh(k * (v + 0.044715 * v * v * v)));
}

Vec GatedMlp(std::span<const double> h, const Vec& gate, const Vec& up, const Vec& down,
             bool gelu) {
  Vec g = Linear(h, gate, {}), u = Linear(h, up, {});
  for (size_t i = 0; i < g.size(); ++i) g[i] = (gelu ? GeluTanh(g[i]) : Silu(g[i])) * u[i];
  return Linear(g, down, {});
}

// Indices of the k largest scores, larger first, ties to the lower index.
std::vector<int> TopK(const Vec& s, int k) {
  std::vector<int> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) {
    return s[static_cast<size_t>(a)] > s[static_cast<size_t>(b)];
  });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

Vec Softmax(const Vec& z) {
  const double m = *std::max_element(z.begin(), z.end());
  Vec p(z.size());
  double sum = 0;
  for (size_t i = 0; i < z.size(); ++i) sum += (p[i] = std::exp(z[i] - m));
  for (double& v : p) v /= sum;
  return p;
}

Vec MoeForward(const ReferenceConfig& c, const LayerWeights& w, std::span<const double> h) {
  Vec out(h.size(), 0.0);
  const Vec logits = Linear(h, w.router, w.router_bias);
  std::vector<int> chosen;
  Vec weight;
  if (c.arch == Arch::kGptOss) {
    chosen = TopK(logits, c.top_k);
    Vec sel;
    for (int e : chosen) sel.push_back(logits[static_cast<size_t>(e)]);
    weight = Softmax(sel);
  } else {
    const Vec probs = Softmax(logits);
    chosen = TopK(probs, c.top_k);
    double sum = 0;
    for (int e : chosen) sum += probs[static_cast<size_t>(e)];
    const bool renorm = c.arch == Arch::kMixtral || c.norm_topk_prob;
    for (int e : chosen) weight.push_back(probs[static_cast<size_t>(e)] / (renorm ? sum : 1.0));
  }
  for (size_t k = 0; k < chosen.size(); ++k) {
    const size_t e = static_cast<size_t>(chosen[k]);
    Vec y;
    if (c.arch == Arch::kGptOss) {
      const Vec gu = Linear(h, w.e_gate_up[e], w.e_gate_up_bias[e]);
      Vec act(gu.size() / 2);
      for (size_t i = 0; i < act.size(); ++i) {
        const double gate = std::min(gu[2 * i], c.swiglu_limit);
        const double up = std::clamp(gu[2 * i + 1], -c.swiglu_limit, c.swiglu_limit);
        act[i] = (up + 1.0) * gate / (1.0 + std::exp(-1.702 * gate));
      }
      y = Linear(act, w.e_down[e], w.e_down_bias[e]);
    } else {
      y = GatedMlp(h, w.e_gate[e], w.e_up[e], w.e_down[e], false);
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] += weight[k] * y[i];
  }
  return out;
}

// In place: head-wise RMSNorm over head_dim (Qwen3 w, Gemma 3 (1 + w)).
void HeadNorm(Vec& x, int heads, int hd, const Vec& w, double eps, bool one_plus) {
  for (int h = 0; h < heads; ++h) {
    std::span<const double> seg(x.data() + h * hd, static_cast<size_t>(hd));
    const Vec y = RmsNorm(seg, w, eps, one_plus);
    std::copy(y.begin(), y.end(), x.begin() + h * hd);
  }
}

// In place: rotate the first rotary_dim dims of each head, pairs (i, i + rotary_dim / 2).
void ApplyRope(Vec& x, int heads, int hd, const RopeTable& rope, int64_t pos) {
  const size_t half = rope.inv_freq.size();
  for (int h = 0; h < heads; ++h) {
    double* v = x.data() + h * hd;
    for (size_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos) * rope.inv_freq[i];
      const double cs = std::cos(a) * rope.attention_factor,
                   sn = std::sin(a) * rope.attention_factor;
      const double x1 = v[i], x2 = v[i + half];
      v[i] = x1 * cs - x2 * sn;
      v[i + half] = x2 * cs + x1 * sn;
    }
  }
}

}  // namespace

std::vector<double> Reference::LogProbs(size_t t) const {
  const auto row = Row(t);
  const double m = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double v : row) sum += std::exp(v - m);
  const double lse = m + std::log(sum);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = row[i] - lse;
  return out;
}

int32_t Reference::Argmax(size_t t) const {
  const auto row = Row(t);
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

ReferenceModel::ReferenceModel(std::unique_ptr<Weights> w) : w_(std::move(w)) {}
ReferenceModel::~ReferenceModel() = default;
const ReferenceConfig& ReferenceModel::config() const { return w_->c; }

absl::StatusOr<std::unique_ptr<ReferenceModel>> ReferenceModel::Load(const std::string& dir) {
  auto cfg = LoadReferenceConfig(dir);
  if (!cfg.ok()) return cfg.status();
  auto ckpt = SafetensorsCheckpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  auto w = std::make_unique<Weights>();
  w->c = std::move(*cfg);
  const ReferenceConfig& c = w->c;
  TensorLoader ld(*ckpt);
  auto with_dir = [&dir](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(dir, ": ", st.message()));
  };
  auto load = [&]() -> absl::Status {
    REF_LOAD(w->embed, ld.Float("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}));
    w->layers.resize(static_cast<size_t>(c.num_layers));
    for (int i = 0; i < c.num_layers; ++i) {
      if (auto st = LoadLayer(ld, c, i, w->layers[static_cast<size_t>(i)]); !st.ok()) return st;
    }
    REF_LOAD(w->final_norm, ld.Float("model.norm.weight", {c.hidden_size}));
    if (c.tie_word_embeddings) {
      w->lm_head = w->embed;
    } else {
      REF_LOAD(w->lm_head, ld.Float("lm_head.weight", {c.vocab_size, c.hidden_size}));
    }
    return ld.CheckAllUsed();
  };
  if (auto st = load(); !st.ok()) return with_dir(st);
  return std::unique_ptr<ReferenceModel>(new ReferenceModel(std::move(w)));
}

absl::StatusOr<Reference> ReferenceModel::Forward(std::span<const int32_t> ids) const {
  const ReferenceConfig& c = w_->c;
  const size_t n = ids.size();
  if (n == 0) return absl::InvalidArgumentError("empty token sequence");
  const int d = c.hidden_size, hd = c.head_dim, heads = c.num_heads, kvh = c.num_kv_heads;
  const int group = heads / kvh;
  std::vector<Vec> x(n);
  for (size_t t = 0; t < n; ++t) {
    if (ids[t] < 0 || ids[t] >= c.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", ids[t], " at ", t, " outside vocab ", c.vocab_size));
    }
    x[t].assign(w_->embed.begin() + static_cast<int64_t>(ids[t]) * d,
                w_->embed.begin() + (ids[t] + 1) * int64_t{d});
    for (double& v : x[t]) v *= c.embed_scale;
  }
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerConfig& lc = c.layers[static_cast<size_t>(l)];
    const LayerWeights& w = w_->layers[static_cast<size_t>(l)];
    const RopeTable rope = ComputeRope(lc.rope, static_cast<int64_t>(n));
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const Vec h = RmsNorm(x[t], w.input_norm, c.rms_norm_eps, c.gemma);
      q[t] = Linear(h, w.wq, w.bq);
      k[t] = Linear(h, w.wk, w.bk);
      v[t] = Linear(h, w.wv, w.bv);
      if (c.qk_norm) {
        HeadNorm(q[t], heads, hd, w.q_norm, c.rms_norm_eps, c.gemma);
        HeadNorm(k[t], kvh, hd, w.k_norm, c.rms_norm_eps, c.gemma);
      }
      ApplyRope(q[t], heads, hd, rope, static_cast<int64_t>(t));
      ApplyRope(k[t], kvh, hd, rope, static_cast<int64_t>(t));
    }
    for (size_t i = 0; i < n; ++i) {
      Vec attn(static_cast<size_t>(heads * hd), 0.0);
      for (int h = 0; h < heads; ++h) {
        const int g = h / group;
        // Visible keys j: j <= i, and i - j < window on sliding layers.
        const size_t first = lc.sliding && static_cast<int64_t>(i) >= lc.window
                                 ? i - static_cast<size_t>(lc.window) + 1
                                 : 0;
        Vec s;
        for (size_t j = first; j <= i; ++j) {
          double dot = 0;
          for (int e = 0; e < hd; ++e)
            dot += q[i][static_cast<size_t>(h * hd + e)] * k[j][static_cast<size_t>(g * hd + e)];
          dot *= c.attn_scaling;
          if (c.attn_softcap) dot = *c.attn_softcap * std::tanh(dot / *c.attn_softcap);
          s.push_back(dot);
        }
        double m = *std::max_element(s.begin(), s.end());
        if (c.sinks) m = std::max(m, w.sinks[static_cast<size_t>(h)]);
        double denom = c.sinks ? std::exp(w.sinks[static_cast<size_t>(h)] - m) : 0.0;
        for (double& z : s) denom += (z = std::exp(z - m));
        for (size_t j = first; j <= i; ++j) {
          const double p = s[j - first] / denom;
          for (int e = 0; e < hd; ++e)
            attn[static_cast<size_t>(h * hd + e)] += p * v[j][static_cast<size_t>(g * hd + e)];
        }
      }
      Vec o = Linear(attn, w.wo, w.bo);
      if (c.gemma) o = RmsNorm(o, w.post_attn_norm, c.rms_norm_eps, true);
      for (int e = 0; e < d; ++e) x[i][static_cast<size_t>(e)] += o[static_cast<size_t>(e)];
    }
    for (size_t t = 0; t < n; ++t) {
      const Vec h =
          RmsNorm(x[t], c.gemma ? w.pre_ff_norm : w.post_attn_norm, c.rms_norm_eps, c.gemma);
      Vec m = lc.sparse_moe ? MoeForward(c, w, h)
                            : GatedMlp(h, w.gate, w.up, w.down, c.activation != "silu");
      if (c.gemma) m = RmsNorm(m, w.post_ff_norm, c.rms_norm_eps, true);
      for (int e = 0; e < d; ++e) x[t][static_cast<size_t>(e)] += m[static_cast<size_t>(e)];
    }
  }
  Reference r;
  r.vocab_size = c.vocab_size;
  r.logits.reserve(n * static_cast<size_t>(c.vocab_size));
  for (size_t t = 0; t < n; ++t) {
    Vec z = Linear(RmsNorm(x[t], w_->final_norm, c.rms_norm_eps, c.gemma), w_->lm_head, {});
    if (c.final_softcap) {
      for (double& v : z) v = *c.final_softcap * std::tanh(v / *c.final_softcap);
    }
    r.logits.insert(r.logits.end(), z.begin(), z.end());
  }
  return r;
}

absl::StatusOr<std::vector<double>> ReferenceModel::MoeBlock(int layer,
                                                             std::span<const double> h) const {
  const ReferenceConfig& c = w_->c;
  if (layer < 0 || layer >= c.num_layers || !c.layers[static_cast<size_t>(layer)].sparse_moe) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, " is not a mixture-of-experts layer"));
  }
  if (h.size() != static_cast<size_t>(c.hidden_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input of ", h.size(), " values, hidden ", c.hidden_size));
  }
  return MoeForward(c, w_->layers[static_cast<size_t>(layer)], h);
}

absl::StatusOr<Reference> RunReference(const std::string& dir, std::span<const int32_t> ids) {
  auto m = ReferenceModel::Load(dir);
  if (!m.ok()) return m.status();
  return (*m)->Forward(ids);
}

absl::StatusOr<std::vector<int32_t>> Greedy(const std::string& dir, std::span<const int32_t> prompt,
                                            int n) {
  auto m = ReferenceModel::Load(dir);
  if (!m.ok()) return m.status();
  std::vector<int32_t> seq(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int s = 0; s < n; ++s) {
    auto r = (*m)->Forward(seq);
    if (!r.ok()) return r.status();
    const int32_t next = r->Argmax(seq.size() - 1);
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

}  // namespace kvserve::testing::hf
