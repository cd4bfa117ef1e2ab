// Filters (`x | name(args)`) and tests (`x is name(args)`).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "jinja/builtins.h"
#include "jinja/error.h"
#include "jinja/limits.h"
#include "jinja/ops.h"

namespace kvserve::jinja {
namespace {

int64_t Length(const Value& v) {
  if (v.is_string()) {
    int64_t n = 0;  // code points, as Python's len(str)
    for (char c : v.as_string()) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
  }
  if (v.is_array()) return static_cast<int64_t>(v.array().size());
  if (v.is_object()) return static_cast<int64_t>(v.object().items.size());
  if (v.is_undefined()) return 0;
  Throw(absl::StrCat("object of type ", v.TypeName(), " has no length"));
}

// attribute="a.b" or an integer index, as Jinja's make_attrgetter.
Value Attribute(const Value& item, const Value& attr) {
  if (attr.is_int()) return GetItem(item, attr);
  if (!attr.is_string()) Throw(absl::StrCat("attribute must be a string or an integer, not ", attr.TypeName()));
  Value cur = item;
  const std::string& path = attr.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    cur = GetItem(cur, Value(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

// select/reject/selectattr/rejectattr: args[skip] is the test name, the rest its arguments.
Value SelectLike(const Value& input, const CallArgs& args, bool by_attr, bool keep) {
  size_t skip = 0;
  Value attr;
  if (by_attr) {
    if (args.positional.empty()) Throw("selectattr/rejectattr need an attribute name");
    attr = args.positional[0];
    skip = 1;
  }
  CallArgs test_args;
  std::string test = "truthy";
  if (args.positional.size() > skip) {
    test = args.positional[skip].Str();
    test_args.positional.assign(args.positional.begin() + static_cast<long>(skip) + 1,
                                args.positional.end());
  }
  Array out;
  for (const Value& item : Iterate(input)) {
    const Value v = by_attr ? Attribute(item, attr) : item;
    const bool ok = test == "truthy" ? v.Truthy() : ApplyTest(test, v, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value(std::move(out));
}

Value Sorted(const Value& input, const CallArgs& args) {
  Array items = Iterate(input);
  const Value* reverse = args.Get("reverse", 0);
  const Value* attr = args.Get("attribute", 2);
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return attr ? Less(Attribute(a, *attr), Attribute(b, *attr)) : Less(a, b);
  });
  if (reverse && reverse->Truthy()) std::reverse(items.begin(), items.end());
  return Value(std::move(items));
}

std::string Indent(const std::string& s, const CallArgs& args) {
  const Value* width = args.Get("width", 0);
  const Value* first = args.Get("first", 1);
  const Value* blank = args.Get("blank", 2);
  if (width != nullptr && !width->is_string() && !width->is_int()) Throw("indent width must be an integer or a string");
  if (width != nullptr && width->is_int()) CheckStringSize(static_cast<uint64_t>(std::max<int64_t>(width->as_int(), 0)), "the indent");
  const std::string pad = width == nullptr ? "    "
                          : width->is_string() ? width->as_string()
                                               : std::string(static_cast<size_t>(std::max<int64_t>(width->as_int(), 0)), ' ');
  std::string out;
  size_t start = 0;
  bool first_line = true;
  while (start <= s.size()) {
    const size_t nl = s.find('\n', start);
    const std::string line = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool indent = first_line ? (first && first->Truthy()) : (!line.empty() || (blank && blank->Truthy()));
    if (indent && !(first_line && line.empty() && !(first && first->Truthy()))) out += pad;
    out += line;
    CheckStringSize(out.size(), "the result of indent");
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    first_line = false;
  }
  return out;
}

}  // namespace

Value ApplyFilter(std::string_view name, const Value& input, const CallArgs& args) {
  if (name == "tojson") {
    JsonOptions opts;
    if (const Value* indent = args.Get("indent", 0); indent && indent->is_int()) {
      if (indent->as_int() > 1024) Throw("tojson indent above 1024 (template limit)");
      opts.indent = static_cast<int>(std::max<int64_t>(indent->as_int(), -1));
    }
    if (const Value* sep = args.Get("separators", 99); sep && sep->is_array() && sep->array().size() == 2) {
      opts.item_separator = sep->array()[0].Str();
      opts.key_separator = sep->array()[1].Str();
    }
    if (const Value* sort = args.Get("sort_keys", 99)) opts.sort_keys = sort->Truthy();
    std::string out;
    AppendJson(input, opts, out);
    CheckStringSize(out.size(), "the result of tojson");
    return Value(std::move(out));
  }
  if (name == "trim" || name == "strip") {
    if (!input.is_string()) Throw(absl::StrCat("trim needs a string, not ", input.TypeName()));
    const Value* chars = args.Get("chars", 0);
    return Value(PyStrip(input.Str(), chars && chars->is_string() ? &chars->as_string() : nullptr, true, true));
  }
  if (name == "length" || name == "count") return Value(Length(input));
  if (name == "string") return Value(input.Str());
  if (name == "safe" || name == "escape" || name == "e" || name == "forceescape") return input;
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "replace")
    return *CallMethod(Value(input.Str()), name, args);
  if (name == "join") {
    const Value* sep = args.Get("d", 0);
    const Value* attr = args.Get("attribute", 1);
    std::string out;
    bool first = true;
    for (const Value& v : Iterate(input)) {
      if (!first && sep) sep->AppendStr(out);
      first = false;
      (attr ? Attribute(v, *attr) : v).AppendStr(out);
      CheckStringSize(out.size(), "the result of join");
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    const Array items = Iterate(input);
    if (items.empty()) return Value();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "default" || name == "d") {
    const Value* dflt = args.Get("default_value", 0);
    const Value* boolean = args.Get("boolean", 1);
    const bool use = input.is_undefined() || (boolean && boolean->Truthy() && !input.Truthy());
    return use ? (dflt ? *dflt : Value(std::string())) : input;
  }
  if (name == "list") return Value(Iterate(input));
  if (name == "items") {
    if (!input.is_object()) Throw("items filter needs a dict");
    return *CallMethod(input, "items", {});
  }
  if (name == "dictsort") {
    if (!input.is_object()) Throw("dictsort needs a dict");
    Array pairs = CallMethod(input, "items", {})->array();
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const Value& a, const Value& b) { return Less(a.array()[0], b.array()[0]); });
    return Value(std::move(pairs));
  }
  if (name == "selectattr") return SelectLike(input, args, true, true);
  if (name == "rejectattr") return SelectLike(input, args, true, false);
  if (name == "select") return SelectLike(input, args, false, true);
  if (name == "reject") return SelectLike(input, args, false, false);
  if (name == "map") {
    Array out;
    const Value* attr = args.Get("attribute", 99);
    const Value* dflt = args.Get("default", 99);
    CallArgs rest;
    if (!attr && !args.positional.empty())
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    for (const Value& item : Iterate(input)) {
      if (attr) {
        Value v = Attribute(item, *attr);
        out.push_back(v.is_undefined() && dflt ? *dflt : v);
      } else if (!args.positional.empty()) {
        out.push_back(ApplyFilter(args.positional[0].Str(), item, rest));
      } else {
        Throw("map needs a filter name or attribute=");
      }
    }
    return Value(std::move(out));
  }
  if (name == "sort") return Sorted(input, args);
  if (name == "reverse") {
    if (input.is_string()) {
      std::string s = input.as_string();
      std::reverse(s.begin(), s.end());
      return Value(std::move(s));
    }
    Array items = Iterate(input);
    std::reverse(items.begin(), items.end());
    return Value(std::move(items));
  }
  if (name == "unique") {
    Array out;
    for (const Value& v : Iterate(input))
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return Equal(o, v); }))
        out.push_back(v);
    return Value(std::move(out));
  }
  if (name == "int") {
    if (input.is_int()) return input;
    if (input.is_float()) return Value(static_cast<int64_t>(input.as_number()));
    if (input.is_bool()) return Value(static_cast<int64_t>(input.as_bool()));
    if (input.is_string()) return Value(static_cast<int64_t>(std::strtoll(input.as_string().c_str(), nullptr, 10)));
    return Value(int64_t{0});
  }
  if (name == "float") {
    if (input.is_number()) return Value(input.as_number());
    if (input.is_string()) return Value(std::strtod(input.as_string().c_str(), nullptr));
    return Value(0.0);
  }
  if (name == "abs") {
    if (input.is_int()) return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
    if (input.is_float()) return Value(std::fabs(input.as_number()));
    Throw("abs needs a number");
  }
  if (name == "round") {
    const Value* prec = args.Get("precision", 0);
    const double scale = std::pow(10.0, prec && prec->is_int() ? static_cast<double>(prec->as_int()) : 0.0);
    if (!input.is_number()) Throw("round needs a number");
    return Value(std::round(input.as_number() * scale) / scale);
  }
  if (name == "sum" || name == "max" || name == "min") {
    const Array items = Iterate(input);
    if (name == "sum") {
      Value total(int64_t{0});
      for (const Value& v : items) total = BinaryOp("+", total, v);
      return total;
    }
    if (items.empty()) return Value();
    Value best = items[0];
    for (const Value& v : items)
      if (name == "max" ? Less(best, v) : Less(v, best)) best = v;
    return best;
  }
  if (name == "indent") return Value(Indent(input.Str(), args));
  if (name == "wordcount") return Value(static_cast<int64_t>(CallMethod(Value(input.Str()), "split", {})->array().size()));
  if (name == "center") {
    const Value* w = args.Get("width", 0);
    std::string s = input.Str();
    const int64_t width = w && w->is_int() ? w->as_int() : 80;
    const int64_t pad = width - static_cast<int64_t>(s.size());
    if (pad <= 0) return Value(s);
    CheckStringSize(static_cast<uint64_t>(width), "the result of center");
    const int64_t left = pad / 2 + (pad & width & 1);
    return Value(std::string(static_cast<size_t>(left), ' ') + s +
                 std::string(static_cast<size_t>(pad - left), ' '));
  }
  Throw(absl::StrCat("unknown filter '", std::string(name), "'"));
}

bool HasTest(std::string_view name) {
  static constexpr std::string_view kTests[] = {
      "defined", "undefined", "none", "string", "number", "integer", "float", "boolean",
      "mapping", "iterable", "sequence", "callable", "true", "false", "odd", "even",
      "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt", "<", "gt", ">", "le", "<=",
      "ge", ">=", "in", "sameas", "lower", "upper", "escaped"};
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

bool ApplyTest(std::string_view name, const Value& v, const CallArgs& args) {
  const Value* arg = args.Get("other", 0);
  auto need_arg = [&]() -> const Value& {
    if (arg == nullptr) Throw(absl::StrCat("test '", std::string(name), "' needs an argument"));
    return *arg;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_string() || v.is_object();
  if (name == "sequence") return v.is_array() || v.is_string() || v.is_object();
  if (name == "callable") return v.is_callable();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "odd" || name == "even") {
    if (!v.is_int()) Throw(absl::StrCat("test '", std::string(name), "' needs an integer"));
    return (v.as_int() % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    const Value& d = need_arg();
    if (!v.is_int() || !d.is_int() || d.as_int() == 0) Throw("divisibleby needs non-zero integers");
    return v.as_int() % d.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return Equal(v, need_arg());
  if (name == "ne" || name == "!=") return !Equal(v, need_arg());
  if (name == "lt" || name == "<") return Less(v, need_arg());
  if (name == "gt" || name == ">") return Less(need_arg(), v);
  if (name == "le" || name == "<=") return !Less(need_arg(), v);
  if (name == "ge" || name == ">=") return !Less(v, need_arg());
  if (name == "in") return Contains(need_arg(), v);
  if (name == "sameas") {
    const Value& o = need_arg();
    if (v.kind() != o.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == o.as_bool();
    return Equal(v, o);
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    const std::string& s = v.as_string();
    return std::none_of(s.begin(), s.end(), [&](char c) {
      return name == "lower" ? std::isupper(static_cast<unsigned char>(c)) : std::islower(static_cast<unsigned char>(c));
    });
  }
  if (name == "escaped") return false;
  Throw(absl::StrCat("unknown test '", std::string(name), "'"));
}

}  // namespace kvserve::jinja
