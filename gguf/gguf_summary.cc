#include "gguf/gguf_summary.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/absl_compat.h"

namespace kvserve::gguf {
namespace {

constexpr size_t kMaxString = 120;

std::string_view TypeName(quant::BlockType t) { return quant::Traits(t).name; }

std::string Shape(const TensorInfo& t) { return absl::StrCat("[", absl::StrJoin(t.ne, ", "), "]"); }

std::string QuotedString(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxString; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(unsigned{c}, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxString)
    absl::StrAppend(&out, "\"... (", s.size(), " bytes)");
  else
    out += "\"";
  return out;
}

std::string Number(double x) { return absl::StrFormat("%.9g", x); }

template <typename T, typename F>
std::string Items(const std::vector<T>& v, size_t max_items, F format) {
  std::vector<std::string> shown;
  for (size_t i = 0; i < v.size() && i < max_items; ++i) shown.push_back(format(v[i]));
  std::string out = absl::StrJoin(shown, ", ");
  if (v.size() > max_items) absl::StrAppend(&out, ", ...");
  return out;
}

std::string FormatValue(const Value& value, size_t max_items) {
  struct Visitor {
    size_t max_items;
    std::string operator()(int64_t x) const { return absl::StrCat(x); }
    std::string operator()(uint64_t x) const { return absl::StrCat(x); }
    std::string operator()(double x) const { return Number(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return QuotedString(x); }
    std::string operator()(const std::vector<int64_t>& x) const {
      return Items(x, max_items, [](int64_t y) { return absl::StrCat(y); });
    }
    std::string operator()(const std::vector<uint64_t>& x) const {
      return Items(x, max_items, [](uint64_t y) { return absl::StrCat(y); });
    }
    std::string operator()(const std::vector<double>& x) const {
      return Items(x, max_items, Number);
    }
    std::string operator()(const std::vector<bool>& x) const {
      std::vector<std::string> shown;
      for (size_t i = 0; i < x.size() && i < max_items; ++i)
        shown.push_back(x[i] ? "true" : "false");
      return absl::StrCat(absl::StrJoin(shown, ", "), x.size() > max_items ? ", ..." : "");
    }
    std::string operator()(const std::vector<std::string>& x) const {
      return Items(x, max_items, QuotedString);
    }
  };
  const std::string items = std::visit(Visitor{max_items}, value.v);
  if (value.type != ValueType::kArray) return items;
  const size_t n = std::visit(
      [](const auto& x) -> size_t {
        if constexpr (requires { x.size(); } &&
                      !std::is_same_v<std::decay_t<decltype(x)>, std::string>) {
          return x.size();
        } else {
          return 0;
        }
      },
      value.v);
  return absl::StrCat("[", base::AsAbsl(ValueTypeName(value.array_type)), " x ", n, "]",
                      items.empty() ? "" : " ", items);
}

}  // namespace

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double x = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (x >= 1024 && u < 3) {
    x /= 1024;
    ++u;
  }
  if (x < 10) return absl::StrFormat("%.2f %s", x, units[u]);
  return absl::StrFormat("%.1f %s", x, units[u]);
}

std::string DescribeTensor(const TensorInfo& t) {
  return absl::StrCat(t.name, " (", base::AsAbsl(TypeName(t.type)), ", ne ", Shape(t), ", ",
                      FormatBytes(t.bytes), ")");
}

std::vector<TypeCount> CountTensorTypes(const GgufModel& model) {
  std::map<uint32_t, TypeCount> by_id;
  for (const auto& f : model.files()) {
    for (const TensorInfo& t : f->layout().tensors) {
      TypeCount& c = by_id[static_cast<uint32_t>(t.type)];
      c.type = t.type;
      c.tensors += 1;
      c.elements += t.num_elements();
      c.bytes += t.bytes;
    }
  }
  std::vector<TypeCount> out;
  for (const auto& [id, c] : by_id) out.push_back(c);
  return out;
}

std::string FormatModelSummary(const GgufModel& model) {
  const auto arch = model.GetString("general.architecture");
  const auto name = model.GetString("general.name");
  int64_t tensors = 0;
  uint64_t bytes = 0;
  const auto counts = CountTensorTypes(model);
  for (const auto& c : counts) {
    tensors += c.tensors;
    bytes += c.bytes;
  }
  std::string out =
      absl::StrCat(model.description(), ": GGUF v", model.files().front()->layout().version);
  if (arch.ok()) absl::StrAppend(&out, ", ", *arch);
  if (name.ok()) absl::StrAppend(&out, " ", QuotedString(*name));
  absl::StrAppend(&out, ", ", tensors, " tensors, ", FormatBytes(bytes), " of weights");
  if (model.files().size() > 1) absl::StrAppend(&out, " in ", model.files().size(), " files");
  out += "\n";
  for (const auto& c : counts) {
    const double bpw =
        c.elements > 0 ? 8.0 * static_cast<double>(c.bytes) / static_cast<double>(c.elements) : 0;
    absl::StrAppend(&out,
                    absl::StrFormat("  %-7s %5d tensors %14d weights %10s %6.2f bits/weight\n",
                                    base::AsAbsl(TypeName(c.type)), c.tensors, c.elements,
                                    FormatBytes(c.bytes), bpw));
  }
  return out;
}

std::string FormatTensorTable(const GgufModel& model, size_t max_rows) {
  const std::vector<std::string> names = model.TensorNames();
  const size_t rows = max_rows == 0 ? names.size() : std::min(max_rows, names.size());
  size_t width = 0;
  for (size_t i = 0; i < rows; ++i) width = std::max(width, names[i].size());
  std::string out;
  for (size_t i = 0; i < rows; ++i) {
    const TensorInfo& t = *model.FindTensor(names[i])->info;
    absl::StrAppend(
        &out, absl::StrFormat("%-*s  %-7s  ne %-24s %10s\n", static_cast<int>(width), t.name,
                              base::AsAbsl(TypeName(t.type)), Shape(t), FormatBytes(t.bytes)));
  }
  if (rows < names.size())
    absl::StrAppend(&out, "... and ", names.size() - rows, " more tensors\n");
  return out;
}

std::string FormatMetadata(const GgufModel& model, size_t max_items) {
  std::string out;
  for (const auto& [key, value] : model.metadata()) {
    absl::StrAppend(&out, key, " = ", FormatValue(value, max_items), "\n");
  }
  return out;
}

}  // namespace kvserve::gguf
