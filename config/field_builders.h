// The typed field constructors behind config/fields.cc's table (one Field per config path:
// its kind, help, allowed-values text, getter and validating setter), and the enum name tables'
// helpers. Internal to config/: included by fields.cc only, so the table itself stays one
// readable list.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "config/fields.h"

namespace kvserve::config::internal {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
std::string_view NameOf(const std::array<EnumName<E>, N>& table, E v) {
  for (const auto& e : table) {
    if (e.value == v) return e.name;
  }
  return "?";
}
template <typename E, size_t N>
std::optional<E> Lookup(const std::array<EnumName<E>, N>& table, std::string_view name) {
  for (const auto& e : table) {
    if (e.name == name) return e.value;
  }
  return std::nullopt;
}
template <typename E, size_t N>
std::vector<std::string> Names(const std::array<EnumName<E>, N>& table) {
  std::vector<std::string> out;
  for (const auto& e : table) out.emplace_back(e.name);
  return out;
}

// ---- field builders. `Ref` is a captureless lambda Root& -> member&.

template <typename Root, typename Ref>
Field<Root> BoolField(std::string path, std::string help, Ref ref) {
  Field<Root> f{
      std::move(path), FieldKind::kBool, std::move(help), "true or false", {}, false, {}, {}};
  f.get = [ref](const Root& r) -> Value { return ref(const_cast<Root&>(r)); };
  f.set = [ref](Root& r, const Value& v) -> std::optional<std::string> {
    ref(r) = std::get<bool>(v);
    return std::nullopt;
  };
  return f;
}

template <typename Root, typename Ref>
Field<Root> IntField(std::string path, std::string help, Ref ref, int64_t lo, int64_t hi,
                     bool bytes = false, bool pow2 = false) {
  std::string allowed = pow2 ? absl::StrCat("must be a power of two in [", lo, ",", hi, "]")
                             : absl::StrCat("must be an integer in [", lo, ",", hi, "]");
  Field<Root> f{std::move(path),
                bytes ? FieldKind::kBytes : FieldKind::kInt,
                std::move(help),
                allowed,
                {},
                false,
                {},
                {}};
  f.get = [ref](const Root& r) -> Value { return static_cast<int64_t>(ref(const_cast<Root&>(r))); };
  f.set = [ref, lo, hi, pow2, allowed](Root& r, const Value& v) -> std::optional<std::string> {
    int64_t x = std::get<int64_t>(v);
    if (x < lo || x > hi) return allowed;
    if (pow2 && (x & (x - 1)) != 0) return allowed;
    using T = std::remove_reference_t<decltype(ref(r))>;
    ref(r) = static_cast<T>(x);
    return std::nullopt;
  };
  return f;
}

template <typename Root, typename Ref>
Field<Root> DoubleField(std::string path, std::string help, Ref ref, double lo, double hi,
                        bool lo_open = false) {
  std::string allowed = absl::StrCat("must be a number in ", lo_open ? "(" : "[", lo, ",", hi, "]");
  Field<Root> f{std::move(path), FieldKind::kDouble, std::move(help), allowed, {}, false, {}, {}};
  f.get = [ref](const Root& r) -> Value { return ref(const_cast<Root&>(r)); };
  f.set = [ref, lo, hi, lo_open, allowed](Root& r, const Value& v) -> std::optional<std::string> {
    double x = std::get<double>(v);
    if (!std::isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) return allowed;
    ref(r) = x;
    return std::nullopt;
  };
  return f;
}

template <typename Root, typename Ref>
Field<Root> StringField(std::string path, std::string help, Ref ref, bool non_empty = false,
                        bool secret = false) {
  Field<Root> f{std::move(path),
                FieldKind::kString,
                std::move(help),
                non_empty ? "must be a non-empty string" : "any string",
                {},
                secret,
                {},
                {}};
  f.get = [ref](const Root& r) -> Value { return ref(const_cast<Root&>(r)); };
  f.set = [ref, non_empty](Root& r, const Value& v) -> std::optional<std::string> {
    const auto& s = std::get<std::string>(v);
    if (non_empty && s.empty()) return "must be a non-empty string";
    ref(r) = s;
    return std::nullopt;
  };
  return f;
}

template <typename Root, typename Ref>
Field<Root> StringListField(std::string path, std::string help, Ref ref, bool secret) {
  Field<Root> f{std::move(path),
                FieldKind::kStringList,
                std::move(help),
                "must be a list of non-empty strings",
                {},
                secret,
                {},
                {}};
  f.get = [ref](const Root& r) -> Value { return ref(const_cast<Root&>(r)); };
  f.set = [ref](Root& r, const Value& v) -> std::optional<std::string> {
    const auto& list = std::get<std::vector<std::string>>(v);
    for (const auto& s : list) {
      if (s.empty()) return "must be a list of non-empty strings";
    }
    ref(r) = list;
    return std::nullopt;
  };
  return f;
}

template <typename Root, typename E, size_t N, typename Ref>
Field<Root> EnumField(std::string path, std::string help, Ref ref,
                      const std::array<EnumName<E>, N>& table) {
  std::vector<std::string> choices = Names(table);
  std::string allowed = absl::StrCat("must be one of ", absl::StrJoin(choices, "|"));
  Field<Root> f{
      std::move(path), FieldKind::kEnum, std::move(help), allowed, choices, false, {}, {}};
  f.get = [ref, &table](const Root& r) -> Value {
    return std::string(NameOf(table, ref(const_cast<Root&>(r))));
  };
  f.set = [ref, &table, allowed](Root& r, const Value& v) -> std::optional<std::string> {
    auto e = Lookup(table, std::get<std::string>(v));
    if (!e) return allowed;
    ref(r) = *e;
    return std::nullopt;
  };
  return f;
}

// An enum that may be unset ("auto": follow another setting); the member is std::optional<E>.
template <typename Root, typename E, size_t N, typename Ref>
Field<Root> OptionalEnumField(std::string path, std::string help, Ref ref,
                              const std::array<EnumName<E>, N>& table) {
  std::vector<std::string> choices = Names(table);
  choices.insert(choices.begin(), "auto");
  std::string allowed = absl::StrCat("must be one of ", absl::StrJoin(choices, "|"));
  Field<Root> f{
      std::move(path), FieldKind::kEnum, std::move(help), allowed, choices, false, {}, {}};
  f.get = [ref, &table](const Root& r) -> Value {
    const auto& v = ref(const_cast<Root&>(r));
    return v ? std::string(NameOf(table, *v)) : std::string("auto");
  };
  f.set = [ref, &table, allowed](Root& r, const Value& v) -> std::optional<std::string> {
    const auto& name = std::get<std::string>(v);
    if (name == "auto") {
      ref(r).reset();
      return std::nullopt;
    }
    auto e = Lookup(table, name);
    if (!e) return allowed;
    ref(r) = *e;
    return std::nullopt;
  };
  return f;
}

template <typename Root, typename E, size_t N, typename Ref>
Field<Root> EnumListField(std::string path, std::string help, Ref ref,
                          const std::array<EnumName<E>, N>& table) {
  std::vector<std::string> choices = Names(table);
  std::string allowed = absl::StrCat("must be a list of ", absl::StrJoin(choices, "|"));
  Field<Root> f{
      std::move(path), FieldKind::kEnumList, std::move(help), allowed, choices, false, {}, {}};
  f.get = [ref, &table](const Root& r) -> Value {
    std::vector<std::string> out;
    for (E e : ref(const_cast<Root&>(r))) out.emplace_back(NameOf(table, e));
    return out;
  };
  f.set = [ref, &table, allowed](Root& r, const Value& v) -> std::optional<std::string> {
    std::vector<E> out;
    for (const auto& s : std::get<std::vector<std::string>>(v)) {
      auto e = Lookup(table, s);
      if (!e) return allowed;
      out.push_back(*e);
    }
    ref(r) = std::move(out);
    return std::nullopt;
  };
  return f;
}

}  // namespace kvserve::config::internal
