#include "engine/engine.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"
#include "base/check.h"
#include "cache/block_hasher.h"
#include "cache/host_kv_cache.h"
#include "config/fields.h"
#include "engine/request_speculation.h"
#include "engine/request_validation.h"

namespace kvserve::engine {
namespace {

constexpr int kMaxSamples = 64;
constexpr const char* kDefaultTenant = "default";

std::vector<std::string> TenantNames(const config::Config& cfg) {
  std::vector<std::string> names;
  for (const auto& t : cfg.tenants) names.push_back(t.name);
  if (std::find(names.begin(), names.end(), kDefaultTenant) == names.end())
    names.push_back(kDefaultTenant);
  return names;
}

scheduler::SchedulerOptions MakeSchedulerOptions(const config::Config& cfg, const ModelInfo& model,
                                                 bool verifies_drafts) {
  scheduler::SchedulerOptions o;
  o.max_num_seqs = cfg.scheduler.max_num_seqs;
  o.max_num_batched_tokens = cfg.scheduler.max_num_batched_tokens;
  o.enable_chunked_prefill = cfg.scheduler.enable_chunked_prefill;
  o.queue_policy = cfg.scheduler.queue_policy;
  o.preemption_mode = cfg.scheduler.preemption_mode;
  o.max_model_len = model.max_model_len;
  o.eos_token_ids = model.eos_token_ids;
  o.kv_window = model.kv_window;
  o.speculation = verifies_drafts;
  o.max_loras = cfg.lora.active() ? cfg.lora.max_loras : 0;
  for (const auto& name : TenantNames(cfg)) {
    scheduler::TenantLimits limits;
    for (const auto& t : cfg.tenants) {
      if (t.name == name) limits = {t.weight, t.max_running};
    }
    o.tenants.push_back(limits);
  }
  return o;
}

FinishReason ToFinishReason(scheduler::SeqFinish f) {
  switch (f) {
    case scheduler::SeqFinish::kEos:
    case scheduler::SeqFinish::kStopToken:
      return FinishReason::kStop;
    case scheduler::SeqFinish::kLength:
    case scheduler::SeqFinish::kMaxModelLen:
      return FinishReason::kLength;
    case scheduler::SeqFinish::kAborted:
      return FinishReason::kAbort;
  }
  return FinishReason::kStop;
}

uint64_t MixSeed(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2));
  x ^= x >> 31;
  x *= 0x7fb5d329728ea185ULL;
  x ^= x >> 27;
  return x;
}

// Bounded reason label of a refused Submit.
std::string RejectReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return "invalid_argument";
    case absl::StatusCode::kPermissionDenied:
      return "permission_denied";
    case absl::StatusCode::kResourceExhausted:
      return "queue_full";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kFailedPrecondition:
      return "failed_precondition";
    default:
      return "other";
  }
}

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

}  // namespace

Engine::Engine(const config::Config& config, ModelInfo model, cache::KvCacheManager& cache,
               ModelRunner& runner, EngineDeps deps)
    : config_(config),
      model_(std::move(model)),
      cache_(cache),
      runner_(runner),
      logger_(deps.logger),
      observer_(deps.observer),
      tiers_(deps.kv_tiers),
      compression_(deps.compression),
      clock_(deps.clock ? deps.clock : std::make_shared<base::SteadyClock>()),
      tenant_names_(TenantNames(config)),
      lora_(deps.lora),
      lora_active_(deps.lora_active),
      draft_model_loaded_(deps.draft_proposer != nullptr),
      spec_row_cost_(deps.spec_row_cost),
      scheduler_(MakeSchedulerOptions(config, model_, runner.verifies_drafts()), cache,
                 deps.draft_proposer) {
  tenant_queued_ = std::make_unique<std::atomic<int>[]>(tenant_names_.size());
  for (size_t i = 0; i < tenant_names_.size(); ++i) tenant_queued_[i] = 0;
  // Demotion tiers' precisions for the bytes-per-token metric, computed once (the backend
  // built the same layouts; a config it refused never reaches here).
  if (config.cache.demote_kv_bytes > 0 && cache_.layout().num_layers > 0) {
    if (auto tiers = cache::DemoteTierLayouts(config.cache, cache_.layout()); tiers.ok()) {
      for (const cache::KvLayout& tl : *tiers) {
        KvTierPrecision p;
        p.k_label = std::string(config::Name(tl.k_dtype()));
        if (tl.key_rank > 0) p.k_label = absl::StrCat(p.k_label, "_rank", tl.key_rank);
        p.v_label = std::string(config::Name(tl.v_dtype()));
        p.k_bytes_per_token = tl.side_bytes_per_token(0);
        p.v_bytes_per_token = tl.side_bytes_per_token(1);
        tier_precisions_.push_back(std::move(p));
      }
    }
  }
}

Engine::~Engine() { Stop(); }

void Engine::Start() {
  KVS_CHECK(!thread_.joinable(), "engine started twice");
  thread_ = std::thread([this] { Loop(); });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<int> Engine::ResolveTenant(const std::string& name) const {
  const std::string& want = name.empty() ? std::string(kDefaultTenant) : name;
  for (size_t i = 0; i < tenant_names_.size(); ++i) {
    if (tenant_names_[i] == want) return static_cast<int>(i);
  }
  return absl::PermissionDeniedError(absl::StrCat("tenant '", want, "' is not configured"));
}

const config::TenantConfig* Engine::tenant_config(int tenant) const {
  for (const auto& t : config_.tenants) {
    if (t.name == tenant_names_[tenant]) return &t;
  }
  return nullptr;
}

absl::StatusOr<ResolvedCompression> Engine::ResolvePolicy(const RequestSpec& spec,
                                                          int tenant) const {
  KVS_ASSIGN_OR_RETURN(ResolvedCompression r,
                       ResolveCompression(spec, config_, tenant_config(tenant), compression_));
  // One sample must fit in the KV pool on its own, or it could never run.
  const int64_t prompt = static_cast<int64_t>(spec.prompt_tokens.size());
  int64_t need = std::min<int64_t>(r.footprint(prompt, spec.max_tokens), model_.max_model_len);
  if (model_.kv_window > 0) {
    // Every layer windowed: the KV held stays within the window, one step's rows and the
    // partial block (Scheduler releases the rest after each step).
    need = std::min<int64_t>(
        need, model_.kv_window + config_.scheduler.max_num_batched_tokens + cache_.block_size());
  }
  if (cache_.num_window_groups() > 0) {
    // Layer groups: each window table holds up to the window, one step's rows and a block.
    need +=
        cache_.num_window_groups() *
        std::min<int64_t>(need, cache_.group_window() + config_.scheduler.max_num_batched_tokens +
                                    cache_.block_size());
  }
  if (need > cache_.max_tokens()) {
    return Invalid("max_tokens",
                   absl::StrCat("the request can hold ", need,
                                " KV tokens, more than the KV pool (", cache_.max_tokens(),
                                " tokens); lower max_tokens, compress, or raise cache.kv_bytes"));
  }
  return r;
}

absl::Status Engine::Validate(const RequestSpec& spec) const {
  if (spec.request_id.empty()) return Invalid("request_id", "must not be empty");
  if (spec.prompt_tokens.empty()) return Invalid("prompt", "must contain at least one token");
  for (int32_t t : spec.prompt_tokens) {
    if (t < 0 || t >= model_.vocab_size) {
      return Invalid("prompt", absl::StrCat("token id ", t, " is outside the vocabulary [0,",
                                            model_.vocab_size, ")"));
    }
  }
  if (spec.max_tokens < 1) return Invalid("max_tokens", "must be at least 1");
  if (spec.min_tokens < 0 || spec.min_tokens > spec.max_tokens) {
    return Invalid("min_tokens", "must be in [0, max_tokens]");
  }
  if (spec.n < 1 || spec.n > kMaxSamples)
    return Invalid("n", absl::StrCat("must be in [1,", kMaxSamples, "]"));
  KVS_RETURN_IF_ERROR(ValidateSampling(spec, model_.vocab_size));
  if (!runner_.scores_prompts() && spec.sampling.embed != scheduler::Pooling::kNone) {
    return Invalid("input", "this backend does not compute embeddings (the CPU backend does)");
  }
  if (!runner_.scores_prompts() && spec.sampling.prompt_logprobs >= 0) {
    return Invalid("prompt_logprobs",
                   "this backend does not compute prompt logprobs (the CPU backend does)");
  }
  KVS_RETURN_IF_ERROR(ValidateSpeculative(spec.speculative, draft_model_loaded_));
  int64_t prompt = static_cast<int64_t>(spec.prompt_tokens.size());
  if (prompt >= model_.max_model_len) {
    return Invalid("prompt",
                   absl::StrCat("is ", prompt, " tokens; the model's context is ",
                                model_.max_model_len, " tokens (prompt + at least one new token)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<TokenStream>> Engine::Submit(RequestSpec spec) {
  RequestLabels labels;
  if (observer_ != nullptr) {
    labels.tenant = spec.tenant.empty() ? std::string(kDefaultTenant) : spec.tenant;
    labels.policy = spec.compression.policy ? std::string(config::Name(*spec.compression.policy))
                                            : std::string();
  }
  auto stream = SubmitChecked(std::move(spec));
  if (!stream.ok() && observer_ != nullptr) {
    observer_->OnRequestRejected(labels, RejectReason(stream.status().code()));
  }
  return stream;
}

absl::StatusOr<std::shared_ptr<TokenStream>> Engine::SubmitChecked(RequestSpec spec) {
  if (model_unreachable_.load()) {
    return absl::UnavailableError("the model is unreachable: a pipeline stage failed");
  }
  if (draining_.load() || !alive_.load()) {
    return absl::UnavailableError(alive_.load() ? "server is draining" : "engine has stopped");
  }
  KVS_RETURN_IF_ERROR(Validate(spec));
  KVS_ASSIGN_OR_RETURN(int tenant, ResolveTenant(spec.tenant));
  KVS_ASSIGN_OR_RETURN(ResolvedCompression compression, ResolvePolicy(spec, tenant));

  // Admission: reserve a queue slot, globally and for the tenant, or refuse.
  if (queued_.fetch_add(1) >= config_.scheduler.max_waiting) {
    queued_.fetch_sub(1);
    return absl::ResourceExhaustedError(
        absl::StrCat("waiting queue is full (", config_.scheduler.max_waiting, " requests)"));
  }
  int tenant_limit = 0;
  for (const auto& t : config_.tenants) {
    if (t.name == tenant_names_[tenant]) tenant_limit = t.max_queued;
  }
  if (tenant_queued_[tenant].fetch_add(1) >= tenant_limit && tenant_limit > 0) {
    tenant_queued_[tenant].fetch_sub(1);
    queued_.fetch_sub(1);
    return absl::ResourceExhaustedError(absl::StrCat(
        "tenant '", tenant_names_[tenant], "' has too many queued requests (", tenant_limit, ")"));
  }
  if (!spec.sampling.seed) {
    spec.sampling.seed = MixSeed(config_.engine.seed, next_request_number_.fetch_add(1));
  }
  absl::StatusOr<lora::AdapterHandle> adapter = PinAdapter(spec.lora);
  if (!adapter.ok()) {
    tenant_queued_[tenant].fetch_sub(1);
    queued_.fetch_sub(1);
    return adapter.status();
  }
  auto stream = std::make_shared<TokenStream>();
  Command cmd;
  cmd.kind = Command::Kind::kSubmit;
  cmd.lora = *std::move(adapter);
  cmd.spec = std::move(spec);
  cmd.stream = stream;
  cmd.tenant = tenant;
  cmd.compression = std::move(compression);
  cmd.arrival = clock_->now_ns();
  in_flight_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      in_flight_.fetch_sub(1);
      tenant_queued_[tenant].fetch_sub(1);
      queued_.fetch_sub(1);
      return absl::UnavailableError("engine has stopped");
    }
    inbox_.push_back(std::move(cmd));
  }
  cv_.notify_one();
  return stream;
}

void Engine::Abort(const std::string& request_id) { PostAbort(request_id, FinishReason::kAbort); }

void Engine::FinishAsStopped(const std::string& request_id) {
  PostAbort(request_id, FinishReason::kStop);
}

void Engine::PostAbort(const std::string& request_id, FinishReason reason) {
  Command cmd;
  cmd.kind = Command::Kind::kAbort;
  cmd.request_id = request_id;
  cmd.reason = reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(cmd));
  }
  cv_.notify_one();
}

void Engine::AbortAll() {
  Command cmd;
  cmd.kind = Command::Kind::kAbortAll;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(cmd));
  }
  cv_.notify_one();
}

void Engine::StartDrain() { draining_.store(true); }

EngineStats Engine::Stats() const {
  EngineStats s;
  s.running = stat_running_.load();
  s.waiting = stat_waiting_.load();
  s.swapped = stat_swapped_.load();
  s.kv_usage = stat_kv_usage_.load();
  s.alive = alive_.load() && !model_unreachable_.load();
  return s;
}

void Engine::Loop() {
  logger_.info("engine loop started: max_num_seqs=%d max_num_batched_tokens=%d pool=%d tokens",
               config_.scheduler.max_num_seqs, config_.scheduler.max_num_batched_tokens,
               static_cast<int>(cache_.max_tokens()));
  if (observer_ != nullptr && (tiers_ != nullptr || cache_.host_cache_enabled()))
    ReportTiers(cache_.usage());
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Sleep when there is nothing to run (or nothing that can run: see Step).
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || tier_wakeup_ ||
               (scheduler_.has_work() && !warned_stuck_);
      });
      if (stop_) break;
      tier_wakeup_ = false;
      commands_.swap(inbox_);
    }
    for (auto& cmd : commands_) Apply(cmd);
    commands_.clear();
    // Rejections and aborts reach their consumers now, not after the step below.
    wakeups_.Flush();
    // Remote lookups answered: their blocks land in the host tier, the sequences wait again.
    if (tiers_ != nullptr) {
      tiers_->ApplyReplies(cache_, scheduler_);
      // The link went down or came back while idle: the metrics say so without traffic.
      if (observer_ != nullptr && tiers_->remote_available() != reported_remote_up_)
        ReportTiers(cache_.usage());
    }
    if (scheduler_.has_work()) Step();
    if (lora_active_ != nullptr) ReportLora();
    // Each consumer wakes once for everything the step gave it (stream_wakeups.h).
    wakeups_.Flush();
  }
  // Requests still in the inbox were accepted too: add them so that they end like the rest.
  {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.swap(inbox_);
  }
  for (auto& cmd : commands_) {
    if (cmd.kind == Command::Kind::kSubmit) AddRequest(cmd);
  }
  commands_.clear();
  FailAll(absl::CancelledError("engine stopped"));
  wakeups_.Flush();
  alive_.store(false);
}

void Engine::Apply(Command& cmd) {
  switch (cmd.kind) {
    case Command::Kind::kSubmit:
      AddRequest(cmd);
      break;
    case Command::Kind::kAbort: {
      auto it = request_ids_.find(cmd.request_id);
      if (it != request_ids_.end()) AbortRequest(it->second, cmd.reason);
      break;
    }
    case Command::Kind::kAbortAll: {
      std::vector<uint64_t> keys;
      for (const auto& [key, r] : requests_) keys.push_back(key);
      for (uint64_t key : keys) AbortRequest(key, FinishReason::kAbort);
      break;
    }
  }
}

void Engine::AddRequest(Command& cmd) {
  RequestSpec& spec = cmd.spec;
  uint64_t key = next_key_++;
  Request r(cmd.compression);
  r.id = spec.request_id;
  r.stream = cmd.stream;
  r.unfinished = spec.n;
  r.generated.assign(spec.n, 0);
  r.embedding.set_pooling(spec.sampling.embed);
  r.timeline.labels = {tenant_names_[cmd.tenant],
                       std::string(config::Name(cmd.compression.requested))};
  r.timeline.arrival = cmd.arrival;
  r.timeline.prompt_tokens = static_cast<int64_t>(spec.prompt_tokens.size());
  if (request_ids_.contains(r.id)) {
    // Duplicate ids would make Abort ambiguous: refuse the newcomer.
    TokenEvent e;
    e.finish = FinishReason::kError;
    e.error = absl::StrCat("request_id '", r.id, "' is already in flight");
    wakeups_.Push(cmd.stream, std::move(e));
    wakeups_.Close(cmd.stream);
    queued_.fetch_sub(1);
    tenant_queued_[cmd.tenant].fetch_sub(1);
    in_flight_.fetch_sub(1);
    return;
  }
  // Prefix-cache isolation: blocks are keyed by model, tenant group and cache_salt.
  std::string group = tenant_names_[cmd.tenant];
  for (const auto& t : config_.tenants) {
    if (t.name == group && !t.prefix_cache_group.empty()) group = t.prefix_cache_group;
  }
  // Prompt logprobs need every prompt row computed: a scoring request shares no prefix blocks
  // (its own key; after a preemption it may hit its own blocks, whose rows it already scored).
  const bool scores =
      spec.sampling.prompt_logprobs >= 0 || spec.sampling.embed == scheduler::Pooling::kMean;
  // LoRA: the adapter's content digest (never its name) joins the model identity, so two
  // adapters never share KV, one adapter shares with itself, and a reload with new weights
  // never meets its old blocks; the host and remote tiers key on the same chain.
  std::string model_key = model_.name;
  if (cmd.lora) {
    absl::StrAppend(&model_key, "\x1flora:", cmd.lora->digest().hex());
    r.timeline.lora = cmd.lora.name();
    r.lora_id = lora_active_->Add(std::move(cmd.lora));
  }
  cache::PrefixKey prefix_key = cache::MakePrefixKey(
      model_key, group,
      scores ? absl::StrCat(spec.cache_salt, "\x1fscore:", key) : spec.cache_salt);
  cache::SeqId first{next_seq_};
  for (int k = 0; k < spec.n; ++k) {
    scheduler::SequenceState s;
    s.id = cache::SeqId{next_seq_++};
    s.request_key = key;
    s.tenant = cmd.tenant;
    s.priority = spec.priority;
    s.arrival = cmd.arrival;
    s.arrival_seq = arrival_seq_++;
    s.sampling = spec.sampling;
    s.sampling.sample_index = k;
    // min_tokens is enforced by masking what would end the sample (vLLM's semantics): the
    // sampler cannot pick EOS or a stop id before min_tokens tokens.
    s.sampling.min_tokens = spec.min_tokens;
    s.sampling.min_tokens_banned.clear();
    if (spec.min_tokens > 0) {
      if (!spec.ignore_eos) s.sampling.min_tokens_banned = model_.eos_token_ids;
      s.sampling.min_tokens_banned.insert(s.sampling.min_tokens_banned.end(),
                                          spec.stop_token_ids.begin(), spec.stop_token_ids.end());
    }
    s.stop.max_tokens = spec.max_tokens;
    s.stop.min_tokens = spec.min_tokens;
    s.stop.ignore_eos = spec.ignore_eos;
    s.stop.stop_token_ids = spec.stop_token_ids;
    s.prefix_key = prefix_key;
    s.lora_id = r.lora_id;
    s.tokens = spec.prompt_tokens;
    s.num_prompt_tokens = static_cast<int32_t>(spec.prompt_tokens.size());
    s.compression = cmd.compression.params;
    s.compression_auto = cmd.compression.auto_mode;
    s.max_chunk = cmd.compression.max_chunk;
    if (scores)
      s.max_chunk =
          s.max_chunk > 0 ? std::min(s.max_chunk, kPromptScoringChunk) : kPromptScoringChunk;
    s.spec = ResolveSpeculative(config_.speculative, spec.speculative);
    if (spec_row_cost_ > 0.0) s.spec.row_cost = spec_row_cost_;
    if (k > 0) s.fork_parent = first;
    r.seqs.push_back(s.id);
    seq_owner_[s.id.value()] = {key, k};
    scheduler_.Add(std::move(s));
  }
  request_ids_[r.id] = key;
  requests_.emplace(key, std::move(r));
}

void Engine::Forget(uint64_t key) {
  auto it = requests_.find(key);
  if (it == requests_.end()) return;
  Request& r = it->second;
  if (!r.admitted) {
    queued_.fetch_sub(1);
    for (size_t t = 0; t < tenant_names_.size(); ++t) {
      if (tenant_names_[t] == r.timeline.labels.tenant) tenant_queued_[t].fetch_sub(1);
    }
  }
  for (cache::SeqId s : r.seqs) seq_owner_.erase(s.value());
  request_ids_.erase(r.id);
  if (r.lora_id >= 0) lora_active_->Release(r.lora_id, r.admitted);
  // Counters first: a consumer that sees the stream end may immediately look at them.
  in_flight_.fetch_sub(1);
  std::shared_ptr<TokenStream> stream = std::move(r.stream);
  requests_.erase(it);
  wakeups_.Close(stream);
}

void Engine::AbortRequest(uint64_t key, FinishReason reason, const std::string& error,
                          bool unavailable) {
  auto it = requests_.find(key);
  if (it == requests_.end()) return;
  Request& r = it->second;
  for (size_t k = 0; k < r.seqs.size(); ++k) {
    if (!seq_owner_.contains(r.seqs[k].value())) continue;  // sample already finished
    scheduler_.Abort(r.seqs[k]);
    TokenEvent e;
    e.error = error;
    e.unavailable = unavailable;
    FinishSample(r, key, static_cast<int>(k), reason, std::nullopt, std::move(e));
    if (!requests_.contains(key)) return;  // that was the last sample
  }
}

void Engine::FinishSample(Request& r, uint64_t key, int sample, FinishReason reason,
                          std::optional<int32_t> stop_token, TokenEvent event) {
  seq_owner_.erase(r.seqs[sample].value());
  event.sample_index = sample;
  event.finish = reason;
  event.stop_token_id = stop_token;
  --r.unfinished;
  if (r.unfinished == 0) {
    r.timeline.finished = clock_->now_ns();
    r.timeline.finish = reason;
    if (r.timeline.first_token != 0) {
      r.timeline.decode_ns = r.timeline.finished - r.timeline.first_token;
    }
    RequestUsage usage;
    usage.prompt_tokens = r.timeline.prompt_tokens;
    for (int64_t g : r.generated) usage.completion_tokens += g;
    usage.cached_prompt_tokens = r.timeline.cached_prompt_tokens;
    usage.compression = r.compression.Summary();
    usage.spec_draft_tokens = r.spec_draft_tokens;
    usage.spec_accepted_tokens = r.spec_accepted_tokens;
    r.timeline.generation_tokens = usage.completion_tokens;
    r.timeline.compression = usage.compression;
    event.usage = std::move(usage);
    wakeups_.Push(r.stream, std::move(event));
    if (observer_ != nullptr) observer_->OnRequestFinished(r.timeline);
    Forget(key);
    return;
  }
  wakeups_.Push(r.stream, std::move(event));
}

void Engine::OnScheduled(const scheduler::StepPlan& plan) {
  base::Nanos now = clock_->now_ns();
  for (const auto& q : plan.seqs) {
    auto owner = seq_owner_.find(q.seq.value());
    if (owner == seq_owner_.end()) continue;
    Request& r = requests_.at(owner->second.first);
    if (owner->second.second == 0) {
      r.compression.OnScheduled(q.kv_len_after, q.first_position + q.num_tokens,
                                cache_.kv_bytes_held(q.seq));
    }
    if (!r.admitted) {
      r.admitted = true;
      if (r.lora_id >= 0) lora_active_->MarkRunning(r.lora_id);
      r.timeline.first_scheduled = now;
      r.timeline.cached_prompt_tokens = q.first_position;  // prefix-cache hit of the first sample
      queued_.fetch_sub(1);
      for (size_t t = 0; t < tenant_names_.size(); ++t) {
        if (tenant_names_[t] == r.timeline.labels.tenant) tenant_queued_[t].fetch_sub(1);
      }
    }
  }
}

void Engine::Publish(const std::vector<scheduler::SeqUpdate>& updates) {
  base::Nanos now = clock_->now_ns();
  for (const auto& u : updates) {
    auto owner = seq_owner_.find(u.seq.value());
    if (owner == seq_owner_.end()) continue;
    auto [key, sample] = owner->second;
    Request& r = requests_.at(key);
    TokenEvent e;
    e.sample_index = sample;
    e.prompt_logprobs = r.prompt_logprobs.Take();  // the first event only
    e.embedding = r.embedding.Take();
    if (u.token) {
      e.token_ids.push_back(u.token->token_id);
      if (!u.token->top_logprobs.empty() || u.token->logprob != 0.0f) {
        TokenLogprobs lp;
        lp.token_id = u.token->token_id;
        lp.logprob = u.token->logprob;
        for (const auto& [id, p] : u.token->top_logprobs) lp.top.push_back({id, p});
        e.logprobs.push_back(std::move(lp));
      }
      ++r.generated[sample];
      if (r.timeline.first_token == 0) {
        r.timeline.first_token = now;
        r.timeline.prefill_ns = now - r.timeline.first_scheduled;
      }
      if (observer_ != nullptr) {
        observer_->OnTokens(r.timeline.labels, 1, r.last_token == 0 ? 0 : now - r.last_token);
      }
      r.last_token = now;
    }
    if (u.finish) {
      FinishSample(r, key, sample, ToFinishReason(*u.finish), u.stop_token, std::move(e));
    } else {
      wakeups_.Push(r.stream, std::move(e));
    }
  }
}

void Engine::FailAll(const absl::Status& status) {
  std::vector<uint64_t> keys;
  for (const auto& [key, r] : requests_) keys.push_back(key);
  for (uint64_t key : keys) {
    AbortRequest(
        key,
        status.code() == absl::StatusCode::kCancelled ? FinishReason::kAbort : FinishReason::kError,
        std::string(status.message()));
  }
}

void Engine::WakeForTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tier_wakeup_ = true;
  }
  cv_.notify_one();
}

void Engine::Step() {
  base::Nanos started = clock_->now_ns();
  // While the remote tier is down nobody waits for it (local tiers only).
  if (tiers_ != nullptr) scheduler_.set_remote_lookups(tiers_->remote_available());
  scheduler_.set_compress_auto(auto_pressure_);
  scheduler_.Schedule(plan_);
  if (tiers_ != nullptr) tiers_->SendLookups(scheduler_);
  // A plan that moves KV (swap-in of a sequence that runs from the next step on, copies) must
  // reach the runner even when it computes nothing: the cache manager already counts those
  // blocks as resident, and the next step would read KV that was never copied.
  if (plan_.seqs.empty() && !plan_.moves_kv()) {
    // Work exists but nothing can run (e.g. every waiting request needs more blocks than
    // are free and nothing runs that could free them). Submit's validation makes this
    // unreachable for single requests; sleep until something new arrives.
    if (!plan_.finished.empty() || !plan_.preempted.empty()) {
      // The runner still has to forget these sequences.
      (void)runner_.Execute(plan_, result_);
    }
    if (tiers_ != nullptr) tiers_->PublishWrites(cache_);
    // Publish the state anyway: after aborts the gauges would otherwise keep showing them.
    ReportStep(started, plan_);
    if (scheduler_.num_running() == 0 && !warned_stuck_) {
      warned_stuck_ = true;
      // Only worth a warning when something is actually waiting (a step that merely told
      // the runner to forget aborted sequences lands here too).
      // (Sequences parked for the remote tier are not stuck: their lookup wakes the loop.)
      if (scheduler_.num_waiting() > scheduler_.num_waiting_for_remote()) {
        logger_.warn("no waiting request fits in the KV pool; waiting for new requests");
      }
    }
    return;
  }
  warned_stuck_ = false;
  for (cache::SeqId id : plan_.preempted) {
    auto owner = seq_owner_.find(id.value());
    if (owner != seq_owner_.end()) ++requests_.at(owner->second.first).timeline.num_preemptions;
  }
  OnScheduled(plan_);
  absl::Status st = runner_.Execute(plan_, result_);
  if (!st.ok()) {
    logger_.error("model runner failed at step %d: %s", static_cast<int>(plan_.step_id),
                  std::string(st.message()));
    // Fail the requests of this step; keep serving the others.
    std::vector<uint64_t> keys;
    for (const auto& q : plan_.seqs) {
      auto owner = seq_owner_.find(q.seq.value());
      if (owner != seq_owner_.end()) keys.push_back(owner->second.first);
    }
    // A stage that died or hangs (the pipeline link's Unavailable / DeadlineExceeded): 503.
    const bool unavailable = absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st);
    if (unavailable) model_unreachable_.store(true);
    for (uint64_t key : keys)
      AbortRequest(key, FinishReason::kError, std::string(st.message()), unavailable);
    if (tiers_ != nullptr) tiers_->DiscardWrites(cache_);
    return;
  }
  if (!result_.compactions.empty()) OnCompactions(result_);
  for (const scheduler::PromptLogprob& p : result_.prompt_logprobs) {
    auto owner = seq_owner_.find(p.seq.value());
    if (owner != seq_owner_.end()) requests_.at(owner->second.first).prompt_logprobs.Add(p);
  }
  for (const scheduler::HiddenPart& p : result_.hidden) {
    auto owner = seq_owner_.find(p.seq.value());
    if (owner != seq_owner_.end()) requests_.at(owner->second.first).embedding.Add(p);
  }
  CountSpeculation(plan_, result_);
  updates_.clear();
  scheduler_.Update(plan_, result_, updates_);
  // Blocks committed (write-through) or evicted by the host tier (write-back) this step.
  if (tiers_ != nullptr) tiers_->PublishWrites(cache_);
  Publish(updates_);
  ReportStep(started, plan_);
}

void Engine::CountSpeculation(const scheduler::StepPlan& plan,
                              const scheduler::StepResult& result) {
  spec_drafts_ = spec_draft_tokens_ = spec_accepted_tokens_ = 0;
  std::fill(spec_accepted_per_position_.begin(), spec_accepted_per_position_.end(), 0);
  size_t next = 0;
  for (const auto& q : plan.seqs) {
    if (!q.sample) continue;
    size_t count =
        1;  // as Scheduler::Update reads them: 1 + accepted entries per drafting sequence
    while (count <= static_cast<size_t>(q.num_draft) && next + count < result.sampled.size() &&
           result.sampled[next + count].seq == q.seq) {
      ++count;
    }
    next += count;
    if (q.num_draft == 0) continue;
    ++spec_drafts_;
    spec_draft_tokens_ += q.num_draft;
    spec_accepted_tokens_ += static_cast<int>(count) - 1;
    if (auto owner = seq_owner_.find(q.seq.value()); owner != seq_owner_.end()) {
      Request& r = requests_.at(owner->second.first);
      r.spec_draft_tokens += q.num_draft;
      r.spec_accepted_tokens += static_cast<int64_t>(count) - 1;
    }
    if (spec_accepted_per_position_.size() < static_cast<size_t>(q.num_draft)) {
      spec_accepted_per_position_.resize(static_cast<size_t>(q.num_draft), 0);
    }
    for (size_t i = 0; i + 1 < count; ++i) ++spec_accepted_per_position_[i];
  }
}

void Engine::OnCompactions(const scheduler::StepResult& result) {
  for (const scheduler::Compaction& c : result.compactions) {
    auto owner = seq_owner_.find(c.seq.value());
    if (owner == seq_owner_.end()) continue;
    Request& r = requests_.at(owner->second.first);
    const scheduler::SequenceState* seq = scheduler_.find(c.seq);
    if (seq == nullptr) continue;
    if (owner->second.second == 0) r.compression.OnRound(c, seq->tokens);
    if (observer_ == nullptr) continue;
    CompressionRoundStats stats;
    stats.labels = r.timeline.labels;
    stats.score_ns = c.score_ns;
    stats.select_ns = c.select_ns;
    stats.compact_ns = c.compact_ns;
    stats.evicted_tokens = static_cast<int64_t>(c.evicted_positions.size());
    stats.evicted_prompt_tokens = c.evicted_prompt_tokens;
    stats.blocks_reclaimed = c.blocks_freed;
    stats.bytes_moved = c.bytes_moved;
    stats.demoted_tokens = c.demoted_tokens;
    const double t = static_cast<double>(std::max<int64_t>(1, c.next_position));
    for (int64_t p : c.evicted_positions) {
      stats.evicted_relative_positions.push_back(static_cast<double>(p) / t);
      stats.evicted_ages.push_back(c.next_position - p);
    }
    observer_->OnCompressionRound(stats);
  }
}

// Hysteresis: `auto` requests compress from the step the pool crosses the high watermark
// until it falls under the low one, so the mode does not flap around a single threshold.
void Engine::UpdatePressure(double kv_usage) {
  const bool before = auto_pressure_;
  if (kv_usage >= config_.compression.auto_high_watermark) auto_pressure_ = true;
  if (kv_usage <= config_.compression.auto_low_watermark) auto_pressure_ = false;
  // The switch can flip many times a minute under pressure: debug, not info (the
  // kvserve_kv_cache_usage_perc gauge shows the same story).
  if (before != auto_pressure_) {
    logger_.debug("auto compression %s at KV pool usage %.3f", auto_pressure_ ? "on" : "off",
                  kv_usage);
  }
}

}  // namespace kvserve::engine
