// HTTP/1.1 on a net::Stream (RFC 9112): request heads parsed in place, keep-alive (also HTTP/1.0
// "Connection: keep-alive"), pipelining with responses in request order, request bodies read and discarded
// (Content-Length or chunked; static locations answer 405 first), Expect: 100-continue, and the timeouts
// client_header_timeout, client_body_timeout, send_timeout, keepalive_timeout, keepalive_requests.
// A malformed request gets its 4xx/5xx and the connection is closed gracefully (lingering close), so the
// response is not lost to a reset and nothing after the bad request is ever processed.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config/module.hh"
#include "core/http/exchange.hh"
#include "core/http/module_core.hh"
#include "core/http/phase.hh"
#include "core/net/stream.hh"

namespace kosoku::http {

class AccessLogSink;

/// One per core: accepts streams and creates a connection for each.
class HttpServer final : public net::AcceptHandler {
 public:
  explicit HttpServer(const CoreContext& core);
  ~HttpServer();
  net::StreamHandler* on_accept(net::Stream& s, const config::ListenSocket& listen) override;
  size_t reclaim_idle(size_t max) override;

  const CoreContext& core() const { return core_; }

  /// Creates every module's per-core part (config::modules() order; Module::init_core). Call once, on the
  /// loop's thread, before the loop starts. False with *error set when a module cannot start.
  bool init_modules(std::string* error);
  /// Module `m`'s per-core part, or null (no per-core part, or not created yet).
  ModuleCore* module_core(const config::Module& m) const {
    return m.index < cores_.size() ? cores_[m.index].get() : nullptr;
  }
  /// The content handler the configuration chose for `loc` (LocationConf::content, resolved at load; nginx's
  /// content phase handler set by a location directive such as proxy_pass).
  ContentHandler& content_handler(const config::LocationConf& loc) const {
    ContentHandler* h = loc.content != nullptr ? handlers_[loc.content->index] : nullptr;
    return h != nullptr ? *h : *handlers_[fallback_];
  }
  /// Every module's handlers of `phase` (config/module.hh: Module::phases), in registry order; flattened once
  /// by init_modules.
  std::span<const PhaseHandler> phase_handlers(Phase phase) const {
    return phase_handlers_[static_cast<size_t>(phase)];
  }
  /// Every module's head filters (Module::head_filters), in registry order; flattened once by init_modules.
  std::span<const HeadFilter> head_filters() const { return head_filters_; }
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

  /// Whether a module may take a new connection's stream over (ModuleCore::take_stream: HTTP/2).
  bool takes_streams() const { return !takers_.empty(); }
  /// Asks those modules, in registry order, about the first bytes of a connection on `listen`.
  ModuleCore::Take take_stream(net::Stream& s, const config::ListenSocket& listen) {
    for (ModuleCore* m : takers_) {
      if (ModuleCore::Take t = m->take_stream(s, listen); t != ModuleCore::Take::kNo) return t;
    }
    return ModuleCore::Take::kNo;
  }

  /// A node of the intrusive list of live connections (for shutdown and for reclaiming idle ones), whatever
  /// their protocol. The list's head is a plain Node.
  struct Node {
    Node* prev = nullptr;
    Node* next = nullptr;
    /// Graceful shutdown: an idle connection closes now, a busy one after its responses.
    virtual void shutdown_if_idle() {}
    /// Closes the connection if it is idle (no request in progress, nothing unsent); returns whether it did.
    virtual bool close_if_idle() { return false; }
    void link(Node& head) {
      prev = &head;
      next = head.next;
      if (next != nullptr) next->prev = this;
      head.next = this;
    }
    void unlink() {
      if (prev != nullptr) prev->next = next;
      if (next != nullptr) next->prev = prev;
      prev = next = nullptr;
    }

   protected:
    ~Node() = default;
  };
  struct ListHead final : Node {};
  ListHead live;

 private:
  CoreContext core_;
  std::vector<std::unique_ptr<ModuleCore>> cores_;  // by Module::index
  std::vector<ContentHandler*> handlers_;           // by Module::index; null: the module serves no location
  size_t fallback_ = 0;  // the last module with a content handler (static files): for a conf built by hand
  std::vector<PhaseHandler> phase_handlers_[static_cast<size_t>(Phase::kLog) + 1];  // by Phase
  std::vector<HeadFilter> head_filters_;
  std::vector<ModuleCore*> takers_;  // the module parts whose takes_streams() is true
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
