#include "tokenizer/normalizer.h"

#include "absl/strings/str_cat.h"
#include "base/check.h"

#if defined(KVSERVE_TOKENIZER_HAVE_ICU)
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#endif

namespace kvserve::tokenizer {
namespace {

class PrependStep final : public NormalizerStep {
 public:
  explicit PrependStep(std::string prefix) : prefix_(std::move(prefix)) {}
  void Apply(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceLiteralStep final : public NormalizerStep {
 public:
  ReplaceLiteralStep(std::string pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(std::string& text) const override {
    if (pattern_.empty()) return;
    size_t pos = text.find(pattern_);
    if (pos == std::string::npos) return;
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    size_t last = 0;
    while (pos != std::string::npos) {
      out.append(text, last, pos - last);
      out.append(content_);
      last = pos + pattern_.size();
      pos = text.find(pattern_, last);
    }
    out.append(text, last, std::string::npos);
    text.swap(out);
  }

 private:
  std::string pattern_;
  std::string content_;
};

class ReplaceRegexStep final : public NormalizerStep {
 public:
  ReplaceRegexStep(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Apply(std::string& text) const override {
    std::vector<ByteSpan> matches;
    pattern_->FindAll(text, matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size());
    size_t last = 0;
    for (const ByteSpan& m : matches) {
      out.append(text, last, m.begin - last);
      out.append(content_);
      last = m.end;
    }
    out.append(text, last, std::string::npos);
    text.swap(out);
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

#if defined(KVSERVE_TOKENIZER_HAVE_ICU)
class UnicodeStep final : public NormalizerStep {
 public:
  explicit UnicodeStep(const icu::Normalizer2* norm) : norm_(norm) {}
  void Apply(std::string& text) const override {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString src = icu::UnicodeString::fromUTF8(text);
    // Most text is already normalized; the quick check avoids the rewrite.
    if (norm_->isNormalized(src, status) && U_SUCCESS(status)) return;
    status = U_ZERO_ERROR;
    const icu::UnicodeString dst = norm_->normalize(src, status);
    if (U_FAILURE(status)) return;  // leave the text as it is rather than lose it
    text.clear();
    dst.toUTF8String(text);
  }

 private:
  const icu::Normalizer2* norm_;  // owned by ICU, lives for the process
};
#endif

}  // namespace

std::unique_ptr<NormalizerStep> Normalizer::Prepend(std::string prefix) {
  return std::make_unique<PrependStep>(std::move(prefix));
}

std::unique_ptr<NormalizerStep> Normalizer::ReplaceLiteral(std::string pattern,
                                                           std::string content) {
  return std::make_unique<ReplaceLiteralStep>(std::move(pattern), std::move(content));
}

std::unique_ptr<NormalizerStep> Normalizer::ReplaceRegex(std::unique_ptr<Regex> pattern,
                                                         std::string content) {
  KVS_CHECK(pattern != nullptr);
  return std::make_unique<ReplaceRegexStep>(std::move(pattern), std::move(content));
}

absl::StatusOr<std::unique_ptr<NormalizerStep>> Normalizer::Unicode(UnicodeForm form) {
#if defined(KVSERVE_TOKENIZER_HAVE_ICU)
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = nullptr;
  switch (form) {
    case UnicodeForm::kNfc:
      norm = icu::Normalizer2::getNFCInstance(status);
      break;
    case UnicodeForm::kNfd:
      norm = icu::Normalizer2::getNFDInstance(status);
      break;
    case UnicodeForm::kNfkc:
      norm = icu::Normalizer2::getNFKCInstance(status);
      break;
    case UnicodeForm::kNfkd:
      norm = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || norm == nullptr) {
    return absl::InternalError(absl::StrCat("ICU normalizer unavailable: ", u_errorName(status)));
  }
  return std::unique_ptr<NormalizerStep>(std::make_unique<UnicodeStep>(norm));
#else
  (void)form;
  return absl::UnimplementedError(
      "Unicode normalizers (NFC/NFD/NFKC/NFKD) need ICU; rebuild with libicu-dev installed");
#endif
}

void Normalizer::Apply(std::string& text) const {
  for (const auto& step : steps_) step->Apply(text);
}

}  // namespace kvserve::tokenizer
