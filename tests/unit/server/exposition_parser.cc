#include "tests/unit/server/exposition_parser.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace kvserve::server::testing {
namespace {

bool ParseLabels(std::string_view s, std::map<std::string, std::string>& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t eq = s.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= s.size() || s[eq + 1] != '"') return false;
    std::string key(s.substr(i, eq - i));
    std::string value;
    size_t j = eq + 2;
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) {
        ++j;
        value.push_back(s[j] == 'n' ? '\n' : s[j]);
      } else {
        value.push_back(s[j]);
      }
    }
    if (j >= s.size()) return false;
    out[key] = value;
    i = j + 1;
    if (i < s.size() && s[i] == ',') ++i;
  }
  return true;
}

double ParseValue(const std::string& v, bool* ok) {
  *ok = true;
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  *ok = end != nullptr && *end == '\0' && !v.empty();
  return d;
}

}  // namespace

std::optional<Exposition> Exposition::Parse(std::string_view text, std::string* error) {
  Exposition e;
  std::istringstream in{std::string(text)};
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream ls(line.substr(7));
      std::string name, type;
      ls >> name >> type;
      e.types_[name] = type;
      continue;
    }
    if (line[0] == '#') continue;
    Sample s;
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) {
      *error = line;
      return std::nullopt;
    }
    s.name = line.substr(0, name_end);
    size_t rest = name_end;
    if (line[name_end] == '{') {
      size_t close = line.rfind('}');
      if (close == std::string::npos || close < name_end ||
          !ParseLabels(std::string_view(line).substr(name_end + 1, close - name_end - 1), s.labels)) {
        *error = line;
        return std::nullopt;
      }
      rest = close + 1;
    }
    std::istringstream vs(line.substr(rest));
    std::string value;
    vs >> value;  // an optional timestamp may follow
    bool ok = false;
    s.value = ParseValue(value, &ok);
    if (!ok) {
      *error = line;
      return std::nullopt;
    }
    e.samples_.push_back(std::move(s));
  }
  return e;
}

std::vector<Sample> Exposition::Find(const std::string& name, const std::map<std::string, std::string>& labels) const {
  std::vector<Sample> out;
  for (const auto& s : samples_) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = s.labels.find(k);
      if (it == s.labels.end() || it->second != v) match = false;
    }
    if (match) out.push_back(s);
  }
  return out;
}

std::optional<double> Exposition::Sum(const std::string& name, const std::map<std::string, std::string>& labels) const {
  auto found = Find(name, labels);
  if (found.empty()) return std::nullopt;
  double sum = 0.0;
  for (const auto& s : found) sum += s.value;
  return sum;
}

std::string Exposition::Type(const std::string& family) const {
  auto it = types_.find(family);
  return it == types_.end() ? "" : it->second;
}

}  // namespace kvserve::server::testing
