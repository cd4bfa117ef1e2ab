#include "cache/redis_kv_store.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/absl_compat.h"

namespace kvserve::cache {
namespace {

timeval ToTimeval(double seconds) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  return tv;
}

std::optional<int> ParseInt(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

struct ReplyDeleter {
  void operator()(void* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace

absl::StatusOr<RedisEndpoint> ParseRedisUrl(std::string_view url) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("remote KV URL '", base::AsAbsl(url), "': ", base::AsAbsl(why)));
  };
  constexpr std::string_view kScheme = "redis://";
  if (url.starts_with("rediss://")) {
    // Debian 12's hiredis (0.14) is built without TLS (no hiredis_ssl), so there is nothing
    // to speak TLS with; say so instead of "must start with redis://".
    return bad("rediss:// (TLS) is not supported: this build's hiredis has no TLS; reach Redis over a private "
               "network or a TLS sidecar (stunnel, a service mesh) and use redis://");
  }
  if (!url.starts_with(kScheme)) return bad("must start with redis:// (e.g. redis://127.0.0.1:6379/0)");
  std::string_view rest = url.substr(kScheme.size());
  RedisEndpoint ep;
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    std::string_view db = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!db.empty()) {
      auto n = ParseInt(db);
      if (!n || *n < 0) return bad("the database after '/' must be a number >= 0");
      ep.db = *n;
    }
  }
  if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
    auto n = ParseInt(rest.substr(colon + 1));
    if (!n || *n < 1 || *n > 65535) return bad("the port must be a number in [1,65535]");
    ep.port = *n;
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return bad("needs a host");
  if (rest.find('@') != std::string_view::npos) return bad("credentials in the URL are not supported");
  ep.host = std::string(rest);
  return ep;
}

struct RedisKvStore::Conn {
  redisContext* ctx = nullptr;
  ~Conn() {
    if (ctx != nullptr) redisFree(ctx);
  }
};

RedisKvStore::RedisKvStore(RedisKvStoreOptions options, const base::Clock* clock)
    : options_(std::move(options)), clock_(clock), backoff_(options_.min_backoff_seconds) {}

RedisKvStore::~RedisKvStore() = default;

absl::Status RedisKvStore::Fail(std::string what) {
  ++stats_.errors;
  conn_.reset();
  retry_at_ = clock_->now_ns() + static_cast<base::Nanos>(backoff_ * 1e9);
  backoff_ = std::min(backoff_ * 2, options_.max_backoff_seconds);
  return absl::UnavailableError(absl::StrCat("redis ", options_.endpoint.host, ":", options_.endpoint.port, ": ", what));
}

absl::Status RedisKvStore::EnsureConnected() {
  if (conn_ != nullptr) return absl::OkStatus();
  if (clock_->now_ns() < retry_at_) {
    ++stats_.skipped_down;
    return absl::UnavailableError("redis is down (backing off)");
  }
  auto conn = std::make_unique<Conn>();
  const timeval tv = ToTimeval(options_.timeout_seconds);
  conn->ctx = redisConnectWithTimeout(options_.endpoint.host.c_str(), options_.endpoint.port, tv);
  if (conn->ctx == nullptr) return Fail("cannot allocate a connection");
  if (conn->ctx->err != 0) return Fail(absl::StrCat("connect: ", conn->ctx->errstr));
  if (redisSetTimeout(conn->ctx, tv) != REDIS_OK) return Fail("cannot set the command timeout");
  if (options_.endpoint.db != 0) {
    Reply r(static_cast<redisReply*>(redisCommand(conn->ctx, "SELECT %d", options_.endpoint.db)));
    if (r == nullptr) return Fail(absl::StrCat("SELECT: ", conn->ctx->errstr));
    if (r->type == REDIS_REPLY_ERROR) return Fail(absl::StrCat("SELECT: ", std::string(r->str, r->len)));
  }
  conn_ = std::move(conn);
  if (ever_connected_) ++stats_.reconnects;
  ever_connected_ = true;
  backoff_ = options_.min_backoff_seconds;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::optional<std::string>>> RedisKvStore::GetMany(std::span<const std::string> keys) {
  std::vector<std::optional<std::string>> out(keys.size());
  if (keys.empty()) return out;
  if (absl::Status st = EnsureConnected(); !st.ok()) return st;
  redisContext* c = conn_->ctx;
  // NOTE: one MGET, not a pipeline of GETs: hiredis compacts its read buffer after every
  // reply it hands out, which is quadratic in the bytes of a pipeline of large values
  // (measured: 93 blocks of 48 KiB took ~90 ms as GETs); one array reply is parsed once.
  std::vector<const char*> argv;
  std::vector<size_t> argvlen;
  argv.reserve(keys.size() + 1);
  argvlen.reserve(keys.size() + 1);
  argv.push_back("MGET");
  argvlen.push_back(4);
  for (const auto& k : keys) {
    argv.push_back(k.data());
    argvlen.push_back(k.size());
  }
  Reply r(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), argvlen.data())));
  if (r == nullptr) return Fail(absl::StrCat("MGET: ", c->errstr));
  if (r->type == REDIS_REPLY_ERROR) {
    // A server-side error (e.g. a command renamed away): every key misses, the link is fine.
    ++stats_.errors;
    return out;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements != keys.size()) return Fail("MGET: unexpected reply");
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* e = r->element[i];
    if (e != nullptr && e->type == REDIS_REPLY_STRING) out[i] = std::string(e->str, e->len);
  }
  return out;
}

absl::Status RedisKvStore::PutMany(std::span<const std::pair<std::string, std::string>> entries) {
  if (entries.empty()) return absl::OkStatus();
  if (absl::Status st = EnsureConnected(); !st.ok()) return st;
  redisContext* c = conn_->ctx;
  for (const auto& [k, v] : entries) {
    int rc = options_.ttl_seconds > 0
                 ? redisAppendCommand(c, "SET %b %b EX %lld", k.data(), k.size(), v.data(), v.size(),
                                      static_cast<long long>(options_.ttl_seconds))
                 : redisAppendCommand(c, "SET %b %b", k.data(), k.size(), v.data(), v.size());
    if (rc != REDIS_OK) return Fail("cannot queue SET");
  }
  absl::Status result = absl::OkStatus();
  for (size_t i = 0; i < entries.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK) return Fail(absl::StrCat("SET: ", c->errstr));
    Reply r(static_cast<redisReply*>(raw));
    if (r->type == REDIS_REPLY_ERROR) {
      // e.g. OOM with maxmemory and a noeviction policy: the write is lost, the link is fine.
      ++stats_.errors;
      result = absl::ResourceExhaustedError(absl::StrCat("redis SET: ", std::string(r->str, r->len)));
    }
  }
  return result;
}

}  // namespace kvserve::cache
