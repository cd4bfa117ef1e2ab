// Printable summaries of a GGUF model, for error messages and `kvserve inspect`:
//
//   FormatModelSummary:   kvs-tiny.gguf: GGUF v3, llama "kvs-tiny", 38 tensors, 7.7 MiB
//                           F32   38 tensors  2,023,680 weights  7.7 MiB  32.00 bits/weight
//   FormatTensorTable:    token_embd.weight     F32   ne [192, 2048]  1.5 MiB
//                         ...                   (one line per tensor, names sorted, columns
//                         aligned)
//   FormatMetadata:       general.architecture = "llama"
//                         tokenizer.ggml.tokens = [string x 2048] "<unk>", "<s>", ... (first few)
//
// Shapes are printed in GGUF's order (ne, innermost first), as llama.cpp's tools print them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"

namespace kvserve::gguf {

// "blk.0.attn_q.weight (Q4_K, ne [4096, 4096], 9.0 MiB)": one tensor, for error messages.
std::string DescribeTensor(const TensorInfo& t);

// Tensors, weights and bytes per block type, in id order (types the model does not use are
// left out).
struct TypeCount {
  quant::BlockType type;
  int64_t tensors = 0;
  int64_t elements = 0;
  uint64_t bytes = 0;
};
std::vector<TypeCount> CountTensorTypes(const GgufModel& model);

// The header line and one line per type (see above).
std::string FormatModelSummary(const GgufModel& model);
// One line per tensor, sorted by name; `max_rows` > 0 keeps the first rows and says how many
// were left out.
std::string FormatTensorTable(const GgufModel& model, size_t max_rows = 0);
// One line per key, sorted; arrays show their type, length and first `max_items` elements,
// strings are quoted, escaped and cut at 120 bytes.
std::string FormatMetadata(const GgufModel& model, size_t max_items = 4);
// "1.5 MiB", "812 B", "3.21 GiB".
std::string FormatBytes(uint64_t bytes);

}  // namespace kvserve::gguf
