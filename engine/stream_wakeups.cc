#include "engine/stream_wakeups.h"

#include <utility>

namespace kvserve::engine {

bool StreamWakeups::Push(const std::shared_ptr<TokenStream>& stream, TokenEvent event) {
  // push_quiet reports the wake-up owed only once per batch: the stream is recorded once.
  bool owes = false;
  const bool accepted = stream->push_quiet(std::move(event), &owes);
  if (owes) owed_.push_back(stream);
  return accepted;
}

void StreamWakeups::Close(const std::shared_ptr<TokenStream>& stream) {
  if (stream->close_quiet()) owed_.push_back(stream);
}

void StreamWakeups::Flush() {
  for (const auto& stream : owed_) stream->notify();
  owed_.clear();  // drops the references, keeps the capacity
}

}  // namespace kvserve::engine
