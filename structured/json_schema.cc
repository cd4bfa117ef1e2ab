#include "structured/json_schema.h"

#include <algorithm>
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
        "default", "examples", "$schema", "$id", "$comment", "format"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kKnown.count(it.key())) return Unsupported(absl::StrCat(path, ".", it.key()), "not supported");
    }
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

  static absl::StatusOr<bool> NonNegative(const json& s, const std::string& path) {
    auto it = s.find("minimum");
    if (it == s.end()) return false;
    if (!it->is_number() || it->get<double>() != 0.0) {
      return Unsupported(path + ".minimum", "only minimum 0 is supported");
    }
    return true;
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
    if (type == "integer" || type == "number") {
      auto non_negative = NonNegative(s, path);
      if (!non_negative.ok()) return non_negative.status();
      return type == "integer" ? Integer(!*non_negative) : Number(!*non_negative);
    }
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
      if (auto req = s.find("required"); req != s.end()) {
        if (!req->is_array()) return Unsupported(path + ".required", "must be an array");
        for (const json& r : *req) {
          if (!r.is_string() || !props->contains(r.get<std::string>())) {
            return Unsupported(path + ".required", absl::StrCat("names ", Dump(r), ", which is not in properties"));
          }
        }
      }
      std::vector<RegexNode> parts = {Lit("{")};
      bool first = true;
      for (auto it = props->begin(); it != props->end(); ++it) {
        auto value = Convert(it.value(), absl::StrCat(path, ".properties.", it.key()), depth + 1);
        if (!value.ok()) return value;
        parts.push_back(Lit(absl::StrCat(first ? "" : ", ", Dump(json(it.key())), ": ")));
        parts.push_back(*std::move(value));
        first = false;
      }
      parts.push_back(Lit("}"));
      return RegexNode::Seq(std::move(parts));
    }
    return Unsupported(path + ".type", absl::StrCat("unknown type \"", type, "\""));
  }

  static RegexNode AnyObject(int depth) { return AnyJsonObject(depth, 64); }
  static RegexNode AnyJsonObjectValue(int depth);
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
  return Converter().Convert(schema, std::string(field), 0);
}

}  // namespace kvserve::structured
