// The values a chat template computes with: Jinja's (Python's) undefined, None, bool, int,
// float, str, list and dict, plus callables (macros, bound globals). Lists and dicts are shared
// by reference, as in Python, so `namespace()` attributes and `list.append` mutate in place.
// Dicts keep insertion order (Python 3.7+; `tojson` and `items()` depend on it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kvserve::jinja {

class Value;
using Array = std::vector<Value>;

struct Object {
  std::vector<std::pair<std::string, Value>> items;
  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  void Set(std::string key, Value value);
};

// Call arguments: positional then keyword, as written at the call site.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The argument named `name`, else positional `index` (if any), else nullptr.
  const Value* Get(std::string_view name, size_t index) const;
};
using Callable = std::function<Value(const CallArgs&)>;

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kArray, kObject, kCallable };

  Value() = default;  // undefined
  static Value None() { return Value(Kind::kNone); }
  Value(bool b) : data_(b) {}                              // NOLINT(runtime/explicit)
  Value(int v) : data_(static_cast<int64_t>(v)) {}         // NOLINT
  Value(int64_t v) : data_(v) {}                           // NOLINT
  Value(double v) : data_(v) {}                            // NOLINT
  Value(std::string s) : data_(std::move(s)) {}            // NOLINT
  Value(const char* s) : data_(std::string(s)) {}          // NOLINT
  Value(Array a) : data_(std::make_shared<Array>(std::move(a))) {}     // NOLINT
  Value(Object o) : data_(std::make_shared<Object>(std::move(o))) {}   // NOLINT
  Value(Callable f) : data_(std::make_shared<Callable>(std::move(f))) {}  // NOLINT

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return std::holds_alternative<bool>(data_); }
  bool is_int() const { return std::holds_alternative<int64_t>(data_); }
  bool is_float() const { return std::holds_alternative<double>(data_); }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return std::holds_alternative<std::string>(data_); }
  bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(data_); }
  bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(data_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(data_); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_number() const { return is_int() ? static_cast<double>(as_int()) : std::get<double>(data_); }
  const std::string& as_string() const { return std::get<std::string>(data_); }
  Array& array() const { return *std::get<std::shared_ptr<Array>>(data_); }
  Object& object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  const Callable& callable() const { return *std::get<std::shared_ptr<Callable>>(data_); }

  bool Truthy() const;
  // Text as {{ value }} prints it (the reference renderer's rules: undefined and none print
  // nothing, bools print lowercase, lists and dicts print as JSON with Python's separators).
  std::string Str() const;
  void AppendStr(std::string& out) const;
  const char* TypeName() const;
  // Identity of a list's or dict's shared storage (nullptr for other kinds).
  const void* storage() const;

 private:
  explicit Value(Kind k) : data_(k == Kind::kNone ? Data(nullptr) : Data()) {}
  using Data = std::variant<std::monostate, std::nullptr_t, bool, int64_t, double, std::string,
                            std::shared_ptr<Array>, std::shared_ptr<Object>,
                            std::shared_ptr<Callable>>;
  Data data_;
};

// True when `from` is the list/dict `container` or holds it at any depth (by identity).
// Inserting such a value into `container` would make it contain itself: printing it would
// never end and its shared storage would never be freed, so the interpreter refuses.
bool Reaches(const Value& from, const Value& container);

// Python ==: deep for lists and dicts, 1 == 1.0.
bool Equal(const Value& a, const Value& b);

// Python's float repr (shortest round trip, "2.0" for integral values).
std::string FormatFloat(double v);

struct JsonOptions {
  int indent = -1;  // <0: one line with ", " and ": " separators (json.dumps's default)
  std::string item_separator;  // empty: the default for the indent
  std::string key_separator;
  bool sort_keys = false;
};
// json.dumps(value, ensure_ascii=False) as `tojson` writes it. Undefined writes null.
void AppendJson(const Value& v, const JsonOptions& opts, std::string& out, int depth = 0);

}  // namespace kvserve::jinja
