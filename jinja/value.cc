#include "jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/container/flat_hash_set.h"

namespace kvserve::jinja {

const Value* Object::Find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

Value* Object::Find(std::string_view key) {
  for (auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void Object::Set(std::string key, Value value) {
  if (Value* v = Find(key)) {
    *v = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::Get(std::string_view name, size_t index) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return index < positional.size() ? &positional[index] : nullptr;
}

Value::Kind Value::kind() const { return static_cast<Kind>(data_.index()); }

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return std::get<double>(data_) != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kArray: return !array().empty();
    case Kind::kObject: return !object().items.empty();
    case Kind::kCallable: return true;
  }
  return false;
}

const char* Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "dict";
    case Kind::kCallable: return "callable";
  }
  return "?";
}

std::string FormatFloat(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

void Value::AppendStr(std::string& out) const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return;
    case Kind::kBool: out += as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(as_int()); return;
    case Kind::kFloat: out += FormatFloat(std::get<double>(data_)); return;
    case Kind::kString: out += as_string(); return;
    case Kind::kArray:
    case Kind::kObject: AppendJson(*this, JsonOptions{}, out); return;
    case Kind::kCallable: out += "<function>"; return;
  }
}

std::string Value::Str() const {
  if (is_string()) return as_string();
  std::string out;
  AppendStr(out);
  return out;
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_number() == b.as_number();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.as_bool() == b.as_bool();
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kArray: {
      const Array& x = a.array();
      const Array& y = b.array();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!Equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kObject: {
      const Object& x = a.object();
      const Object& y = b.object();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* w = y.Find(k);
        if (w == nullptr || !Equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::kCallable: return &a.callable() == &b.callable();
    default: return false;
  }
}

namespace {

void AppendJsonString(std::string_view s, std::string& out) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void Newline(const JsonOptions& opts, int depth, std::string& out) {
  out += '\n';
  out.append(static_cast<size_t>(opts.indent) * static_cast<size_t>(depth), ' ');
}

}  // namespace

void AppendJson(const Value& v, const JsonOptions& opts, std::string& out, int depth) {
  const bool pretty = opts.indent >= 0;
  const std::string_view item_sep =
      !opts.item_separator.empty() ? std::string_view(opts.item_separator) : (pretty ? "," : ", ");
  const std::string_view key_sep =
      !opts.key_separator.empty() ? std::string_view(opts.key_separator) : ": ";
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
    case Value::Kind::kCallable: out += "null"; return;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat: v.AppendStr(out); return;
    case Value::Kind::kString: AppendJsonString(v.as_string(), out); return;
    case Value::Kind::kArray: {
      const Array& a = v.array();
      out += '[';
      for (size_t i = 0; i < a.size(); ++i) {
        if (i > 0) out += item_sep;
        if (pretty) Newline(opts, depth + 1, out);
        AppendJson(a[i], opts, out, depth + 1);
      }
      if (pretty && !a.empty()) Newline(opts, depth, out);
      out += ']';
      return;
    }
    case Value::Kind::kObject: {
      const Object& o = v.object();
      std::vector<const std::pair<std::string, Value>*> items;
      items.reserve(o.items.size());
      for (const auto& kv : o.items) items.push_back(&kv);
      if (opts.sort_keys)
        std::sort(items.begin(), items.end(), [](auto* x, auto* y) { return x->first < y->first; });
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (pretty) Newline(opts, depth + 1, out);
        AppendJsonString(items[i]->first, out);
        out += key_sep;
        AppendJson(items[i]->second, opts, out, depth + 1);
      }
      if (pretty && !items.empty()) Newline(opts, depth, out);
      out += '}';
      return;
    }
  }
}

const void* Value::storage() const {
  if (is_array()) return &array();
  if (is_object()) return &object();
  return nullptr;
}

bool Reaches(const Value& from, const Value& container) {
  const void* target = container.storage();
  if (target == nullptr) return false;
  std::vector<const Value*> stack{&from};
  absl::flat_hash_set<const void*> seen;
  while (!stack.empty()) {
    const Value* cur = stack.back();
    stack.pop_back();
    const void* id = cur->storage();
    if (id == nullptr || !seen.insert(id).second) continue;
    if (id == target) return true;
    if (cur->is_array()) {
      for (const Value& x : cur->array()) stack.push_back(&x);
    } else {
      for (const auto& [k, x] : cur->object().items) stack.push_back(&x);
    }
  }
  return false;
}

}  // namespace kvserve::jinja
