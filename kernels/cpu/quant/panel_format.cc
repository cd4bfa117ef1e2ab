#include "kernels/cpu/quant/panel_format.h"

#include <cstring>

#include "kernels/cpu/kv_quant.h"  // HalfToFloat

namespace kvserve::kernels::cpu::quant {
namespace {

void WriteNibbles(const BlockCodes& code, uint8_t* dst) {
  for (int j = 0; j < 4; ++j)
    for (int row = 0; row < kPanelRows; ++row)
      for (int e = 0; e < 4; ++e)
        dst[j * 64 + row * 4 + e] = static_cast<uint8_t>((code[row][4 * j + e] & 15) |
                                                         (code[row][16 + 4 * j + e] & 15) << 4);
}

void WritePlane(const BlockCodes& code, int bit, uint8_t* dst) {
  for (int j = 0; j < 8; ++j) {
    uint64_t m = 0;
    for (int row = 0; row < kPanelRows; ++row)
      for (int e = 0; e < 4; ++e)
        m |= static_cast<uint64_t>((code[row][4 * j + e] >> bit) & 1) << (row * 4 + e);
    std::memcpy(dst + 8 * j, &m, 8);  // little-endian u64: bit i of the mask = byte lane i
  }
}

// Bits 4..5 of the codes (panel_format.h, kNibHi2).
void WriteCrumbs(const BlockCodes& code, uint8_t* dst) {
  for (int c = 0; c < 2; ++c)
    for (int row = 0; row < kPanelRows; ++row)
      for (int e = 0; e < 4; ++e) {
        auto h = [&](int k) { return (code[row][k] >> 4) & 3; };
        const int j = 2 * c, j2 = 2 * c + 1;
        dst[c * 64 + row * 4 + e] = static_cast<uint8_t>(
            h(4 * j + e) | h(16 + 4 * j + e) << 2 | h(4 * j2 + e) << 4 | h(16 + 4 * j2 + e) << 6);
      }
}

float F16At(const uint8_t* p, int i) {
  uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  return HalfToFloat(h);
}

float F32At(const uint8_t* p, int i) {
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}

}  // namespace

void WriteCodes(Codes c, const BlockCodes& code, uint8_t* dst) {
  if (c == Codes::kBytes) {
    for (int j = 0; j < 8; ++j)
      for (int row = 0; row < kPanelRows; ++row)
        for (int e = 0; e < 4; ++e) dst[j * 64 + row * 4 + e] = code[row][4 * j + e];
    return;
  }
  WriteNibbles(code, dst);
  if (c == Codes::kNibHi1) WritePlane(code, 4, dst + 256);
  if (c == Codes::kNibHi2) WriteCrumbs(code, dst + 256);
}

void DecodeBlock(const PanelFormat& f, const uint8_t* unit, int b, BlockCodes& code,
                 float a[kPanelRows][2], float bias[kPanelRows][2]) {
  const uint8_t* header = unit;
  const uint8_t* rec = unit + CodesAt(f.codes, f.scales, b);
  const uint8_t* sc = unit + ScalesAt(f.scales, b);
  // Codes.
  for (int row = 0; row < kPanelRows; ++row) {
    for (int k = 0; k < kBlock; ++k) {
      const int j = (k % 16) / 4, e = k % 4, lane = row * 4 + e;
      if (f.codes == Codes::kBytes) {
        code[row][k] = rec[(k / 4) * 64 + lane];
        continue;
      }
      const uint8_t byte = rec[j * 64 + lane];
      uint8_t v = k < 16 ? (byte & 15) : (byte >> 4);
      if (f.codes == Codes::kNibHi1) {
        uint64_t m;  // masks are indexed by the 4-element group 0..7
        std::memcpy(&m, rec + 256 + 8 * (k / 4), 8);
        if ((m >> lane) & 1) v = static_cast<uint8_t>(v + 16);
      } else if (f.codes == Codes::kNibHi2) {
        const int t = (j % 2) * 2 + (k < 16 ? 0 : 1);
        v = static_cast<uint8_t>(v | ((rec[256 + 64 * (j / 2) + lane] >> (2 * t)) & 3) << 4);
      }
      code[row][k] = v;
    }
  }
  // Scales, in the fp32 order the source dequantizers use (d*sc first).
  for (int row = 0; row < kPanelRows; ++row) {
    switch (f.scales) {
      case Scales::kD: {
        const float d = F16At(sc, row);
        a[row][0] = a[row][1] = d;
        bias[row][0] = bias[row][1] = d * f.off;
        break;
      }
      case Scales::kDM:
        a[row][0] = a[row][1] = F16At(sc, row);
        bias[row][0] = bias[row][1] = F16At(sc + 32, row);
        break;
      case Scales::kK: {
        const float d = F16At(header, row), dmin = F16At(header + 32, row);
        a[row][0] = a[row][1] = d * static_cast<float>(sc[row]);
        bias[row][0] = bias[row][1] = -(dmin * static_cast<float>(sc[16 + row]));
        break;
      }
      case Scales::kQ6: {
        const float d = F16At(header, row);
        for (int h = 0; h < 2; ++h) {
          a[row][h] = d * static_cast<float>(static_cast<int8_t>(sc[16 * h + row]));
          bias[row][h] = -32.0f * a[row][h];
        }
        break;
      }
      case Scales::kAB:
        a[row][0] = a[row][1] = F32At(sc, row);
        bias[row][0] = bias[row][1] = F32At(sc, 16 + row);
        break;
      case Scales::kF32:
        for (int h = 0; h < 2; ++h) {
          a[row][h] = F32At(sc, 16 * h + row);
          bias[row][h] = F32At(sc, 32 + 16 * h + row);
        }
        break;
    }
  }
}

}  // namespace kvserve::kernels::cpu::quant
