// Loads a model directory's tokenizer and chat template the way the daemon does
// (model.chat_template=auto) and renders a batch of conversations.
//   model_dir_render MODEL_DIR CASES_JSON OUT_JSON
// CASES_JSON: [{"messages": [{"role", "content"}...], "add_generation_prompt": bool}, ...]
// OUT_JSON:   [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}, ...]
// Exits 1 when the directory does not load.
#include <fstream>
#include <iostream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: model_dir_render MODEL_DIR CASES_JSON OUT_JSON\n";
    return 2;
  }
  auto tok = kvserve::tokenizer::LoadTokenizerDir(argv[1]);
  if (!tok.ok()) {
    std::cerr << tok.status() << "\n";
    return 1;
  }
  auto tmpl = kvserve::tokenizer::SelectChatTemplate("auto", (*tok)->chat_template(),
                                                     {(*tok)->bos_token(), (*tok)->eos_token()});
  if (!tmpl.ok()) {
    std::cerr << tmpl.status() << "\n";
    return 1;
  }
  std::ifstream in(argv[2]);
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : nlohmann::json::parse(buf.str())) {
    std::vector<kvserve::tokenizer::ChatMessage> messages;
    for (const auto& m : c["messages"])
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    auto text = (*tmpl)->Render(messages, c["add_generation_prompt"].get<bool>());
    nlohmann::json r;
    r["ok"] = text.ok();
    if (text.ok()) r["text"] = *text;
    else r["error"] = std::string(text.status().message());
    out.push_back(std::move(r));
  }
  std::ofstream(argv[3]) << out.dump();
  return 0;
}
