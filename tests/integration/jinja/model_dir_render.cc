// Loads a model directory's tokenizer and chat template the way the daemon does
// (model.chat_template=auto) and renders OpenAI chat request bodies through the daemon's own
// path: the request parser (messages, tools, tool_calls, tool results, add_generation_prompt,
// continue_final_message, chat_template_kwargs) and the codec's chat rendering.
//   model_dir_render MODEL_DIR CASES_JSON OUT_JSON
// CASES_JSON: [<chat completion request body>, ...]
// OUT_JSON:   [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}, ...]
// Exits 1 when the directory does not load.
#include <fstream>
#include <iostream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "server/core/tokenizer_text_codec.h"
#include "server/openai/openai_request_parser.h"

int main(int argc, char** argv) {
  using namespace kvserve;
  if (argc != 4) {
    std::cerr << "usage: model_dir_render MODEL_DIR CASES_JSON OUT_JSON\n";
    return 2;
  }
  auto codec = server::TokenizerTextCodec::Load(argv[1], "auto");
  if (!codec.ok()) {
    std::cerr << codec.status() << "\n";
    return 1;
  }
  std::ifstream in(argv[2]);
  std::stringstream buf;
  buf << in.rdbuf();
  nlohmann::json out = nlohmann::json::array();
  for (const auto& body : nlohmann::ordered_json::parse(buf.str())) {  // key order kept
    nlohmann::json r;
    auto request = server::ParseChatRequest(body.dump());
    absl::StatusOr<server::ChatPrompt> prompt =
        request.ok() ? (*codec)->EncodeChat(request->request.messages, request->request.chat.prompt)
                     : absl::StatusOr<server::ChatPrompt>(request.status());
    r["ok"] = prompt.ok();
    if (prompt.ok()) {
      r["text"] = prompt->text;
    } else {
      r["error"] = std::string(prompt.status().message());
    }
    out.push_back(std::move(r));
  }
  std::ofstream(argv[3]) << out.dump();
  return 0;
}
