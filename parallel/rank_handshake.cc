#include "parallel/rank_handshake.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "parallel/build_id.h"
#include "parallel/wire_format.h"

namespace kvserve::parallel {
namespace {

constexpr uint32_t kFingerprintMagic = 0x4652564bu;  // "KVRF" read as a little-endian u32
constexpr uint16_t kFingerprintVersion = 1;

void EncodeVerdict(bool accepted, absl::string_view text, std::vector<std::byte>& out) {
  WireWriter w(out);
  w.U8(accepted ? 1 : 0);
  w.String(text);
  w.Checksum();
}

absl::Status DecodeVerdict(std::span<const std::byte> bytes, bool& accepted, std::string& text) {
  WireReader r(bytes, "handshake verdict");
  uint8_t flag = 0;
  if (absl::Status s = r.U8("accepted", flag); !s.ok()) return s;
  if (flag > 1) return r.Corrupt(absl::StrCat("field 'accepted' is ", flag));
  if (absl::Status s = r.String("text", text); !s.ok()) return s;
  if (absl::Status s = r.Checksum(); !s.ok()) return s;
  accepted = flag == 1;
  return absl::OkStatus();
}

absl::Duration Remaining(const base::Clock& clock, base::Nanos deadline) {
  return absl::Nanoseconds(std::max<base::Nanos>(0, deadline - clock.now_ns()));
}

// Rank 0: collect, compare, announce.
absl::Status Lead(Communicator& comm, const RankFingerprint& mine, const base::Clock& clock,
                  base::Nanos deadline) {
  std::vector<std::string> refusals;
  absl::Status failure;  // the first error that is not a refusal (no answer, unreadable)
  std::vector<std::byte> bytes;
  RankFingerprint theirs;
  for (int r = 1; r < comm.size(); ++r) {
    absl::Status s = comm.Recv(r, kHandshakeTag, bytes, Remaining(clock, deadline));
    if (s.ok()) s = DecodeRankFingerprint(bytes, theirs);
    if (!s.ok()) {
      refusals.push_back(absl::StrCat("rank ", r, " gave no fingerprint: ", s.message()));
      if (failure.ok()) failure = absl::Status(s.code(), refusals.back());
      if (s.code() == absl::StatusCode::kDeadlineExceeded) break;  // the time is spent
      continue;
    }
    if (absl::Status c = CompareRankFingerprints(mine, theirs, r); !c.ok())
      refusals.emplace_back(c.message());
  }
  const std::string text = absl::StrJoin(refusals, "; ");
  EncodeVerdict(refusals.empty(), text, bytes);
  // Announce even a refusal, so every rank that is listening stops with the reason. A few
  // milliseconds at least: the deadline may be spent already by a silent rank.
  absl::Status announced =
      comm.Broadcast(bytes, 0, std::max(Remaining(clock, deadline), absl::Milliseconds(100)));
  if (!failure.ok()) return failure;
  if (!refusals.empty()) return absl::FailedPreconditionError(text);
  return announced;
}

// Ranks 1..N-1: report, then obey the verdict.
absl::Status Follow(Communicator& comm, const RankFingerprint& mine, const base::Clock& clock,
                    base::Nanos deadline) {
  std::vector<std::byte> bytes;
  EncodeRankFingerprint(mine, bytes);
  if (absl::Status s = comm.Send(0, kHandshakeTag, bytes, Remaining(clock, deadline)); !s.ok())
    return s;
  if (absl::Status s = comm.Broadcast(bytes, 0, Remaining(clock, deadline)); !s.ok()) return s;
  bool accepted = false;
  std::string text;
  if (absl::Status s = DecodeVerdict(bytes, accepted, text); !s.ok()) return s;
  if (!accepted) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank 0 refused the group (this is rank ", comm.rank(), "): ", text));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t HashConfigJson(absl::string_view config_json) {
  return Fnv1a64(std::as_bytes(std::span(config_json.data(), config_json.size())));
}

RankFingerprint MakeRankFingerprint(absl::string_view model_path, absl::string_view config_json) {
  return RankFingerprint{std::string(model_path), HashConfigJson(config_json), ThisBuildId()};
}

void EncodeRankFingerprint(const RankFingerprint& f, std::vector<std::byte>& out) {
  WireWriter w(out);
  w.U32(kFingerprintMagic);
  w.U16(kFingerprintVersion);
  w.String(f.model_path);
  w.U64(f.config_hash);
  w.String(f.build_id);
  w.Checksum();
}

absl::Status DecodeRankFingerprint(std::span<const std::byte> bytes, RankFingerprint& out) {
  WireReader r(bytes, "rank fingerprint");
  uint32_t magic = 0;
  if (absl::Status s = r.U32("magic", magic); !s.ok()) return s;
  if (magic != kFingerprintMagic)
    return r.Corrupt(absl::StrCat("field 'magic' is ", absl::Hex(magic)));
  uint16_t version = 0;
  if (absl::Status s = r.U16("version", version); !s.ok()) return s;
  if (version != kFingerprintVersion) {
    return absl::FailedPreconditionError(absl::StrCat("rank fingerprint field 'version' is ",
                                                      version, "; this build reads version ",
                                                      kFingerprintVersion));
  }
  if (absl::Status s = r.String("model_path", out.model_path); !s.ok()) return s;
  if (absl::Status s = r.U64("config_hash", out.config_hash); !s.ok()) return s;
  if (absl::Status s = r.String("build_id", out.build_id); !s.ok()) return s;
  return r.Checksum();
}

absl::Status CompareRankFingerprints(const RankFingerprint& leader, const RankFingerprint& other,
                                     int rank) {
  std::vector<std::string> diffs;
  if (other.model_path != leader.model_path) {
    diffs.push_back(
        absl::StrCat("model path '", other.model_path, "' (rank 0: '", leader.model_path, "')"));
  }
  if (other.config_hash != leader.config_hash) {
    diffs.push_back(
        absl::StrCat("configuration (config hash ", absl::Hex(other.config_hash, absl::kZeroPad16),
                     ", rank 0: ", absl::Hex(leader.config_hash, absl::kZeroPad16), ")"));
  }
  if (other.build_id != leader.build_id) {
    diffs.push_back(
        absl::StrCat("build id '", other.build_id, "' (rank 0: '", leader.build_id, "')"));
  }
  if (diffs.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("rank ", rank, " was started with a different ",
                                                    absl::StrJoin(diffs, ", a different ")));
}

absl::Status RunRankHandshake(Communicator& comm, const RankFingerprint& mine,
                              const base::Clock& clock, absl::Duration timeout) {
  if (comm.size() == 1) return absl::OkStatus();
  const base::Nanos deadline = clock.now_ns() + absl::ToInt64Nanoseconds(timeout);
  return comm.rank() == 0 ? Lead(comm, mine, clock, deadline) : Follow(comm, mine, clock, deadline);
}

}  // namespace kvserve::parallel
