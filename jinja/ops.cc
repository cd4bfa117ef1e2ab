#include "jinja/ops.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/limits.h"

namespace kvserve::jinja {
namespace {

[[noreturn]] void TypeError(std::string_view op, const Value& a, const Value& b) {
  Throw(absl::StrCat("unsupported operand types for ", std::string(op), ": ", a.TypeName(), " and ",
                     b.TypeName()));
}

// Python ints are unbounded; ours are int64, so a result that does not fit is an error
// rather than undefined behaviour.
[[noreturn]] void Overflow(std::string_view op) {
  Throw(absl::StrCat("integer overflow in '", std::string(op), "' (template integers are 64-bit)"));
}

int64_t IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {  // square-and-multiply: at most 63 rounds
    if ((exp & 1) && __builtin_mul_overflow(result, base, &result)) Overflow("**");
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) Overflow("**");
  }
  return result;
}

int64_t FloorDiv(int64_t a, int64_t b) {
  if (a == INT64_MIN && b == -1) Overflow("//");
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

bool IsAscii(const std::string& s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

int64_t NormalizeIndex(int64_t i, size_t size) {
  return i < 0 ? i + static_cast<int64_t>(size) : i;
}

}  // namespace

Value BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Value(Equal(a, b));
  if (op == "!=") return Value(!Equal(a, b));
  if (op == "<") return Value(Less(a, b));
  if (op == ">") return Value(Less(b, a));
  if (op == "<=") return Value(!Less(b, a));
  if (op == ">=") return Value(!Less(a, b));
  if (op == "in") return Value(Contains(b, a));
  if (op == "not in") return Value(!Contains(b, a));
  if (op == "~") {
    std::string x = a.Str();
    const std::string y = b.Str();
    CheckStringSize(uint64_t{x.size()} + y.size(), "the result of '~'");
    return Value(std::move(x) + y);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      CheckStringSize(uint64_t{a.as_string().size()} + b.as_string().size(), "the result of '+'");
      return Value(a.as_string() + b.as_string());
    }
    // The reference renderer concatenates a string with a number or bool (printed as {{ }}
    // prints it). A list or dict is an error, as in Python (the reference's JavaScript
    // coercion of lists is not reproduced); so are none and undefined.
    const auto printable = [](const Value& v) { return v.is_string() || v.is_number() || v.is_bool(); };
    if ((a.is_string() || b.is_string()) && printable(a) && printable(b)) {
      const std::string x = a.Str();
      const std::string y = b.Str();
      CheckStringSize(uint64_t{x.size()} + y.size(), "the result of '+'");
      return Value(x + y);
    }
    if (a.is_array() && b.is_array()) {
      if (a.array().size() + b.array().size() > static_cast<size_t>(kMaxRangeItems))
        Throw(absl::StrCat("a list of more than ", kMaxRangeItems, " items (template limit)"));
      Array out = a.array();
      out.insert(out.end(), b.array().begin(), b.array().end());
      return Value(std::move(out));
    }
  }
  if (op == "*" && a.is_string() && b.is_int()) {
    std::string out;
    const int64_t times = std::max<int64_t>(b.as_int(), 0);
    if (!a.as_string().empty() && times > 0) {
      if (static_cast<uint64_t>(times) > kMaxStringBytes / a.as_string().size())
        CheckStringSize(kMaxStringBytes + 1, "the result of '*'");
      out.reserve(a.as_string().size() * static_cast<size_t>(times));
    }
    for (int64_t i = 0; i < times && !a.as_string().empty(); ++i) out += a.as_string();
    return Value(std::move(out));
  }
  // Numbers (bools count as 0/1, as in Python).
  auto num = [](const Value& v) -> std::optional<Value> {
    if (v.is_number()) return v;
    if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
    return std::nullopt;
  };
  const auto x = num(a);
  const auto y = num(b);
  if (!x || !y) TypeError(op, a, b);
  const bool ints = x->is_int() && y->is_int();
  if (op == "/") {
    if (y->as_number() == 0) Throw("division by zero");
    return Value(x->as_number() / y->as_number());
  }
  if (ints) {
    const int64_t i = x->as_int();
    const int64_t j = y->as_int();
    int64_t r = 0;
    if (op == "+") {
      if (__builtin_add_overflow(i, j, &r)) Overflow(op);
      return Value(r);
    }
    if (op == "-") {
      if (__builtin_sub_overflow(i, j, &r)) Overflow(op);
      return Value(r);
    }
    if (op == "*") {
      if (__builtin_mul_overflow(i, j, &r)) Overflow(op);
      return Value(r);
    }
    if (op == "//" || op == "%") {
      if (j == 0) Throw("division by zero");
      if (i == INT64_MIN && j == -1) {
        if (op == "//") Overflow(op);
        return Value(int64_t{0});
      }
      const int64_t q = FloorDiv(i, j);
      return op == "//" ? Value(q) : Value(i - q * j);  // |q * j| <= |i|: no overflow
    }
    if (op == "**") {
      if (j < 0) return Value(std::pow(static_cast<double>(i), static_cast<double>(j)));
      return Value(IntPow(i, j));
    }
  }
  const double p = x->as_number();
  const double q = y->as_number();
  if (op == "+") return Value(p + q);
  if (op == "-") return Value(p - q);
  if (op == "*") return Value(p * q);
  if (op == "**") return Value(std::pow(p, q));
  if (op == "//" || op == "%") {
    if (q == 0) Throw("division by zero");
    const double fq = std::floor(p / q);
    return op == "//" ? Value(fq) : Value(p - fq * q);
  }
  TypeError(op, a, b);
}

bool Less(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    auto n = [](const Value& v) { return v.is_bool() ? (v.as_bool() ? 1.0 : 0.0) : v.as_number(); };
    return n(a) < n(b);
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_array() && b.is_array()) {
    const Array& x = a.array();
    const Array& y = b.array();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Less(x[i], y[i])) return true;
      if (Less(y[i], x[i])) return false;
    }
    return x.size() < y.size();
  }
  Throw(absl::StrCat("'<' not supported between ", a.TypeName(), " and ", b.TypeName()));
}

bool Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string()) Throw(absl::StrCat("'in <string>' requires a string, not ", item.TypeName()));
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_array()) {
    for (const Value& v : container.array())
      if (Equal(v, item)) return true;
    return false;
  }
  if (container.is_object()) return item.is_string() && container.object().Find(item.as_string());
  if (container.is_undefined() || container.is_none()) return false;
  Throw(absl::StrCat("argument of type ", container.TypeName(), " is not iterable"));
}

Value GetItem(const Value& container, const Value& key) {
  if (container.is_string() && key.is_int() && !IsAscii(container.as_string()))
    return GetItem(Value(Iterate(container)), key);  // index code points, as Python does
  if (container.is_array() || container.is_string()) {
    if (!key.is_int()) {
      if (container.is_array() || !key.is_string())
        Throw(absl::StrCat("indices must be integers, not ", key.TypeName()));
      return GetAttr(container, key.as_string());
    }
    const size_t size = container.is_array() ? container.array().size() : container.as_string().size();
    const int64_t i = NormalizeIndex(key.as_int(), size);
    if (i < 0 || i >= static_cast<int64_t>(size)) return Value();
    if (container.is_array()) return container.array()[static_cast<size_t>(i)];
    return Value(std::string(1, container.as_string()[static_cast<size_t>(i)]));
  }
  if (container.is_object()) {
    if (!key.is_string()) {
      const std::string k = key.Str();
      const Value* v = container.object().Find(k);
      return v ? *v : Value();
    }
    const Value* v = container.object().Find(key.as_string());
    return v ? *v : Value();
  }
  return Value();  // undefined.x stays undefined, as in the reference renderer
}

Value GetAttr(const Value& object, std::string_view name) {
  if (object.is_object()) {
    const Value* v = object.object().Find(name);
    return v ? *v : Value();
  }
  if (object.is_array() || object.is_string()) return Value();
  return Value();
}

Value Slice(const Value& seq, const std::optional<int64_t>& start_in,
            const std::optional<int64_t>& stop_in, const std::optional<int64_t>& step_in) {
  if (seq.is_string() && !IsAscii(seq.as_string())) {  // slice code points, as Python does
    std::string out;
    const Value chars = Slice(Value(Iterate(seq)), start_in, stop_in, step_in);
    for (const Value& c : chars.array())
      out += c.as_string();
    return Value(std::move(out));
  }
  const int64_t step = step_in.value_or(1);
  if (step == 0) Throw("slice step cannot be zero");
  int64_t size;
  if (seq.is_array()) size = static_cast<int64_t>(seq.array().size());
  else if (seq.is_string()) size = static_cast<int64_t>(seq.as_string().size());
  else Throw(absl::StrCat("cannot slice a ", seq.TypeName()));
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t i = *v < 0 ? *v + size : *v;
    if (step > 0) return std::clamp<int64_t>(i, 0, size);
    return std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t start = clamp(start_in, step > 0 ? 0 : size - 1);
  const int64_t stop = clamp(stop_in, step > 0 ? size : -1);
  if (seq.is_array()) {
    Array out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
      out.push_back(seq.array()[static_cast<size_t>(i)]);
      if (__builtin_add_overflow(i, step, &i)) break;  // x[::huge]
    }
    return Value(std::move(out));
  }
  std::string out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    out += seq.as_string()[static_cast<size_t>(i)];
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return Value(std::move(out));
}

}  // namespace kvserve::jinja
