// The start-up handshake: before serving, every rank proves to rank 0 that it loaded the same
// model, with the same configuration, from the same build. A mismatched rank would compute
// garbage without any error (wrong shard shapes at best, silently different logits at worst),
// so the group is refused at start-up, naming the rank and what differs.
//
//   ranks 1..N-1                       rank 0
//   Send(0, kHandshakeTag, fingerprint) ──▶  Recv from 1, 2, ... N-1 in turn; compare each
//                                             with its own fingerprint, field by field
//   Broadcast(verdict, root 0)        ◀──  verdict: accepted, or the refusal text
//
// Every rank returns the same outcome: OK, or FailedPrecondition carrying rank 0's text
// ("rank 2 was started with a different model path: '/m/b' (rank 0: '/m/a')"). A rank that
// sends nothing in time makes rank 0 return DeadlineExceeded naming it (the others then time
// out waiting for the verdict, or receive the refusal).
//
// Fingerprint wire form (wire_format.h): u32 magic "KVRF", u16 version 1, string model_path,
// u64 config_hash, string build_id, u64 WireChecksum. Verdict: u8 accepted, string text,
// WireChecksum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "parallel/communicator.h"

namespace kvserve::parallel {

inline constexpr int kHandshakeTag = 1;

struct RankFingerprint {
  std::string model_path;    // as given on the command line
  uint64_t config_hash = 0;  // HashConfigJson of the effective configuration
  std::string build_id;      // ThisBuildId()

  bool operator==(const RankFingerprint&) const = default;
};

// FNV-1a 64 of the configuration's JSON text. Callers pass a canonical rendering (the
// effective configuration dumped with sorted keys, as nlohmann::json's dump() does), so
// equal configurations hash alike whatever their source file's layout.
uint64_t HashConfigJson(absl::string_view config_json);

// This process's fingerprint: the given model path and configuration, and ThisBuildId().
RankFingerprint MakeRankFingerprint(absl::string_view model_path, absl::string_view config_json);

void EncodeRankFingerprint(const RankFingerprint& fingerprint, std::vector<std::byte>& out);
absl::Status DecodeRankFingerprint(std::span<const std::byte> bytes, RankFingerprint& out);

// OK if `other` (from rank `rank`) equals rank 0's `leader`; else FailedPrecondition naming
// the rank and every field that differs, with both values.
absl::Status CompareRankFingerprints(const RankFingerprint& leader, const RankFingerprint& other,
                                     int rank);

// Runs the handshake on every rank of `comm` (see the top of this file). `timeout` bounds
// the whole exchange on `clock`.
absl::Status RunRankHandshake(Communicator& comm, const RankFingerprint& mine,
                              const base::Clock& clock, absl::Duration timeout);

}  // namespace kvserve::parallel
