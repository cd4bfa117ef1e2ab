// HttpServer: our own small HTTP interface, implemented (pimpl) over cpp-httplib so that
// handlers never see the library and an async server could replace it later.
//
// Threading: each connection is served on a thread of a WorkerPool that grows up to
// `max_connections`; a streaming response keeps its thread until it ends. Connections
// that are slow to send their request are closed (RequestDeadlines), so slow clients
// cannot hold every thread. Streaming bodies
// are produced by `HttpResponse::next_chunk`, called repeatedly on that thread; a failed
// write (the client went away) ends the stream with on_stream_end(false).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "base/logger.h"

namespace kvserve::server {

struct HttpRequest {
  std::string method;
  std::string path;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string remote_addr;
  int remote_port = 0;
  int local_port = 0;
  // Finds the connection's socket, for watching it for a hang-up (poll); never read, write
  // or close it. It stays open while the handler and its streaming body run. Costs a system
  // call or two (a descriptor scan on a connection's first call: connection_sockets.h), so
  // handlers call it only when they need it. nullopt when not found.
  std::function<std::optional<int>()> find_socket;

  // Case-insensitive; "" when absent.
  std::string header(std::string_view name) const;
};

// kMore: call again. kDone: the body is complete. kCancel: the client is gone; close the
// connection without finishing the body.
enum class StreamStep { kMore, kDone, kCancel };

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Streaming body (chunked transfer encoding) when set: appends the next bytes to `out`
  // (possibly none, after waiting a little) and says whether more will follow.
  std::function<StreamStep(std::string& out)> next_chunk;
  // Runs once when a streaming body ends: true if next_chunk reached kDone and everything
  // was written, false if the client disconnected or the server stopped first.
  std::function<void(bool completed)> on_stream_end;
};

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                     // 0: an ephemeral port
  uint64_t max_body_bytes = 8ull << 20;
  int max_connections = 512;        // worker threads at most
  int keep_alive_seconds = 5;
  // A connection must deliver a whole request (headers and body; for keep-alive, counted
  // from the previous response) within this, else it is closed; while connections wait for
  // a thread (max_connections busy), within overload_request_timeout_seconds. See
  // request_deadlines.h.
  double request_timeout_seconds = 30.0;
  double overload_request_timeout_seconds = 0.5;
  // HTTPS when set: PEM certificate (chain) and private key files (OpenSSL via cpp-httplib).
  std::string tls_cert_path;
  std::string tls_key_path;
  // Mutual TLS when set (with tls_cert_path): a PEM CA bundle; clients must present a
  // certificate it signed, or the TLS handshake fails (no HTTP response at all).
  std::string tls_client_ca_path;
  // Body of errors raised by the server itself (unknown route: 404, body too large: 413,
  // malformed HTTP: 400). Receives the status and a message.
  std::function<HttpResponse(int status, std::string message)> error_response;
  // Called once per response after it was written (streams: when they end), with the
  // registered route it matched, or "unmatched", so it is safe as a metrics label.
  std::function<void(std::string_view route, int status)> on_response;
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, base::Logger logger);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Exact-path routes; register before Start.
  void Get(const std::string& path, HttpHandler handler);
  void Post(const std::string& path, HttpHandler handler);
  // A route whose path has parameters: `method` GET, POST or DELETE, `pattern` a regex that
  // must match the whole path (handlers read the parameters from HttpRequest::path), `label`
  // its route name for on_response ("/v1/responses/{id}").
  void Route(std::string_view method, const std::string& pattern, const std::string& label,
             HttpHandler handler);

  // Binds and starts accepting; returns the bound port.
  absl::StatusOr<int> Start();
  // Stops accepting, ends open connections (streams still running are cut) and joins.
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::server
