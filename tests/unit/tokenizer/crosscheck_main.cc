// tokenizer_crosscheck <tokenizer.json | model dir> <cases.json>
//
// Encodes each case's text (no special tokens added) and compares with the ids an independent
// implementation produced. cases.json: [{"text": "...", "ids": [1, 2, ...]}, ...].
// Prints the first mismatches and a summary; exit status 0 only when every case matches and
// decodes back to its text.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using kvserve::tokenizer::Tokenizer;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <tokenizer.json|model dir> <cases.json>\n", argv[0]);
    return 2;
  }
  const std::string source = argv[1];
  auto tok = std::filesystem::is_directory(source) ? kvserve::tokenizer::LoadTokenizerDir(source)
                                                   : Tokenizer::FromFile(source);
  if (!tok.ok()) {
    std::fprintf(stderr, "load failed: %s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::ifstream in(argv[2], std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto cases = nlohmann::json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (!cases.is_array()) {
    std::fprintf(stderr, "%s: expected a JSON array of {text, ids}\n", argv[2]);
    return 2;
  }
  size_t ok = 0, bad = 0, bad_decode = 0, tokens = 0, bytes = 0;
  double encode_ms = 0;
  for (const auto& c : cases) {
    const std::string text = c.at("text").get<std::string>();
    const auto want = c.at("ids").get<std::vector<int32_t>>();
    const auto t0 = std::chrono::steady_clock::now();
    const auto got = (*tok)->encode(text, /*add_special=*/false);
    encode_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    tokens += want.size();
    bytes += text.size();
    if (got == want) {
      ++ok;
    } else if (++bad <= 5) {
      std::printf("MISMATCH text=%s\n  want:", nlohmann::json(text).dump().substr(0, 200).c_str());
      for (size_t i = 0; i < want.size() && i < 30; ++i) std::printf(" %d", want[i]);
      std::printf("\n  got: ");
      for (size_t i = 0; i < got.size() && i < 30; ++i) std::printf(" %d", got[i]);
      std::printf("\n");
    }
    if ((*tok)->decode(got, /*skip_special=*/false) != text) ++bad_decode;
  }
  std::printf(
      "%zu/%zu cases match (%zu tokens, %zu bytes, encode %.1f ms); %zu do not decode back\n", ok,
      ok + bad, tokens, bytes, encode_ms, bad_decode);
  return bad == 0 && bad_decode == 0 ? 0 : 1;
}
