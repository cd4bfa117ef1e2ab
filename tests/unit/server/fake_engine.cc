#include "tests/unit/server/fake_engine.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "config/fields.h"
#include "tests/unit/server/fake_text_codec.h"

namespace kvserve::server::testing {

namespace {
using Clock = std::chrono::steady_clock;
}

FakeEngine::FakeEngine(FakeEngineOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

FakeEngine::~FakeEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& r : running_) Finish(*r, engine::FinishReason::kAbort);
  for (auto& r : waiting_) Finish(*r, engine::FinishReason::kAbort);
}

absl::StatusOr<std::shared_ptr<engine::TokenStream>> FakeEngine::Submit(engine::RequestSpec spec) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fail_next_) {
    absl::Status s = *fail_next_;
    fail_next_.reset();
    return s;
  }
  if (draining_ || !alive_) return absl::UnavailableError("engine is draining");
  if (spec.n < 1 || spec.max_tokens < 1) return absl::InvalidArgumentError("max_tokens: must be >= 1");
  const int in_flight = static_cast<int>(running_.size() + waiting_.size());
  if (options_.max_running > 0 && options_.max_waiting > 0 &&
      in_flight >= options_.max_running + options_.max_waiting) {
    return absl::ResourceExhaustedError("the waiting queue is full (scheduler.max_waiting)");
  }
  if (auto it = options_.tenant_max_in_flight.find(spec.tenant); it != options_.tenant_max_in_flight.end()) {
    int mine = 0;
    for (const auto& r : running_) mine += r->spec.tenant == spec.tenant;
    for (const auto& r : waiting_) mine += r->spec.tenant == spec.tenant;
    if (mine >= it->second) {
      return absl::ResourceExhaustedError(absl::StrCat("tenant '", spec.tenant, "' is over its quota"));
    }
  }
  auto r = std::make_unique<Request>();
  r->spec = spec;
  r->reply = ScriptedReply(spec.prompt_tokens);
  r->stream = std::make_shared<engine::TokenStream>();
  r->produced.assign(spec.n, 0);
  r->finished.assign(spec.n, false);
  auto stream = r->stream;
  submitted_.push_back(std::move(spec));
  waiting_.push_back(std::move(r));
  cv_.notify_all();
  observe_cv_.notify_all();
  return stream;
}

void FakeEngine::Abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_.push_back(request_id);
  abort_times_.try_emplace(request_id, Clock::now());
  for (auto& r : running_) r->aborted |= r->spec.request_id == request_id;
  for (auto& r : waiting_) r->aborted |= r->spec.request_id == request_id;
  cv_.notify_all();
  observe_cv_.notify_all();
}

engine::EngineStats FakeEngine::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  engine::EngineStats s;
  s.running = static_cast<int>(running_.size());
  s.waiting = static_cast<int>(waiting_.size());
  s.alive = alive_;
  return s;
}

void FakeEngine::StartDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
}

int FakeEngine::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(running_.size() + waiting_.size());
}

void FakeEngine::AbortAll() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : running_) r->aborted = true;
  for (auto& r : waiting_) r->aborted = true;
  cv_.notify_all();
}

void FakeEngine::SetPaused(bool paused) {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = paused;
  cv_.notify_all();
}

void FakeEngine::FailNextSubmit(absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_next_ = std::move(status);
}

void FakeEngine::SetAlive(bool alive) {
  std::lock_guard<std::mutex> lock(mu_);
  alive_ = alive;
}

std::vector<engine::RequestSpec> FakeEngine::submitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

std::vector<std::string> FakeEngine::aborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return aborted_;
}

std::optional<Clock::time_point> FakeEngine::WaitForAbort(const std::string& id,
                                                          std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!observe_cv_.wait_for(lock, timeout, [&] { return abort_times_.count(id) > 0; })) return std::nullopt;
  return abort_times_[id];
}

bool FakeEngine::WaitForSubmitted(size_t count, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return observe_cv_.wait_for(lock, timeout, [&] { return submitted_.size() >= count; });
}

std::string FakeEngine::ScriptedReply(const std::vector<int32_t>& prompt) {
  std::string text;
  for (int32_t id : prompt) {
    if (id >= kFakeByteOffset && id < kFakeImStart) text.push_back(static_cast<char>(id - kFakeByteOffset));
  }
  constexpr std::string_view kOpen = "<<reply>>", kClose = "<</reply>>";
  const size_t open = text.rfind(kOpen);
  if (open == std::string::npos) return {};
  const size_t begin = open + kOpen.size();
  const size_t close = text.find(kClose, begin);
  return close == std::string::npos ? std::string() : text.substr(begin, close - begin);
}

size_t FakeEngine::ScriptOffset(const engine::RequestSpec& spec, int sample) const {
  if (spec.sampling.temperature == 0.0f) return 0;
  const uint64_t seed = spec.sampling.seed.value_or(std::hash<std::string>{}(spec.request_id));
  return static_cast<size_t>((seed + static_cast<uint64_t>(sample) * 7) % options_.script.size());
}

std::string FakeEngine::ExpectedText(std::optional<uint64_t> seed, float temperature, int sample,
                                     int tokens) const {
  engine::RequestSpec spec;
  spec.sampling.seed = seed;
  spec.sampling.temperature = temperature;
  const size_t offset = ScriptOffset(spec, sample);
  std::string text;
  for (int k = 0; k < tokens; ++k) text.push_back(options_.script[(offset + k) % options_.script.size()]);
  return text;
}

void FakeEngine::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto any_aborted = [&] {
      for (auto& r : running_) if (r->aborted) return true;
      for (auto& r : waiting_) if (r->aborted) return true;
      return false;
    };
    cv_.wait(lock, [&] {
      return stopping_ || any_aborted() || (!paused_ && (!running_.empty() || !waiting_.empty()));
    });
    if (stopping_) return;
    while (!waiting_.empty() &&
           (options_.max_running == 0 || static_cast<int>(running_.size()) < options_.max_running)) {
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
    // Finished requests leave the tables under the lock; their events go out after it.
    std::vector<std::unique_ptr<Request>> over;
    auto sweep = [&](auto& table) {
      for (auto it = table.begin(); it != table.end();) {
        if ((*it)->aborted) {
          over.push_back(std::move(*it));
          it = table.erase(it);
        } else {
          ++it;
        }
      }
    };
    sweep(running_);
    sweep(waiting_);
    std::vector<Request*> stepping;
    if (!paused_) {
      for (auto& r : running_) stepping.push_back(r.get());
    }
    lock.unlock();
    for (auto& r : over) Finish(*r, engine::FinishReason::kAbort);
    std::vector<Request*> done;
    for (Request* r : stepping) {
      if (!Step(*r)) done.push_back(r);
    }
    lock.lock();
    std::erase_if(running_, [&](const std::unique_ptr<Request>& r) {
      return std::find(done.begin(), done.end(), r.get()) != done.end();
    });
    observe_cv_.notify_all();
    if (options_.tick.count() > 0) cv_.wait_for(lock, options_.tick, [&] { return stopping_; });
  }
}

bool FakeEngine::Step(Request& r) {
  const engine::RequestSpec& spec = r.spec;
  int unfinished = 0;
  for (int s = 0; s < spec.n; ++s) unfinished += !r.finished[s];
  for (int s = 0; s < spec.n; ++s) {
    if (r.finished[s]) continue;
    const int k = r.produced[s];
    engine::TokenEvent e;
    e.sample_index = s;
    int32_t token;
    if (!r.reply.empty()) {
      if (k < static_cast<int>(r.reply.size())) {
        token = FakeTokenOf(static_cast<unsigned char>(r.reply[k]));
      } else {
        token = kFakeEos;
        e.finish = engine::FinishReason::kStop;
      }
    } else if (options_.eos_after > 0 && k >= options_.eos_after && !spec.ignore_eos && k >= spec.min_tokens) {
      token = kFakeEos;
      e.finish = engine::FinishReason::kStop;
    } else {
      token = FakeTokenOf(static_cast<unsigned char>(
          options_.script[(ScriptOffset(spec, s) + k) % options_.script.size()]));
    }
    e.token_ids.push_back(token);
    if (k == 0 && s == 0 && spec.sampling.embed != scheduler::Pooling::kNone) {
      // (3, 4) x prompt length: normalised, (0.6, 0.8).
      const float len = static_cast<float>(spec.prompt_tokens.size());
      e.embedding = {3.0f * len, 4.0f * len};
    }
    if (k == 0 && s == 0 && spec.sampling.prompt_logprobs >= 0) {
      // Prompt token p scores -0.25 p with rank p; alternatives are byte tokens 1, 2, ...
      for (size_t p = 1; p < spec.prompt_tokens.size(); ++p) {
        engine::TokenLogprobs lp{spec.prompt_tokens[p], -0.25f * static_cast<float>(p), {}};
        lp.rank = static_cast<int32_t>(p);
        for (int t = 0; t < spec.sampling.prompt_logprobs; ++t) {
          lp.top.push_back({kFakeByteOffset + 1 + t, -0.1f - static_cast<float>(t)});
        }
        e.prompt_logprobs.push_back(std::move(lp));
      }
    }
    if (spec.sampling.logprobs > 0) {
      engine::TokenLogprobs lp{token, -0.5f, {}};
      for (int t = 0; t < spec.sampling.logprobs; ++t) {
        lp.top.push_back({t == 0 ? token : kFakeByteOffset + t, -0.5f - static_cast<float>(t)});
      }
      e.logprobs.push_back(std::move(lp));
    }
    ++r.produced[s];
    ++r.completion_tokens;
    if (!e.finish && k + 1 > spec.min_tokens &&
        std::find(spec.stop_token_ids.begin(), spec.stop_token_ids.end(), token) != spec.stop_token_ids.end()) {
      e.finish = engine::FinishReason::kStop;
      e.stop_token_id = token;
    }
    if (!e.finish && r.produced[s] >= spec.max_tokens) e.finish = engine::FinishReason::kLength;
    if (e.finish) {
      r.finished[s] = true;
      if (--unfinished == 0) {
        engine::RequestUsage u;
        u.prompt_tokens = static_cast<int64_t>(spec.prompt_tokens.size());
        u.completion_tokens = r.completion_tokens;
        u.compression.policy = std::string(config::Name(spec.compression.policy.value_or(
            config::CompressionPolicyKind::kFull)));
        u.compression.budget = spec.compression.budget.value_or(0);
        if (spec.compression.audit) u.compression.audit.push_back({1, 8, {1, 2}, 0xfeedfacecafebeefull});
        // A request asking for n-gram speculation reports one guess per token, half accepted
        // (fixed numbers the front-end tests can assert on; the real counts are the engine's).
        if (spec.speculative.method == config::SpeculativeMethod::kNgram) {
          u.spec_draft_tokens = r.completion_tokens;
          u.spec_accepted_tokens = r.completion_tokens / 2;
        }
        e.usage = std::move(u);
      }
    }
    r.stream->push(std::move(e));
  }
  if (unfinished > 0) return true;
  r.stream->close();
  return false;
}

void FakeEngine::Finish(Request& r, engine::FinishReason reason) {
  int unfinished = 0;
  for (int s = 0; s < r.spec.n; ++s) unfinished += !r.finished[s];
  for (int s = 0; s < r.spec.n; ++s) {
    if (r.finished[s]) continue;
    r.finished[s] = true;
    engine::TokenEvent e;
    e.sample_index = s;
    e.finish = reason;
    if (--unfinished == 0) {
      engine::RequestUsage u;
      u.prompt_tokens = static_cast<int64_t>(r.spec.prompt_tokens.size());
      u.completion_tokens = r.completion_tokens;
      e.usage = std::move(u);
    }
    r.stream->push(std::move(e));
  }
  r.stream->close();
}

}  // namespace kvserve::server::testing
