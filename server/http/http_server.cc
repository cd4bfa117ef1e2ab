#include "server/http/http_server.h"

#include <httplib.h>
#include <openssl/ssl.h>

#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <optional>
#include <regex>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/check.h"
#include "server/http/connection_sockets.h"
#include "server/http/request_deadlines.h"
#include "server/http/worker_pool.h"

namespace kvserve::server {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// httplib's task queue interface over our growing pool. The pool is shared with
// HttpServer::Impl: RequestDeadlines asks it whether connections wait for a thread, and it
// outlives the queue, which httplib deletes when listen() returns.
class PoolTaskQueue final : public httplib::TaskQueue {
 public:
  explicit PoolTaskQueue(std::shared_ptr<WorkerPool> pool) : pool_(std::move(pool)) {}
  void enqueue(std::function<void()> fn) override { pool_->Enqueue(std::move(fn)); }
  void shutdown() override { pool_->Shutdown(); }

 private:
  std::shared_ptr<WorkerPool> pool_;
};

// httplib 0.11 listens with a backlog of 5, which drops connections when hundreds of
// clients connect at once; listen() again on the bound socket raises it. `Base` is
// httplib::Server, or httplib::SSLServer for TLS.
template <typename Base>
class Listener final : public Base {
 public:
  using Base::Base;
  void RaiseBacklog(int backlog) { ::listen(this->svr_sock_.load(), backlog); }
};

std::unique_ptr<httplib::Server> MakeServer(const HttpServerOptions& o, std::function<void(int)>& raise_backlog) {
  if (o.tls_cert_path.empty()) {
    auto s = std::make_unique<Listener<httplib::Server>>();
    raise_backlog = [p = s.get()](int b) { p->RaiseBacklog(b); };
    return s;
  }
  // With a client CA, httplib verifies peers (SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT).
  auto s = std::make_unique<Listener<httplib::SSLServer>>(
      o.tls_cert_path.c_str(), o.tls_key_path.c_str(),
      o.tls_client_ca_path.empty() ? nullptr : o.tls_client_ca_path.c_str());
  raise_backlog = [p = s.get()](int b) { p->RaiseBacklog(b); };
  return s;
}

// State of one streaming body, shared by the content provider and its releaser.
struct StreamState {
  std::function<StreamStep(std::string&)> next;
  std::function<void(bool)> on_end;
  std::atomic<bool> ended{false};
  bool completed = false;
  std::string out;  // the provider's buffer, reused from chunk to chunk (connection thread only)

  void End(bool ok) {
    if (ended.exchange(true)) return;
    if (on_end) on_end(ok);
  }
};

HttpRequest Convert(const httplib::Request& req, ConnectionSockets& sockets) {
  HttpRequest r;
  r.method = req.method;
  r.path = req.path;
  r.body = req.body;
  r.remote_addr = req.remote_addr;
  r.remote_port = req.remote_port;
  r.local_port = req.local_port;
  if (req.ssl != nullptr) {
    // The TLS session holds the socket.
    r.find_socket = [fd = SSL_get_fd(req.ssl)]() -> std::optional<int> {
      if (fd < 0) return std::nullopt;
      return fd;
    };
  } else {
    r.find_socket = [&sockets, addr = req.remote_addr, port = req.remote_port, local = req.local_port] {
      return sockets.Find(addr, port, local);
    };
  }
  for (const auto& [k, v] : req.headers) r.headers.emplace_back(k, v);
  return r;
}

void Apply(HttpResponse r, httplib::Response& res) {
  res.status = r.status;
  for (const auto& [k, v] : r.headers) res.set_header(k, v);
  if (!r.next_chunk) {
    res.set_content(r.body, r.content_type.c_str());
    return;
  }
  auto state = std::make_shared<StreamState>();
  state->next = std::move(r.next_chunk);
  state->on_end = std::move(r.on_stream_end);
  res.set_chunked_content_provider(
      r.content_type,
      [state](size_t, httplib::DataSink& sink) {
        std::string& out = state->out;
        out.clear();
        const StreamStep step = state->next(out);
        if (step == StreamStep::kCancel) {
          state->End(false);
          return false;
        }
        // Never write zero bytes: httplib reads an empty write as the end of the body.
        if (!out.empty() && !sink.write(out.data(), out.size())) {
          state->End(false);
          return false;
        }
        if (step == StreamStep::kDone) {
          sink.done();
          state->completed = true;
          state->End(true);
        }
        return true;
      },
      [state](bool) { state->End(state->completed); });
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return {};
}

struct HttpServer::Impl {
  HttpServerOptions options;
  base::Logger logger;
  std::shared_ptr<WorkerPool> pool;  // the connection threads (PoolTaskQueue)
  // Declared before `server`: its connection threads use it until they are joined.
  ConnectionSockets sockets;
  // Declared before `server`: destroyed after it, once no connection thread is left.
  std::unique_ptr<RequestDeadlines> deadlines;  // non-null from construction
  std::function<void(int)> raise_backlog;
  std::unique_ptr<httplib::Server> server;  // plain or TLS; see MakeServer
  std::thread listen_thread;
  std::once_flag stopped;
  // Registered paths (filled before Start, read-only after): the bounded route label.
  absl::flat_hash_set<std::string> routes;
  // Routes with path parameters and their labels (filled before Start, read-only after).
  std::vector<std::pair<std::regex, std::string>> pattern_routes;

  std::string_view RouteLabel(const std::string& path) const {
    if (routes.contains(path)) return path;
    for (const auto& [re, label] : pattern_routes) {
      if (std::regex_match(path, re)) return label;
    }
    return "unmatched";
  }

  httplib::Server::Handler Wrap(HttpHandler handler) {
    return [this, handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
      // The request is read; its handler (a stream, perhaps) may take its time.
      deadlines->MarkServing(req.remote_addr, req.remote_port);
      Apply(handler(Convert(req, sockets)), res);
    };
  }
};

HttpServer::HttpServer(HttpServerOptions options, base::Logger logger)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->logger = std::move(logger);
  impl_->server = MakeServer(impl_->options, impl_->raise_backlog);
  httplib::Server& s = *impl_->server;
  const int max_connections = impl_->options.max_connections;
  impl_->pool = std::make_shared<WorkerPool>(max_connections);
  s.new_task_queue = [pool = impl_->pool] { return new PoolTaskQueue(pool); };
  RequestDeadlineOptions deadline_options;
  deadline_options.request_timeout_seconds = impl_->options.request_timeout_seconds;
  deadline_options.overload_timeout_seconds = impl_->options.overload_request_timeout_seconds;
  impl_->deadlines = std::make_unique<RequestDeadlines>(
      // Overloaded: every connection thread is busy and accepted connections wait. A burst
      // that is still spawning threads is not overload (its connections get a thread at once).
      deadline_options, [pool = impl_->pool] { return pool->saturated(); });
  s.set_payload_max_length(impl_->options.max_body_bytes);
  s.set_tcp_nodelay(true);  // SSE chunks are tiny; Nagle would hold them back
  s.set_keep_alive_max_count(100);
  s.set_keep_alive_timeout(impl_->options.keep_alive_seconds);
  Impl* impl = impl_.get();
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [impl](const httplib::Request& req, httplib::Response& res) {
    // Our handlers always write a body; an empty one means httplib answered by itself.
    if (!res.body.empty() || !impl->options.error_response) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string message;
    switch (res.status) {
      case 404: message = absl::StrCat("route not found: ", req.method, " ", req.path); break;
      case 413:
        message = absl::StrCat("request body too large: the limit is ", impl->options.max_body_bytes,
                               " bytes (server.max_body_bytes)");
        break;
      default: message = absl::StrCat("HTTP error ", res.status); break;
    }
    Apply(impl->options.error_response(res.status, std::move(message)), res);
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([impl](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    impl->logger.error("handler failed: %s", what);
    res.status = 500;
    if (impl->options.error_response) {
      Apply(impl->options.error_response(500, "internal server error"), res);
    }
  });
  // httplib calls the logger once for every response it wrote (also its own 400/404/413
  // and streams, when they end): the one place that sees every final status.
  s.set_logger([impl](const httplib::Request& req, const httplib::Response& res) {
    // The response is out: the next request's clock starts.
    impl->deadlines->MarkReading(req.remote_addr, req.remote_port);
    if (impl->options.on_response) {
      // A 404 from a pattern route (an unknown id) keeps its label: the set stays bounded.
      const std::string_view label = impl->RouteLabel(req.path);
      const bool matched = label != "unmatched" && (res.status != 404 || label != req.path);
      impl->options.on_response(matched ? label : std::string_view("unmatched"), res.status);
    }
    if (impl->logger.enabled(base::LogLevel::kDebug)) {
      impl->logger.debug("%s %s -> %d", req.method, req.path, res.status);
    }
  });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Get(const std::string& path, HttpHandler handler) {
  impl_->routes.insert(path);
  impl_->server->Get(path, impl_->Wrap(std::move(handler)));
}

void HttpServer::Post(const std::string& path, HttpHandler handler) {
  impl_->routes.insert(path);
  impl_->server->Post(path, impl_->Wrap(std::move(handler)));
}

void HttpServer::Route(std::string_view method, const std::string& pattern, const std::string& label,
                       HttpHandler handler) {
  impl_->pattern_routes.emplace_back(std::regex(pattern), label);
  httplib::Server::Handler h = impl_->Wrap(std::move(handler));
  if (method == "GET") {
    impl_->server->Get(pattern, std::move(h));
  } else if (method == "POST") {
    impl_->server->Post(pattern, std::move(h));
  } else {
    KVS_CHECK(method == "DELETE", "unsupported route method");
    impl_->server->Delete(pattern, std::move(h));
  }
}

absl::StatusOr<int> HttpServer::Start() {
  const auto& o = impl_->options;
  if (!impl_->server->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "HTTP: cannot load the TLS certificate ", o.tls_cert_path, " and key ", o.tls_key_path,
        o.tls_client_ca_path.empty() ? "" : absl::StrCat(" or the client CA ", o.tls_client_ca_path)));
  }
  int port = o.port;
  if (port == 0) {
    port = impl_->server->bind_to_any_port(o.host);
    if (port < 0) return absl::UnavailableError(absl::StrCat("HTTP: cannot bind ", o.host, ":0"));
  } else if (!impl_->server->bind_to_port(o.host, port)) {
    return absl::UnavailableError(absl::StrCat("HTTP: cannot bind ", o.host, ":", port,
                                               " (in use? set server.http_port)"));
  }
  impl_->raise_backlog(std::max(128, o.max_connections));
  impl_->deadlines->Start(port);
  impl_->listen_thread = std::thread([this] { impl_->server->listen_after_bind(); });
  // httplib's stop() does nothing until the accept loop runs (is_running()): wait for it,
  // so that a Stop() right after Start() cannot leave the listener blocked in accept().
  while (!impl_->server->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return port;
}

void HttpServer::Stop() {
  std::call_once(impl_->stopped, [this] {
    impl_->server->stop();
    if (impl_->listen_thread.joinable()) impl_->listen_thread.join();
    impl_->deadlines->Stop();
  });
}

}  // namespace kvserve::server
