#include "parallel/single_process_communicator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kvserve::parallel {
namespace {

absl::Status CheckPeer(absl::string_view op, absl::string_view role, int peer) {
  if (peer != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", role, " rank ", peer, " does not exist (single-process world: rank 0 only)"));
  }
  return absl::OkStatus();
}

absl::Status CheckTag(absl::string_view op, int tag) {
  if (tag < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": tag ", tag, " is negative"));
  return absl::OkStatus();
}

}  // namespace

absl::Status SingleProcessCommunicator::Broadcast(std::vector<std::byte>& /*bytes*/, int root,
                                                  absl::Duration /*timeout*/) {
  return CheckPeer("broadcast", "root", root);
}

absl::Status SingleProcessCommunicator::AllReduceSum(std::span<float> /*values*/,
                                                     absl::Duration /*timeout*/) {
  return absl::OkStatus();
}

absl::Status SingleProcessCommunicator::AllReduceMin(std::span<int64_t> /*values*/,
                                                     absl::Duration /*timeout*/) {
  return absl::OkStatus();
}

absl::Status SingleProcessCommunicator::Send(int dest, int tag, std::span<const std::byte> bytes,
                                             absl::Duration /*timeout*/) {
  if (absl::Status s = CheckPeer("send", "destination", dest); !s.ok()) return s;
  if (absl::Status s = CheckTag("send", tag); !s.ok()) return s;
  self_messages_[tag].emplace_back(bytes.begin(), bytes.end());
  return absl::OkStatus();
}

absl::Status SingleProcessCommunicator::Recv(int source, int tag, std::vector<std::byte>& bytes,
                                             absl::Duration timeout) {
  if (absl::Status s = CheckPeer("recv", "source", source); !s.ok()) return s;
  if (absl::Status s = CheckTag("recv", tag); !s.ok()) return s;
  auto it = self_messages_.find(tag);
  if (it == self_messages_.end() || it->second.empty()) {
    // Nobody else can send: waiting out the timeout could not change the answer.
    return absl::DeadlineExceededError(absl::StrCat(
        "recv from rank 0 (tag ", tag, "): no message within ", absl::FormatDuration(timeout),
        " (single-process world: only rank 0 itself sends)"));
  }
  bytes = std::move(it->second.front());
  it->second.pop_front();
  return absl::OkStatus();
}

absl::Status SingleProcessCommunicator::Barrier(absl::Duration /*timeout*/) {
  return absl::OkStatus();
}

}  // namespace kvserve::parallel
