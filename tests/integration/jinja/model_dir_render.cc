// Loads a model directory's tokenizer and chat template the way the daemon does
// (model.chat_template=auto) and renders one conversation given as JSON messages.
//   model_dir_render MODEL_DIR MESSAGES_JSON ADD_GENERATION_PROMPT(0|1)
// Prints the rendered prompt on stdout; exits 1 with the error on stderr.
#include <fstream>
#include <iostream>
#include <sstream>

#include "nlohmann/json.hpp"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: model_dir_render MODEL_DIR MESSAGES_JSON 0|1\n";
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
  std::vector<kvserve::tokenizer::ChatMessage> messages;
  for (const auto& m : nlohmann::json::parse(buf.str()))
    messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  auto text = (*tmpl)->Render(messages, std::string(argv[3]) == "1");
  if (!text.ok()) {
    std::cerr << text.status() << "\n";
    return 1;
  }
  std::cout << *text;
  return 0;
}
