#include "parallel/step_message.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "parallel/wire_format.h"

namespace kvserve::parallel {
namespace {

constexpr uint32_t kMagic = 0x4d53564bu;  // "KVSM" read as a little-endian u32

void WriteCopies(WireWriter& w, const std::vector<cache::BlockCopy>& copies) {
  w.U32(static_cast<uint32_t>(copies.size()));
  for (const cache::BlockCopy& c : copies) {
    w.I32(c.src.value());
    w.I32(c.dst.value());
  }
}

absl::Status ReadCopies(WireReader& r, absl::string_view field,
                        std::vector<cache::BlockCopy>& out) {
  uint32_t n = 0;
  if (absl::Status s = r.U32(field, n); !s.ok()) return s;
  // Checked before resizing: a corrupt count must not allocate.
  if (absl::Status s = r.Require(field, size_t{n} * 8); !s.ok()) return s;
  out.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    int32_t src = 0, dst = 0;
    if (absl::Status s = r.I32(field, src); !s.ok()) return s;
    if (absl::Status s = r.I32(field, dst); !s.ok()) return s;
    out[i] = cache::BlockCopy{cache::BlockId(src), cache::BlockId(dst)};
  }
  return absl::OkStatus();
}

template <typename T>
std::string Join(const std::vector<T>& v, size_t begin, size_t end) {
  return absl::StrJoin(v.begin() + static_cast<std::ptrdiff_t>(begin),
                       v.begin() + static_cast<std::ptrdiff_t>(end), " ");
}

std::string JoinCopies(const std::vector<cache::BlockCopy>& copies) {
  return absl::StrJoin(copies, " ", [](std::string* out, const cache::BlockCopy& c) {
    absl::StrAppend(out, c.src.value(), "->", c.dst.value());
  });
}

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("step message field '", field, "': ", what));
}

// offsets: [n + 1] entries from 0, never decreasing, ending at `target_size`.
absl::Status CheckOffsets(absl::string_view field, const std::vector<int32_t>& offsets, size_t n,
                          size_t target_size, absl::string_view target) {
  if (offsets.size() != n + 1) {
    return Invalid(
        field, absl::StrCat("has ", offsets.size(), " entries, want ", n + 1, " (sequences + 1)"));
  }
  if (offsets[0] != 0) return Invalid(field, absl::StrCat("starts at ", offsets[0], ", not 0"));
  for (size_t i = 1; i <= n; ++i) {
    if (offsets[i] < offsets[i - 1]) {
      return Invalid(field, absl::StrCat("decreases at entry ", i, " (", offsets[i - 1], " then ",
                                         offsets[i], ")"));
    }
  }
  if (static_cast<size_t>(offsets[n]) != target_size) {
    return Invalid(field, absl::StrCat("ends at ", offsets[n], " but ", target, " has ",
                                       target_size, " entries"));
  }
  return absl::OkStatus();
}

absl::Status CheckCopies(absl::string_view field, const std::vector<cache::BlockCopy>& copies) {
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].src.value() < 0 || copies[i].dst.value() < 0) {
      return Invalid(field, absl::StrCat("entry ", i, " has a negative block id (",
                                         copies[i].src.value(), "->", copies[i].dst.value(), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

void StepMessage::clear() {
  kind = StepKind::kForward;
  step_id = 0;
  for (auto* v :
       {&token_ids, &positions, &seq_starts, &kv_lens, &block_table_offsets, &block_tables,
        &logits_rows, &window_kv_lens, &window_table_offsets, &window_block_tables}) {
    v->clear();
  }
  slot_mapping.clear();
  swap_out.clear();
  swap_in.clear();
  copies.clear();
}

void StepMessage::AssignBatch(const model::ForwardBatch& b) {
  token_ids.assign(b.token_ids.begin(), b.token_ids.end());
  positions.assign(b.positions.begin(), b.positions.end());
  slot_mapping.assign(b.slot_mapping.begin(), b.slot_mapping.end());
  seq_starts.assign(b.seq_starts.begin(), b.seq_starts.end());
  kv_lens.assign(b.kv_lens.begin(), b.kv_lens.end());
  block_table_offsets.assign(b.block_table_offsets.begin(), b.block_table_offsets.end());
  block_tables.assign(b.block_tables.begin(), b.block_tables.end());
  logits_rows.assign(b.logits_rows.begin(), b.logits_rows.end());
  window_kv_lens.assign(b.window_kv_lens.begin(), b.window_kv_lens.end());
  window_table_offsets.assign(b.window_table_offsets.begin(), b.window_table_offsets.end());
  window_block_tables.assign(b.window_block_tables.begin(), b.window_block_tables.end());
}

model::ForwardBatch StepMessage::batch() const {
  model::ForwardBatch b;
  b.token_ids = token_ids;
  b.positions = positions;
  b.slot_mapping = slot_mapping;
  b.seq_starts = seq_starts;
  b.kv_lens = kv_lens;
  b.block_table_offsets = block_table_offsets;
  b.block_tables = block_tables;
  b.logits_rows = logits_rows;
  b.window_kv_lens = window_kv_lens;
  b.window_table_offsets = window_table_offsets;
  b.window_block_tables = window_block_tables;
  return b;
}

std::string StepMessage::ToString() const {
  std::string out =
      absl::StrCat("step ", step_id, kind == StepKind::kShutdown ? " shutdown" : " forward", ": ",
                   token_ids.size(), " rows");
  // Per-sequence detail only where the arrays agree (ToString also serves invalid messages).
  const bool seqs_ok = !seq_starts.empty() && kv_lens.size() + 1 == seq_starts.size() &&
                       block_table_offsets.size() == seq_starts.size() &&
                       ValidateStepMessage(*this).ok();
  if (seqs_ok) {
    for (size_t s = 0; s + 1 < seq_starts.size(); ++s) {
      absl::StrAppend(
          &out, "; seq ", s, " rows [", seq_starts[s], ",", seq_starts[s + 1], ") tokens [",
          Join(token_ids, seq_starts[s], seq_starts[s + 1]), "] pos ",
          seq_starts[s] < seq_starts[s + 1] ? absl::StrCat(positions[seq_starts[s]]) : "-", " kv ",
          kv_lens[s], " blocks [",
          Join(block_tables, block_table_offsets[s], block_table_offsets[s + 1]), "]");
      if (!window_table_offsets.empty()) {
        absl::StrAppend(
            &out, " window kv ", window_kv_lens[s], " blocks [",
            Join(window_block_tables, window_table_offsets[s], window_table_offsets[s + 1]), "]");
      }
    }
  } else if (!seq_starts.empty()) {
    absl::StrAppend(&out, "; (inconsistent arrays) seq_starts [",
                    Join(seq_starts, 0, seq_starts.size()), "]");
  }
  absl::StrAppend(&out, "; logits rows [", Join(logits_rows, 0, logits_rows.size()), "]");
  if (!swap_out.empty()) absl::StrAppend(&out, "; swap out [", JoinCopies(swap_out), "]");
  if (!swap_in.empty()) absl::StrAppend(&out, "; swap in [", JoinCopies(swap_in), "]");
  if (!copies.empty()) absl::StrAppend(&out, "; copies [", JoinCopies(copies), "]");
  return out;
}

void EncodeStepMessage(const StepMessage& m, std::vector<std::byte>& out) {
  WireWriter w(out);
  w.U32(kMagic);
  w.U16(kStepMessageVersion);
  w.U16(static_cast<uint16_t>(m.kind));
  w.I64(m.step_id);
  w.I32Array(m.token_ids);
  w.I32Array(m.positions);
  w.I64Array(m.slot_mapping);
  w.I32Array(m.seq_starts);
  w.I32Array(m.kv_lens);
  w.I32Array(m.block_table_offsets);
  w.I32Array(m.block_tables);
  w.I32Array(m.logits_rows);
  w.I32Array(m.window_kv_lens);
  w.I32Array(m.window_table_offsets);
  w.I32Array(m.window_block_tables);
  WriteCopies(w, m.swap_out);
  WriteCopies(w, m.swap_in);
  WriteCopies(w, m.copies);
  w.Checksum();
}

absl::Status DecodeStepMessage(std::span<const std::byte> bytes, StepMessage& m) {
  WireReader r(bytes, "step message");
  uint32_t magic = 0;
  if (absl::Status s = r.U32("magic", magic); !s.ok()) return s;
  if (magic != kMagic)
    return r.Corrupt(absl::StrCat("field 'magic' is ", absl::Hex(magic), ", not \"KVSM\""));
  uint16_t version = 0;
  if (absl::Status s = r.U16("version", version); !s.ok()) return s;
  if (version != kStepMessageVersion) {
    // Another build of kvserve: the start-up handshake should have refused it.
    return absl::FailedPreconditionError(absl::StrCat("step message field 'version' is ", version,
                                                      "; this build reads version ",
                                                      kStepMessageVersion));
  }
  uint16_t kind = 0;
  if (absl::Status s = r.U16("kind", kind); !s.ok()) return s;
  m.kind = static_cast<StepKind>(kind);
  if (absl::Status s = r.I64("step_id", m.step_id); !s.ok()) return s;
  struct I32Field {
    const char* name;
    std::vector<int32_t>* v;
  };
  if (absl::Status s = r.I32Array("token_ids", m.token_ids); !s.ok()) return s;
  if (absl::Status s = r.I32Array("positions", m.positions); !s.ok()) return s;
  if (absl::Status s = r.I64Array("slot_mapping", m.slot_mapping); !s.ok()) return s;
  for (const I32Field& f :
       {I32Field{"seq_starts", &m.seq_starts}, I32Field{"kv_lens", &m.kv_lens},
        I32Field{"block_table_offsets", &m.block_table_offsets},
        I32Field{"block_tables", &m.block_tables}, I32Field{"logits_rows", &m.logits_rows},
        I32Field{"window_kv_lens", &m.window_kv_lens},
        I32Field{"window_table_offsets", &m.window_table_offsets},
        I32Field{"window_block_tables", &m.window_block_tables}}) {
    if (absl::Status s = r.I32Array(f.name, *f.v); !s.ok()) return s;
  }
  if (absl::Status s = ReadCopies(r, "swap_out", m.swap_out); !s.ok()) return s;
  if (absl::Status s = ReadCopies(r, "swap_in", m.swap_in); !s.ok()) return s;
  if (absl::Status s = ReadCopies(r, "copies", m.copies); !s.ok()) return s;
  if (absl::Status s = r.Checksum(); !s.ok()) return s;
  return ValidateStepMessage(m);
}

absl::Status ValidateStepMessage(const StepMessage& m) {
  if (m.kind != StepKind::kForward && m.kind != StepKind::kShutdown) {
    return Invalid(
        "kind", absl::StrCat(static_cast<int>(m.kind), " is neither 1 (forward) nor 2 (shutdown)"));
  }
  if (m.kind == StepKind::kShutdown) {
    if (!m.token_ids.empty() || !m.seq_starts.empty() || !m.block_tables.empty() ||
        !m.swap_out.empty() || !m.swap_in.empty() || !m.copies.empty()) {
      return Invalid("kind", "a shutdown message carries no batch and no KV moves");
    }
  }
  const size_t t = m.token_ids.size();
  if (m.positions.size() != t) {
    return Invalid("positions",
                   absl::StrCat("has ", m.positions.size(), " entries, token_ids has ", t));
  }
  if (m.slot_mapping.size() != t) {
    return Invalid("slot_mapping",
                   absl::StrCat("has ", m.slot_mapping.size(), " entries, token_ids has ", t));
  }
  for (size_t i = 0; i < t; ++i) {
    if (m.slot_mapping[i] < -1)
      return Invalid("slot_mapping", absl::StrCat("entry ", i, " is ", m.slot_mapping[i]));
  }
  // No sequences (seq_starts empty): a step that only moves KV blocks.
  const size_t n = m.seq_starts.empty() ? 0 : m.seq_starts.size() - 1;
  if (m.seq_starts.empty()) {
    if (t != 0) return Invalid("seq_starts", absl::StrCat("is empty but there are ", t, " rows"));
  } else if (absl::Status s = CheckOffsets("seq_starts", m.seq_starts, n, t, "token_ids");
             !s.ok()) {
    return s;
  }
  if (m.kv_lens.size() != n) {
    return Invalid("kv_lens",
                   absl::StrCat("has ", m.kv_lens.size(), " entries for ", n, " sequences"));
  }
  for (size_t s = 0; s < n; ++s) {
    const int32_t rows = m.seq_starts[s + 1] - m.seq_starts[s];
    if (m.kv_lens[s] < rows) {
      return Invalid("kv_lens", absl::StrCat("sequence ", s, " holds ", m.kv_lens[s],
                                             " entries, fewer than its ", rows, " rows this step"));
    }
  }
  if (n == 0 && m.block_table_offsets.empty()) {
    if (!m.block_tables.empty())
      return Invalid("block_table_offsets", "is empty but block_tables is not");
  } else if (absl::Status s = CheckOffsets("block_table_offsets", m.block_table_offsets, n,
                                           m.block_tables.size(), "block_tables");
             !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < m.logits_rows.size(); ++i) {
    if (m.logits_rows[i] < 0 || static_cast<size_t>(m.logits_rows[i]) >= t) {
      return Invalid("logits_rows", absl::StrCat("entry ", i, " is row ", m.logits_rows[i],
                                                 ", outside [0, ", t, ")"));
    }
  }
  // Layer groups: all three window arrays, or none.
  if (m.window_table_offsets.empty()) {
    if (!m.window_kv_lens.empty() || !m.window_block_tables.empty()) {
      return Invalid("window_table_offsets",
                     "is empty but window_kv_lens or window_block_tables is not");
    }
  } else {
    if (m.window_kv_lens.size() != n) {
      return Invalid("window_kv_lens", absl::StrCat("has ", m.window_kv_lens.size(),
                                                    " entries for ", n, " sequences"));
    }
    if (absl::Status s = CheckOffsets("window_table_offsets", m.window_table_offsets, n,
                                      m.window_block_tables.size(), "window_block_tables");
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckCopies("swap_out", m.swap_out); !s.ok()) return s;
  if (absl::Status s = CheckCopies("swap_in", m.swap_in); !s.ok()) return s;
  return CheckCopies("copies", m.copies);
}

}  // namespace kvserve::parallel
