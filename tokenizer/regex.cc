#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/check.h"

namespace kvserve::tokenizer {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

Regex::Regex(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Regex::~Regex() = default;

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // UCP: \s, \w, \d and POSIX classes follow Unicode properties, as in the Oniguruma/Rust
  // engines the Hugging Face patterns were written for.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat("invalid regex \"", std::string(pattern),
                                                   "\" at offset ", error_offset, ": ",
                                                   reinterpret_cast<const char*>(message)));
  }
  auto impl = std::make_unique<Impl>();
  impl->code = code;
  // JIT is an optimisation only: a build of PCRE2 without it still works through the
  // interpreter.
  impl->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<Regex>(new Regex(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  // \Q...\E quotes everything except a literal "\E", which is spliced in escaped.
  std::string pattern = "\\Q";
  for (size_t i = 0; i < literal.size(); ++i) {
    if (literal.compare(i, 2, "\\E") == 0) {
      pattern += "\\E\\\\E\\Q";
      ++i;
    } else {
      pattern.push_back(literal[i]);
    }
  }
  pattern += "\\E";
  return Compile(pattern);
}

void Regex::FindAll(std::string_view text, std::vector<ByteSpan>& out) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  KVS_CHECK(md != nullptr, "pcre2_match_data_create_from_pattern: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  uint32_t extra_options = 0;
  while (offset <= text.size()) {
    const uint32_t options = PCRE2_NO_UTF_CHECK | extra_options;
    int rc = pcre2_match(impl_->code, subject, text.size(), offset, options, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The JIT's default 32 KiB stack is too small for a pathological input (a huge run
      // matched by a backtracking group); the interpreter keeps its frames on the heap.
      rc = pcre2_match(impl_->code, subject, text.size(), offset, options | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) {
      if (extra_options == 0) break;
      // No non-empty match at `offset`: step over one character and search on.
      extra_options = 0;
      ++offset;
      while (offset < text.size() && (static_cast<uint8_t>(text[offset]) & 0xC0) == 0x80) ++offset;
      continue;
    }
    // Other errors (match or heap limits) end the search: the rest of the text stays one piece,
    // which is still a correct (if coarser) pre-tokenization.
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (end == begin) {
      extra_options = PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED;
      offset = begin;
      continue;
    }
    out.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(end)});
    extra_options = 0;
    offset = end;
  }
  pcre2_match_data_free(md);
}

}  // namespace kvserve::tokenizer
