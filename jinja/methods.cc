// Methods of str, list and dict, plus the strip and iteration helpers they share with filters.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/limits.h"

namespace kvserve::jinja {
namespace {

// Length of the whitespace code point at s[i] (Python's str.isspace), 0 if none.
size_t SpaceAt(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned c = b(i);
  if ((c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20)) return 1;
  if (c == 0xC2 && (b(i + 1) == 0x85 || b(i + 1) == 0xA0)) return 2;
  if (c == 0xE1 && b(i + 1) == 0x9A && b(i + 2) == 0x80) return 3;  // U+1680
  if (c == 0xE2 && b(i + 1) == 0x80) {
    const unsigned d = b(i + 2);
    if ((d >= 0x80 && d <= 0x8A) || d == 0xA8 || d == 0xA9 || d == 0xAF) return 3;
  }
  if (c == 0xE2 && b(i + 1) == 0x81 && b(i + 2) == 0x9F) return 3;  // U+205F
  if (c == 0xE3 && b(i + 1) == 0x80 && b(i + 2) == 0x80) return 3;  // U+3000
  return 0;
}

size_t CharLen(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c >> 5) == 0x6) return 2;
  if ((c >> 4) == 0xE) return 3;
  if ((c >> 3) == 0x1E) return 4;
  return 1;
}

const std::string* StrArg(const CallArgs& args, std::string_view name, size_t i) {
  const Value* v = args.Get(name, i);
  if (v == nullptr || v->is_none() || v->is_undefined()) return nullptr;
  if (!v->is_string()) Throw(absl::StrCat("argument '", std::string(name), "' must be a string"));
  return &v->as_string();
}

Value Split(const std::string& s, const std::string* sep, int64_t maxsplit) {
  Array out;
  if (sep == nullptr) {  // runs of whitespace, no empty strings
    size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && SpaceAt(s, i)) i += SpaceAt(s, i);
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.emplace_back(PyStrip(s.substr(i), nullptr, false, true));
        return Value(std::move(out));
      }
      size_t j = i;
      while (j < s.size() && !SpaceAt(s, j)) ++j;
      out.emplace_back(s.substr(i, j - i));
      i = j;
    }
    return Value(std::move(out));
  }
  if (sep->empty()) Throw("empty separator");
  size_t start = 0;
  while (true) {
    const size_t at = s.find(*sep, start);
    if (at == std::string::npos || (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(start));
      return Value(std::move(out));
    }
    out.emplace_back(s.substr(start, at - start));
    start = at + sep->size();
  }
}

std::string Title(std::string_view s) {
  std::string out(s);
  bool prev_alpha = false;
  for (char& c : out) {
    const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
    if (alpha) c = static_cast<char>(prev_alpha ? std::tolower(c) : std::toupper(c));
    prev_alpha = alpha;
  }
  return out;
}

std::optional<Value> StringMethod(const std::string& s, std::string_view name, const CallArgs& a) {
  if (name == "strip") return Value(PyStrip(s, StrArg(a, "chars", 0), true, true));
  if (name == "lstrip") return Value(PyStrip(s, StrArg(a, "chars", 0), true, false));
  if (name == "rstrip") return Value(PyStrip(s, StrArg(a, "chars", 0), false, true));
  if (name == "split") {
    const Value* m = a.Get("maxsplit", 1);
    return Split(s, StrArg(a, "sep", 0), m && m->is_int() ? m->as_int() : -1);
  }
  if (name == "startswith" || name == "endswith") {
    const Value* p = a.Get("prefix", 0);
    if (p == nullptr) Throw(absl::StrCat(std::string(name), "() needs an argument"));
    Array options = p->is_array() ? p->array() : Array{*p};
    for (const Value& o : options) {
      if (!o.is_string()) Throw(absl::StrCat(std::string(name), "() needs a string"));
      const std::string& x = o.as_string();
      if (x.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                               : s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(true);
    }
    return Value(false);
  }
  if (name == "upper" || name == "lower") {
    std::string out = s;
    for (char& c : out)
      c = static_cast<char>(name == "upper" ? std::toupper(static_cast<unsigned char>(c))
                                            : std::tolower(static_cast<unsigned char>(c)));
    return Value(std::move(out));
  }
  if (name == "title") return Value(Title(s));
  if (name == "capitalize") {
    std::string out = s;
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = static_cast<char>(i == 0 ? std::toupper(static_cast<unsigned char>(out[i]))
                                        : std::tolower(static_cast<unsigned char>(out[i])));
    return Value(std::move(out));
  }
  if (name == "replace") {
    const std::string* from = StrArg(a, "old", 0);
    const std::string* to = StrArg(a, "new", 1);
    if (from == nullptr || to == nullptr) Throw("replace() needs two strings");
    const Value* count_arg = a.Get("count", 2);
    int64_t count = count_arg && count_arg->is_int() ? count_arg->as_int() : -1;
    std::string out;
    size_t start = 0;
    if (from->empty()) return Value(s);
    while (count != 0) {
      const size_t at = s.find(*from, start);
      if (at == std::string::npos) break;
      out.append(s, start, at - start);
      out += *to;
      CheckStringSize(out.size(), "the result of replace()");
      start = at + from->size();
      --count;
    }
    out.append(s, start);
    return Value(std::move(out));
  }
  if (name == "find") {
    const std::string* x = StrArg(a, "sub", 0);
    if (x == nullptr) Throw("find() needs a string");
    const size_t at = s.find(*x);
    return Value(at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(at));
  }
  if (name == "count") {
    const std::string* x = StrArg(a, "sub", 0);
    if (x == nullptr || x->empty()) Throw("count() needs a non-empty string");
    int64_t n = 0;
    for (size_t at = s.find(*x); at != std::string::npos; at = s.find(*x, at + x->size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = a.Get("iterable", 0);
    if (items == nullptr) Throw("join() needs a list");
    std::string out;
    bool first = true;
    for (const Value& v : Iterate(*items)) {
      if (!first) out += s;
      first = false;
      v.AppendStr(out);
      CheckStringSize(out.size(), "the result of join()");
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    Array out;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        out.emplace_back(s.substr(start, i - start));
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        start = i + 1;
      }
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    return Value(std::move(out));
  }
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& d, std::string_view name, const CallArgs& a) {
  Object& o = d.object();
  if (name == "items") {
    Array out;
    for (const auto& [k, v] : o.items) out.emplace_back(Array{Value(k), v});
    return Value(std::move(out));
  }
  if (name == "keys" || name == "values") {
    Array out;
    for (const auto& [k, v] : o.items) out.push_back(name == "keys" ? Value(k) : v);
    return Value(std::move(out));
  }
  if (name == "get") {
    const Value* key = a.Get("key", 0);
    if (key == nullptr) Throw("get() needs a key");
    const Value* v = key->is_string() ? o.Find(key->as_string()) : nullptr;
    if (v != nullptr) return *v;
    const Value* dflt = a.Get("default", 1);
    return dflt ? *dflt : Value::None();
  }
  if (name == "update") {
    const Value* other = a.Get("other", 0);
    for (const auto& [k, v] : a.keyword)
      if (Reaches(v, d)) Throw("update(): the dict would contain itself");
    if (other && other->is_object() && other->storage() != d.storage())
      for (const auto& [k, v] : other->object().items)
        if (Reaches(v, d)) Throw("update(): the dict would contain itself");
    if (other && other->is_object())
      for (const auto& [k, v] : other->object().items) o.Set(k, v);
    for (const auto& [k, v] : a.keyword) o.Set(k, v);
    return Value::None();
  }
  return std::nullopt;
}

std::optional<Value> ListMethod(const Value& l, std::string_view name, const CallArgs& a) {
  Array& arr = l.array();
  if (name == "append") {
    if (a.positional.empty()) Throw("append() needs an argument");
    if (Reaches(a.positional[0], l)) Throw("append(): the list would contain itself");
    arr.push_back(a.positional[0]);
    return Value::None();
  }
  if (name == "pop") {
    if (arr.empty()) Throw("pop from empty list");
    int64_t i = a.positional.empty() ? -1 : a.positional[0].as_int();
    if (i < 0) i += static_cast<int64_t>(arr.size());
    if (i < 0 || i >= static_cast<int64_t>(arr.size())) Throw("pop index out of range");
    Value v = arr[static_cast<size_t>(i)];
    arr.erase(arr.begin() + i);
    return v;
  }
  if (name == "index") {
    if (a.positional.empty()) Throw("index() needs an argument");
    for (size_t i = 0; i < arr.size(); ++i)
      if (Equal(arr[i], a.positional[0])) return Value(static_cast<int64_t>(i));
    Throw("index(): value is not in the list");
  }
  return std::nullopt;
}

}  // namespace

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  size_t begin = 0;
  size_t end = s.size();
  if (chars != nullptr) {
    if (left) while (begin < end && chars->find(s[begin]) != std::string::npos) ++begin;
    if (right) while (end > begin && chars->find(s[end - 1]) != std::string::npos) --end;
    return std::string(s.substr(begin, end - begin));
  }
  if (left) while (begin < end && SpaceAt(s, begin)) begin += SpaceAt(s, begin);
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      if (SpaceAt(s, start) != end - start) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

Array Iterate(const Value& v) {
  if (v.is_array()) return v.array();
  if (v.is_object()) {
    Array keys;
    for (const auto& [k, unused] : v.object().items) keys.emplace_back(k);
    return keys;
  }
  if (v.is_string()) {
    Array chars;
    const std::string& s = v.as_string();
    for (size_t i = 0; i < s.size();) {
      const size_t n = std::min(CharLen(static_cast<unsigned char>(s[i])), s.size() - i);
      chars.emplace_back(s.substr(i, n));
      i += n;
    }
    return chars;
  }
  if (v.is_undefined() || v.is_none()) return {};
  Throw(absl::StrCat("'", v.TypeName(), "' object is not iterable"));
}

std::optional<Value> CallMethod(const Value& obj, std::string_view name, const CallArgs& args) {
  if (obj.is_string()) return StringMethod(obj.as_string(), name, args);
  if (obj.is_object()) return DictMethod(obj, name, args);
  if (obj.is_array()) return ListMethod(obj, name, args);
  return std::nullopt;
}

}  // namespace kvserve::jinja
