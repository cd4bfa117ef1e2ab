#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvserve::structured {
namespace {

using json = nlohmann::ordered_json;
using K = RegexNode::Kind;

RegexNode Lit(std::string_view s) { return RegexNode::Literal(s); }

ByteSet Ascii(std::string_view chars) {
  ByteSet s;
  for (unsigned char c : chars) s.set(c);
  return s;
}

ByteSet Range(int lo, int hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(b);
  return s;
}

// One JSON string character: anything but '"', '\\' and controls, or a simple escape.
RegexNode StringChar() {
  ByteSet excluded = Range(0, 0x1F) | Ascii("\"\\");
  return RegexNode::Alt({RegexNode::AnyChar(excluded),
                         RegexNode::Seq({RegexNode::Byte('\\'), RegexNode::Bytes(Ascii("\"\\/bfnrt"))})});
}

RegexNode StringOf(int min, int max) {
  return RegexNode::Seq({Lit("\""), RegexNode::Repeat(StringChar(), min, max), Lit("\"")});
}

RegexNode Digits(int min, int max) { return RegexNode::Repeat(RegexNode::Bytes(Range('0', '9')), min, max); }

RegexNode Integer(bool allow_negative) {
  // 0, or up to 16 digits without a leading zero (stays within int64 and double precision).
  RegexNode magnitude =
      RegexNode::Alt({Lit("0"), RegexNode::Seq({RegexNode::Bytes(Range('1', '9')), Digits(0, 15)})});
  if (!allow_negative) return magnitude;
  return RegexNode::Seq({RegexNode::Repeat(Lit("-"), 0, 1), std::move(magnitude)});
}

RegexNode Number(bool allow_negative) {
  return RegexNode::Seq({Integer(allow_negative), RegexNode::Repeat(RegexNode::Seq({Lit("."), Digits(1, 15)}), 0, 1),
                         RegexNode::Repeat(RegexNode::Seq({RegexNode::Bytes(Ascii("eE")),
                                                           RegexNode::Repeat(RegexNode::Bytes(Ascii("+-")), 0, 1),
                                                           Digits(1, 3)}),
                                           0, 1)});
}

constexpr int64_t kMaxMagnitude = 9'999'999'999'999'999;  // 16 digits, as Integer() writes

bool AllOf(std::string_view s, char c) { return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; }); }

// Decimal strings of equal length lo <= hi: every number between them with that many digits.
RegexNode SameLength(std::string_view lo, std::string_view hi) {
  if (lo.empty()) return RegexNode::Empty();
  if (lo.size() == 1) return RegexNode::Bytes(Range(lo[0], hi[0]));
  const std::string_view lr = lo.substr(1), hr = hi.substr(1);
  if (lo[0] == hi[0]) return RegexNode::Seq({RegexNode::Byte(lo[0]), SameLength(lr, hr)});
  if (AllOf(lr, '0') && AllOf(hr, '9')) {
    return RegexNode::Seq({RegexNode::Bytes(Range(lo[0], hi[0])), Digits(static_cast<int>(lr.size()), static_cast<int>(lr.size()))});
  }
  std::vector<RegexNode> alts;
  alts.push_back(RegexNode::Seq({RegexNode::Byte(lo[0]), SameLength(lr, std::string(lr.size(), '9'))}));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(RegexNode::Seq({RegexNode::Bytes(Range(lo[0] + 1, hi[0] - 1)),
                                   Digits(static_cast<int>(lr.size()), static_cast<int>(lr.size()))}));
  }
  alts.push_back(RegexNode::Seq({RegexNode::Byte(hi[0]), SameLength(std::string(hr.size(), '0'), hr)}));
  return RegexNode::Alt(std::move(alts));
}

// Every integer in [a, b] (0 <= a <= b <= kMaxMagnitude) in canonical decimal.
RegexNode NonNegativeRange(int64_t a, int64_t b) {
  std::vector<RegexNode> alts;
  int64_t low_of_len = 0, high_of_len = 9;
  for (int len = 1; len <= 16; ++len) {
    const int64_t lo = std::max(a, low_of_len), hi = std::min(b, high_of_len);
    if (lo <= hi) alts.push_back(SameLength(std::to_string(lo), std::to_string(hi)));
    if (high_of_len >= b) break;
    low_of_len = high_of_len + 1;
    high_of_len = high_of_len * 10 + 9;
  }
  return RegexNode::Alt(std::move(alts));
}

// Every integer in [lo, hi], both within +-kMaxMagnitude, lo <= hi.
RegexNode IntegerRange(int64_t lo, int64_t hi) {
  std::vector<RegexNode> alts;
  if (lo < 0) {
    alts.push_back(RegexNode::Seq({Lit("-"), NonNegativeRange(std::max<int64_t>(1, -std::min<int64_t>(hi, -1)), -lo)}));
  }
  if (hi >= 0) alts.push_back(NonNegativeRange(std::max<int64_t>(lo, 0), hi));
  return RegexNode::Alt(std::move(alts));
}

// The empty language: a branch that cannot be taken (a $ref cut at its recursion bound).
RegexNode Nothing() { return RegexNode::Bytes(ByteSet()); }

// [X, X, ...] with min..max items (max -1: unbounded).
RegexNode ListOf(const RegexNode& item, int min, int max) {
  return RegexNode::Seq({Lit("["), RegexNode::SeparatedList(item, Lit(", "), min, max), Lit("]")});
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::strict); }

// json.dumps with ", " / ": " separators (the layout the regexes spell).
std::string Canonical(const json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += Dump(json(it.key())) + ": " + Canonical(it.value());
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + Canonical(j[i]);
    return out + "]";
  }
  return Dump(j);
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  absl::StatusOr<RegexNode> Convert(const json& s, const std::string& path, int depth) {
    if (depth > 32) return Unsupported(path, "nesting deeper than 32 levels");
    if (s.is_boolean()) {
      if (!s.get<bool>()) return Unsupported(path, "the schema `false`");
      return AnyJsonObjectValue(3);
    }
    if (!s.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": a schema must be an object"));
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum",
        "const", "anyOf", "oneOf", "minLength", "maxLength", "pattern", "minimum", "title", "description",
        "default", "examples", "$schema", "$id", "$comment", "format", "$ref", "$defs", "definitions",
        "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kKnown.count(it.key())) return Unsupported(absl::StrCat(path, ".", it.key()), "not supported");
    }
    if (auto it = s.find("$ref"); it != s.end()) return Ref(s, *it, path, depth);
    if (auto it = s.find("const"); it != s.end()) return Lit(Canonical(*it));
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Unsupported(path + ".enum", "must be a non-empty array");
      std::vector<RegexNode> alts;
      for (const json& v : *it) alts.push_back(Lit(Canonical(v)));
      return RegexNode::Alt(std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) return Unsupported(absl::StrCat(path, ".", key), "must be a non-empty array");
        std::vector<RegexNode> alts;
        for (size_t i = 0; i < it->size(); ++i) {
          auto alt = Convert((*it)[i], absl::StrCat(path, ".", key, "[", i, "]"), depth + 1);
          if (!alt.ok()) return alt;
          alts.push_back(*std::move(alt));
        }
        return RegexNode::Alt(std::move(alts));
      }
    }
    auto type = s.find("type");
    if (type == s.end()) return Unsupported(path, "a schema without type, enum, const or anyOf");
    if (type->is_array()) {
      std::vector<RegexNode> alts;
      for (const json& t : *type) {
        if (!t.is_string()) return Unsupported(path + ".type", "must be strings");
        auto alt = ConvertType(s, t.get<std::string>(), path, depth);
        if (!alt.ok()) return alt;
        alts.push_back(*std::move(alt));
      }
      if (alts.empty()) return Unsupported(path + ".type", "must not be empty");
      return RegexNode::Alt(std::move(alts));
    }
    if (!type->is_string()) return Unsupported(path + ".type", "must be a string or a list of strings");
    return ConvertType(s, type->get<std::string>(), path, depth);
  }

 private:
  // "$ref": "#/$defs/name" (any JSON pointer into this schema). A reference already open
  // kMaxRefRecursion times deeper in the expansion becomes the empty language: recursive
  // schemas are unrolled to that depth and the branch that would go deeper is not offered.
  absl::StatusOr<RegexNode> Ref(const json& s, const json& ref, const std::string& path, int depth) {
    static const std::set<std::string> kAnnotations = {"$ref", "title", "description", "default", "examples",
                                                       "$comment", "$defs", "definitions", "$schema", "$id"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kAnnotations.count(it.key())) {
        return Unsupported(absl::StrCat(path, ".", it.key()), "cannot be combined with $ref");
      }
    }
    if (!ref.is_string() || !ref.get<std::string>().starts_with("#")) {
      return Unsupported(path + ".$ref", "only references into this schema (\"#/...\") are supported");
    }
    const std::string target = ref.get<std::string>();
    const json* resolved = nullptr;
    try {
      const json::json_pointer pointer(target.substr(1));
      if (root_.contains(pointer)) resolved = &root_.at(pointer);
    } catch (const json::exception&) {
      resolved = nullptr;
    }
    if (resolved == nullptr) return Unsupported(path + ".$ref", absl::StrCat("\"", target, "\" does not resolve"));
    int& open = open_refs_[target];
    if (open >= kMaxRefRecursion) return Nothing();
    ++open;
    auto r = Convert(*resolved, absl::StrCat(path, ".$ref(", target, ")"), depth + 1);
    --open_refs_[target];
    return r;
  }

  static absl::Status Unsupported(const std::string& path, std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::string(why)));
  }

  static absl::StatusOr<int> Count(const json& s, const char* key, const std::string& path, int fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_unsigned() || it->get<uint64_t>() > 1000) {
      return Unsupported(absl::StrCat(path, ".", key), "must be an integer in [0, 1000]");
    }
    return static_cast<int>(it->get<uint64_t>());
  }

  // minimum / maximum / exclusiveMinimum / exclusiveMaximum as integer bounds: for integers any
  // finite values (rounded inwards); for numbers integer values only (see Numeric).
  struct Bounds {
    std::optional<int64_t> lo, hi;
  };
  static absl::StatusOr<Bounds> IntegerBounds(const json& s, const std::string& path, bool integer) {
    Bounds b;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      const std::string kpath = absl::StrCat(path, ".", key);
      if (!it->is_number()) return Unsupported(kpath, "must be a number");
      const double v = it->get<double>();
      if (!std::isfinite(v) || std::fabs(v) > 1e16) return Unsupported(kpath, "must be within +-1e16");
      const std::string_view k = key;
      const bool lower = k == "minimum" || k == "exclusiveMinimum";
      const bool exclusive = k.starts_with("exclusive");
      if (!integer && (exclusive || v != std::floor(v))) {
        return Unsupported(kpath, "number bounds must be inclusive integers (use type integer for others)");
      }
      int64_t bound;
      if (lower) {
        bound = exclusive ? static_cast<int64_t>(std::floor(v)) + 1 : static_cast<int64_t>(std::ceil(v));
        b.lo = b.lo ? std::max(*b.lo, bound) : bound;
      } else {
        bound = exclusive ? static_cast<int64_t>(std::ceil(v)) - 1 : static_cast<int64_t>(std::floor(v));
        b.hi = b.hi ? std::min(*b.hi, bound) : bound;
      }
    }
    if (b.lo && b.hi && *b.lo > *b.hi) return Unsupported(path + ".maximum", "leaves no value above minimum");
    return b;
  }

  static absl::StatusOr<RegexNode> Numeric(const json& s, const std::string& type, const std::string& path) {
    const bool integer = type == "integer";
    auto bounds = IntegerBounds(s, path, integer);
    if (!bounds.ok()) return bounds.status();
    const auto [lo, hi] = *bounds;
    if (integer) {
      if (!lo && !hi) return Integer(true);
      return IntegerRange(std::max(lo.value_or(-kMaxMagnitude), -kMaxMagnitude),
                          std::min(hi.value_or(kMaxMagnitude), kMaxMagnitude));
    }
    // Numbers: unbounded; minimum 0 (no sign); or integer bounds with minimum >= 0, written
    // without an exponent: an integer part in [lo, hi - 1] with any fraction, or hi itself.
    if (!lo && !hi) return Number(true);
    if (!lo || *lo < 0) return Unsupported(path + ".minimum", "a bounded number needs an integer minimum >= 0");
    if (!hi && *lo == 0) return Number(false);
    RegexNode fraction = RegexNode::Repeat(RegexNode::Seq({Lit("."), Digits(1, 15)}), 0, 1);
    if (!hi) return RegexNode::Seq({IntegerRange(*lo, kMaxMagnitude), std::move(fraction)});
    std::vector<RegexNode> alts;
    if (*hi > *lo) alts.push_back(RegexNode::Seq({IntegerRange(*lo, *hi - 1), std::move(fraction)}));
    alts.push_back(RegexNode::Seq({Lit(std::to_string(*hi)),
                                   RegexNode::Repeat(RegexNode::Seq({Lit("."), RegexNode::Repeat(Lit("0"), 1, 15)}), 0, 1)}));
    return RegexNode::Alt(std::move(alts));
  }

  absl::StatusOr<RegexNode> ConvertType(const json& s, const std::string& type, const std::string& path, int depth) {
    if (type == "string") {
      auto min = Count(s, "minLength", path, 0);
      auto max = Count(s, "maxLength", path, -1);
      if (!min.ok()) return min.status();
      if (!max.ok()) return max.status();
      if (*max >= 0 && *max < *min) return Unsupported(path + ".maxLength", "is below minLength");
      if (auto p = s.find("pattern"); p != s.end()) {
        if (!p->is_string()) return Unsupported(path + ".pattern", "must be a string");
        if (s.contains("minLength") || s.contains("maxLength")) {
          return Unsupported(path + ".pattern", "cannot be combined with minLength/maxLength");
        }
        auto inner = ParseRegex(p->get<std::string>());
        if (!inner.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ".pattern: ", std::string(inner.status().message())));
        return RegexNode::Seq({Lit("\""), *std::move(inner), Lit("\"")});
      }
      return StringOf(*min, *max);
    }
    if (type == "integer" || type == "number") return Numeric(s, type, path);
    if (type == "boolean") return RegexNode::Alt({Lit("true"), Lit("false")});
    if (type == "null") return Lit("null");
    if (type == "array") {
      auto min = Count(s, "minItems", path, 0);
      auto max = Count(s, "maxItems", path, -1);
      if (!min.ok()) return min.status();
      if (!max.ok()) return max.status();
      if (*max >= 0 && *max < *min) return Unsupported(path + ".maxItems", "is below minItems");
      auto items = s.find("items");
      RegexNode item;
      if (items == s.end()) {
        item = AnyJsonObjectValue(2);
      } else {
        auto converted = Convert(*items, path + ".items", depth + 1);
        if (!converted.ok()) return converted;
        item = *std::move(converted);
      }
      return ListOf(item, *min, *max);
    }
    if (type == "object") {
      if (auto ap = s.find("additionalProperties"); ap != s.end() && !(ap->is_boolean() && !ap->get<bool>())) {
        return Unsupported(path + ".additionalProperties", "only false is supported (objects have exactly their properties)");
      }
      auto props = s.find("properties");
      if (props == s.end()) {
        if (depth == 0 || !s.contains("additionalProperties")) return AnyObject(2);
        return Lit("{}");
      }
      if (!props->is_object()) return Unsupported(path + ".properties", "must be an object");
      std::set<std::string> required;
      if (auto req = s.find("required"); req != s.end()) {
        if (!req->is_array()) return Unsupported(path + ".required", "must be an array");
        for (const json& r : *req) {
          if (!r.is_string() || !props->contains(r.get<std::string>())) {
            return Unsupported(path + ".required", absl::StrCat("names ", Dump(r), ", which is not in properties"));
          }
          required.insert(r.get<std::string>());
        }
      }
      std::vector<Member> members;
      for (auto it = props->begin(); it != props->end(); ++it) {
        auto value = Convert(it.value(), absl::StrCat(path, ".properties.", it.key()), depth + 1);
        if (!value.ok()) return value;
        members.push_back({RegexNode::Seq({Lit(absl::StrCat(Dump(json(it.key())), ": ")), *std::move(value)}),
                           required.count(it.key()) > 0});
      }
      return RegexNode::Seq({Lit("{"), FirstMember(members, 0), Lit("}")});
    }
    return Unsupported(path + ".type", absl::StrCat("unknown type \"", type, "\""));
  }

  // Object members in `properties` order, each optional unless required: the members from
  // index i on, after at least one was written (every one is preceded by ", ") ...
  struct Member {
    RegexNode text;  // "key": value
    bool required;
  };
  static RegexNode MembersAfterFirst(const std::vector<Member>& m, size_t i) {
    std::vector<RegexNode> parts;
    for (size_t j = i; j < m.size(); ++j) {
      RegexNode item = RegexNode::Seq({Lit(", "), m[j].text});
      parts.push_back(m[j].required ? std::move(item) : RegexNode::Repeat(std::move(item), 0, 1));
    }
    return RegexNode::Seq(std::move(parts));
  }
  // ... and from index i on when none was written yet (the first one has no separator).
  // O(n^2) copies of the values for n properties.
  static RegexNode FirstMember(const std::vector<Member>& m, size_t i) {
    if (i == m.size()) return RegexNode::Empty();
    RegexNode written = RegexNode::Seq({m[i].text, MembersAfterFirst(m, i + 1)});
    if (m[i].required) return written;
    return RegexNode::Alt({std::move(written), FirstMember(m, i + 1)});
  }

  static RegexNode AnyObject(int depth) { return AnyJsonObject(depth, 64); }
  static RegexNode AnyJsonObjectValue(int depth);

  const json& root_;
  std::map<std::string, int> open_refs_;
};

RegexNode AnyValue(int depth, int max_string) {
  std::vector<RegexNode> alts = {StringOf(0, max_string), Number(true), Lit("true"), Lit("false"), Lit("null")};
  if (depth > 0) {
    const RegexNode inner = AnyValue(depth - 1, max_string);
    const RegexNode member = RegexNode::Seq({StringOf(1, max_string), Lit(": "), inner});
    alts.push_back(ListOf(inner, 0, -1));
    RegexNode obj = ListOf(member, 0, -1);  // "[...]" shape; swap the brackets below
    obj.kids.front() = Lit("{");
    obj.kids.back() = Lit("}");
    alts.push_back(std::move(obj));
  }
  return RegexNode::Alt(std::move(alts));
}

RegexNode Converter::AnyJsonObjectValue(int depth) { return AnyValue(depth, 64); }

}  // namespace

RegexNode AnyJsonObject(int depth, int max_string) {
  const RegexNode member = RegexNode::Seq({StringOf(1, max_string), Lit(": "), AnyValue(depth - 1, max_string)});
  RegexNode obj = ListOf(member, 0, -1);
  obj.kids.front() = Lit("{");
  obj.kids.back() = Lit("}");
  return obj;
}

absl::StatusOr<RegexNode> JsonSchemaToRegex(std::string_view schema_json, std::string_view field) {
  json schema = json::parse(schema_json.begin(), schema_json.end(), nullptr, false);
  if (schema.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(std::string(field), ": not valid JSON"));
  return Converter(schema).Convert(schema, std::string(field), 0);
}

}  // namespace kvserve::structured
