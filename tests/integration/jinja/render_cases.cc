// Renders a batch of (template, context) cases with kvserve::jinja for the conformance test.
//   render_cases CASES_JSON OUT_JSON
// CASES_JSON: [{"template": "...", "context": {...}}, ...]
// OUT_JSON:   [{"ok": true, "text": "..."} | {"ok": false, "error": "..."}, ...]
#include <fstream>
#include <iostream>
#include <sstream>

#include "jinja/template.h"
#include "nlohmann/json.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: render_cases CASES_JSON OUT_JSON\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream buf;
  buf << in.rdbuf();
  const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(buf.str());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : cases) {
    nlohmann::json r;
    auto tmpl = kvserve::jinja::Template::Compile(c["template"].get<std::string>());
    auto ctx = kvserve::jinja::ValueFromJson(c["context"].dump());
    if (!tmpl.ok() || !ctx.ok()) {
      r["ok"] = false;
      r["error"] = std::string(!tmpl.ok() ? tmpl.status().message() : ctx.status().message());
    } else {
      auto text = tmpl->Render(ctx->object());
      r["ok"] = text.ok();
      if (text.ok()) r["text"] = *text;
      else r["error"] = std::string(text.status().message());
    }
    out.push_back(std::move(r));
  }
  std::ofstream(argv[2]) << out.dump();
  return 0;
}
