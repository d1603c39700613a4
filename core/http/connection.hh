// HTTP/1.1 on a net::Stream (RFC 9112): request heads parsed in place, keep-alive (also HTTP/1.0
// "Connection: keep-alive"), pipelining with responses in request order, request bodies read and discarded
// (Content-Length or chunked; static locations answer 405 first), Expect: 100-continue, and the timeouts
// client_header_timeout, client_body_timeout, send_timeout, keepalive_timeout, keepalive_requests.
// A malformed request gets its 4xx/5xx and the connection is closed gracefully (lingering close), so the
// response is not lost to a reset and nothing after the bad request is ever processed.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "core/http/exchange.hh"
#include "core/net/stream.hh"

namespace kosoku::http {

class AccessLogSink;

/// One per core: accepts streams and creates a connection for each.
class HttpServer final : public net::AcceptHandler {
 public:
  HttpServer(const CoreContext& core, ContentHandler& static_handler);
  net::StreamHandler* on_accept(net::Stream& s, const config::ListenSocket& listen) override;
  size_t reclaim_idle(size_t max) override;

  const CoreContext& core() const { return core_; }
  ContentHandler& static_handler() { return static_handler_; }

  /// Content handler registry (nginx: the content phase handler set by a location directive such as
  /// proxy_pass). The first registered handler whose predicate accepts the location runs; the static handler
  /// is the fallback. Register before the loop starts. `first`: ahead of those registered so far (a module
  /// that serves some of another module's locations, as the proxy cache does the proxy's).
  using LocationPredicate = bool (*)(const config::LocationConf& loc);
  void add_content_handler(LocationPredicate applies, ContentHandler* handler, bool first = false) {
    handlers_.insert(first ? handlers_.begin() : handlers_.end(), {applies, handler});
  }
  ContentHandler& content_handler(const config::LocationConf& loc) {
    for (const auto& [applies, h] : handlers_) {
      if (applies(loc)) return *h;
    }
    return static_handler_;
  }
  /// Graceful shutdown: idle keep-alive connections close now, busy ones after their current response.
  void begin_shutdown();
  bool shutting_down() const { return shutting_down_; }

  /// Field lines per request head held in the pooled table (Request::fields); a head with more (up to
  /// max_headers and the byte limits) continues on the heap (Request::spilled_fields) until the request ends.
  static constexpr size_t kMaxFields = 100;
  /// The table a request head is parsed into (kMaxFields entries, 4 KB): a connection takes one when it starts
  /// reading a head and gives it back when it goes idle, so an idle keep-alive connection holds none. Up to
  /// kFreeFieldTables given back are kept for the next requests on this core.
  std::unique_ptr<HeaderField[]> take_fields();
  void give_fields(std::unique_ptr<HeaderField[]> table);

  /// Where a connection builds its response head before writing it to the stream (one per core: not kept
  /// by each connection).
  std::string head_scratch;

  /// Access log writer hook (set by main once access logs are opened); may stay null.
  AccessLogSink* access_log = nullptr;
  /// Connections accepted by this core ($connection is core-local: core id in the high bits).
  uint64_t connection_counter = 0;

  // Intrusive list of live connections (for shutdown).
  struct Node {
    Node* prev = nullptr;
    Node* next = nullptr;
  };
  Node live;

 private:
  CoreContext core_;
  ContentHandler& static_handler_;
  std::vector<std::pair<LocationPredicate, ContentHandler*>> handlers_;
  std::vector<std::unique_ptr<HeaderField[]>> free_fields_;
  bool shutting_down_ = false;
};

/// Receives one access-log line per finished request (formatted by the connection).
class AccessLogSink {
 public:
  virtual void log(const config::LocationConf& loc, Exchange& ex, int status, uint64_t bytes_sent,
                   uint64_t body_bytes_sent, uint64_t request_time_ms) = 0;

 protected:
  ~AccessLogSink() = default;
};

}  // namespace kosoku::http
