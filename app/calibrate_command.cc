#include "app/calibrate_command.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "app/command_switches.h"
#include "app/model_loading.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "compression/calibrator.h"
#include "compression/key_basis.h"
#include "compression/key_pca.h"
#include "compression/triattention_stats.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace kvserve::app {
namespace {

absl::Status ParseCount(std::string_view flag, const std::string& text, int64_t min, int64_t& out) {
  KVS_RETURN_IF_ERROR(ParseSwitchNumber(flag, text, out));
  if (out < min) return absl::InvalidArgumentError(absl::StrCat(base::AsAbsl(flag), ": must be >= ", min));
  return absl::OkStatus();
}

// Mean over (layer, head, pair) of |A| / M, the mean resultant length the paper reports
// (close to 1: queries concentrate around their centre).
double MeanResultantLength(const compression::TriAttentionStats& s) {
  double sum = 0.0;
  for (const auto& e : s.entries) sum += e.m > 0.0 ? std::hypot(e.a_re, e.a_im) / e.m : 0.0;
  return s.entries.empty() ? 0.0 : sum / static_cast<double>(s.entries.size());
}

}  // namespace

absl::StatusOr<CalibrateOptions> ParseCalibrateOptions(const ParsedArgs& args) {
  CalibrateOptions o;
  auto text = SwitchValue(args, "--text");
  if (!text) return absl::InvalidArgumentError("calibrate: --text FILE is required");
  auto out = SwitchValue(args, "--out");
  if (!out) return absl::InvalidArgumentError("calibrate: --out FILE is required");
  o.text_path = *text;
  o.out_path = *out;
  if (auto v = SwitchValue(args, "--key-basis-out")) {
    if (v->empty()) return absl::InvalidArgumentError("calibrate: --key-basis-out needs a file");
    o.key_basis_path = *v;
  } else {
    o.key_basis_path = (std::filesystem::path(o.out_path).parent_path() / "key_basis.bin").string();
  }
  if (auto v = SwitchValue(args, "--max-tokens")) KVS_RETURN_IF_ERROR(ParseCount("--max-tokens", *v, 1, o.max_tokens));
  if (auto v = SwitchValue(args, "--window")) KVS_RETURN_IF_ERROR(ParseCount("--window", *v, 2, o.window));
  return o;
}

int RunCalibrate(const ParsedArgs& args, char** envp, std::ostream& /*out*/, std::ostream& err) {
  auto opts = ParseCalibrateOptions(args);
  if (!opts.ok()) {
    err << "kvserve: " << opts.status().message() << "\n";
    return kExitUsage;
  }
  LoadedModel loaded;
  const int64_t window = opts->window;
  const int rc = LoadModelForCommand(
      args, envp, "calibrate",
      // One calibration window per forward step, capped by the model's context.
      [window](const config::Config&, const model::ModelConfig& mc) {
        return static_cast<int>(window > 0 ? std::min(window, mc.max_context()) : mc.max_context());
      },
      err, loaded);
  if (rc != kExitOk) return rc;
  const tokenizer::Tokenizer& tok = *loaded.tokenizer;
  model::LlamaModel& m = *loaded.model;
  std::ifstream in(opts->text_path, std::ios::binary);
  if (!in) {
    err << "kvserve calibrate: --text " << opts->text_path << ": cannot open\n";
    return kExitFailure;
  }
  std::ostringstream text;
  text << in.rdbuf();
  const std::vector<int32_t> tokens = tok.encode(text.str(), /*add_special=*/false);
  if (static_cast<int64_t>(tokens.size()) < opts->max_tokens) {
    err << "kvserve calibrate: --text " << opts->text_path << " holds " << tokens.size() << " tokens, fewer than the "
        << opts->max_tokens << " to calibrate on"
        << (opts->max_tokens == compression::kDefaultCalibrationTokens
                ? " (the default is the paper's 32768; pass a smaller --max-tokens to calibrate on less)"
                : "")
        << "\n";
    return kExitUsage;
  }

  const int64_t context = m.config().max_context();
  compression::CalibrationOptions copts;
  copts.max_tokens = opts->max_tokens;
  copts.window = opts->window;
  // Windows start the way prompts do: with BOS when the tokenizer adds one.
  const std::vector<int32_t> special = tok.encode("", /*add_special=*/true);
  if (special.size() == 1 && special.front() == tok.bos_id()) copts.bos = special.front();
  copts.source = absl::StrCat("model ", std::filesystem::path(loaded.dir).filename().string(), ", text ",
                              std::filesystem::path(opts->text_path).filename().string(), ", ", opts->max_tokens,
                              " tokens, window ", opts->window > 0 ? std::min(opts->window, context) : context);
  compression::KeyCovarianceAccumulator keys(m.config().num_layers, m.config().num_kv_heads, m.config().head_dim);
  copts.keys = &keys;
  const auto t0 = std::chrono::steady_clock::now();
  auto stats = compression::CalibrateModel(m, tokens, copts);
  if (!stats.ok()) {
    err << "kvserve calibrate: " << stats.status().message() << "\n";
    return kExitFailure;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (absl::Status st = compression::CheckCompatible(*stats, m.config(), m.rope_inv_freq()); !st.ok()) {
    err << "kvserve calibrate: internal error: " << st.message() << "\n";
    return kExitFailure;
  }
  if (absl::Status st = compression::SaveStats(*stats, opts->out_path); !st.ok()) {
    err << "kvserve calibrate: " << st.message() << "\n";
    return kExitFailure;
  }
  auto basis = keys.Finish(m.rope_inv_freq(), copts.source);
  if (!basis.ok()) {
    err << "kvserve calibrate: " << basis.status().message() << "\n";
    return kExitFailure;
  }
  if (absl::Status st = compression::SaveKeyBasis(*basis, opts->key_basis_path); !st.ok()) {
    err << "kvserve calibrate: " << st.message() << "\n";
    return kExitFailure;
  }
  std::error_code ec;
  const auto size = std::filesystem::file_size(opts->out_path, ec);
  err << "[calibrate] " << opts->max_tokens << " text tokens (" << stats->num_tokens << " query rows per layer) in "
      << seconds << " s; wrote " << opts->out_path << " (" << (ec ? 0 : size) << " bytes): " << stats->num_layers
      << " layers x " << stats->num_q_heads << " query heads x " << stats->num_freqs()
      << " frequency pairs, mean resultant length " << MeanResultantLength(*stats) << "\n";
  const auto basis_size = std::filesystem::file_size(opts->key_basis_path, ec);
  err << "[calibrate] wrote " << opts->key_basis_path << " (" << (ec ? 0 : basis_size)
      << " bytes): post-RoPE key PCA over " << basis->num_tokens << " keys per (layer, KV head); key variance held by "
      << "the top r axes, mean (min) over heads:";
  for (int r = 4; r <= basis->head_dim; r *= 2) {
    double sum = 0.0, lo = 1.0;
    for (int l = 0; l < basis->num_layers; ++l) {
      for (int h = 0; h < basis->num_kv_heads; ++h) {
        const double e = basis->explained(l, h, r);
        sum += e;
        lo = std::min(lo, e);
      }
    }
    err << " r=" << r << " " << sum / (basis->num_layers * basis->num_kv_heads) << " (" << lo << ")";
  }
  err << "\n";
  return kExitOk;
}

}  // namespace kvserve::app
