// The reverse-proxy content handler (nginx's proxy_pass): forwards the exchange to an upstream group and
// streams the response back, both directions with bounded memory.
//
// Per request (ProxyState, the exchange's ContentState; declared in proxy_state.hh, its request side in
// proxy_handler.cc, its response side in proxy_response.cc):
//   1. choose a peer (upstream.hh Balancer), take a cached keepalive connection to it or connect
//      (proxy_connect_timeout);
//   2. send the request head (proxy_request.hh) and stream the body: Content-Length bodies as they come;
//      chunked bodies are collected up to kReplayLimit first and sent de-chunked with Content-Length when they
//      end within it, otherwise re-chunked (proxy_http_version 1.1) or refused with 411 (HTTP/1.0 upstream:
//      kosoku has no temp files to buffer an unbounded body). Never both framings (RFC 9112 §6.1).
//      The client body is paused whenever the upstream has more than kBodyHighWater bytes unsent
//      (proxy_send_timeout runs while the upstream does not take them);
//   3. parse the response head (http/response_parser.hh): it must fit in proxy_buffer_size and arrive within
//      proxy_read_timeout of the request being sent (nginx); skip 1xx (together within one more
//      proxy_buffer_size); apply proxy_next_upstream (error, timeout, invalid_header, http_5xx/403/404/429;
//      only while nothing has been sent to the client, only for idempotent methods once the request went out
//      unless non_idempotent, only while the body read so far is still held for replay, within
//      proxy_next_upstream_tries/_timeout);
//      timeouts give 504, other failures 502 (nginx);
//   4. stream the content to the client: de-chunked, re-chunked by the client connection when the length is
//      unknown; the bytes go through a per-request ring (ref_ring.hh) with zero-copy write_ref: with
//      proxy_buffering on it holds proxy_buffers N × SIZE (default 8 × 4k) and at most proxy_busy_buffers_size
//      (default 8k) of it is in flight to the client until the response has been read whole; with it off, one
//      proxy_buffer_size buffer. The upstream is not read while the ring is full (kosoku has no temp files, so
//      this bounds the memory per request whatever the body size). A response whose content is
//      cut off (EOF, reset, read timeout, bad chunk) aborts the client connection, so the client never sees a
//      truncated response as complete;
//   5. a response that ended cleanly on an HTTP/1.1 (or keep-alive) connection whose request was fully sent
//      returns the connection to the group's keepalive cache; everything else closes it. A client that goes
//      away (reset, or FIN while the upstream works: nginx's check_broken_connection) closes the upstream
//      connection (never cached).
// Every try is recorded in the response head (http::UpstreamState: address, status, connect/header/response
// times, body bytes) for $upstream_addr, $upstream_status, $upstream_*_time and $upstream_response_length;
// Location and Refresh go through proxy_redirect (proxy_request.hh: rewrite_redirects).
// Pipelined client requests are answered in order: the client connection hands over one request at a time.
//
// Seam for the cache (proxy_cache): ProxyHooks::intercept runs before anything goes upstream and may
// answer the request from elsewhere (a hit) or call ProxyModule::forward later; ProxyHooks::observe is asked
// for an UpstreamObserver when a final response head arrives, which then sees the decoded content and learns
// whether it ended complete (only a complete response may be stored).
#pragma once

#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "core/http/connection.hh"
#include "core/http/exchange.hh"
#include "core/http/response_parser.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/proxy/upstream.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::proxy {

/// Sees one upstream response as the proxy passes it on (e.g. a cache fill).
class UpstreamObserver {
 public:
  virtual ~UpstreamObserver() = default;
  /// The final response head as received (all fields, hop-by-hop ones included). `resp`'s views are valid
  /// during the call only.
  virtual void on_head(const http::ParsedResponse& resp) = 0;
  /// Decoded content bytes (de-chunked), in order; valid during the call only.
  virtual void on_data(std::string_view data) = 0;
  /// Back-pressure (a cache writer behind the origin): true while the observer cannot take more content. The
  /// proxy then stops reading the upstream, without its read timeout (the origin is not the one waiting),
  /// until `ready` is called: once, from a later event on the loop (never from inside holding()).
  virtual bool holding(const std::function<void()>& ready) { return false; }
  /// The end: `complete` only when all content arrived with valid framing; false when it was cut off, timed
  /// out, or the client went away (never store such a response).
  virtual void on_end(bool complete) = 0;
};

/// Installed by a cache module on a core's ProxyModule.
class ProxyHooks {
 public:
  /// Runs first for every proxied request. True: the hook answers the request itself (or later, e.g. after a
  /// disk read, possibly by calling ProxyModule::forward); false: the proxy forwards it now.
  virtual bool intercept(http::Exchange& ex) = 0;
  /// A final upstream response head for `ex` arrived; return an observer for it, or null.
  virtual std::unique_ptr<UpstreamObserver> observe(http::Exchange& ex, const http::ParsedResponse& resp) = 0;

 protected:
  ~ProxyHooks() = default;
};

/// One per core (the proxy module's per-core part, config/module.hh): the proxy content handler, the core's
/// upstream groups and their keepalive caches. A reactor poller closes cached connections when the server
/// shuts down.
class ProxyModule final : public http::ContentHandler, public http::ModuleCore, public reactor::Poller {
 public:
  explicit ProxyModule(http::HttpServer& server);
  ~ProxyModule() override;
  ProxyModule(const ProxyModule&) = delete;
  ProxyModule& operator=(const ProxyModule&) = delete;

  /// The locations this module serves: those with proxy_pass.
  static bool applies(const config::LocationConf& loc) { return loc.module<ProxyLocationConf>().pass; }
  http::ContentHandler* content_handler() override { return this; }

  /// ContentHandler: hooks first, then forward().
  void handle(http::Exchange& ex) override;
  /// Sends the exchange upstream (what proxy_pass does), bypassing the hooks' intercept.
  void forward(http::Exchange& ex);
  void set_hooks(ProxyHooks* hooks) { hooks_ = hooks; }
  ProxyHooks* hooks() const { return hooks_; }

  UpstreamGroup& group(const UpstreamConf& conf) { return *groups_[conf.index]; }
  reactor::Reactor& reactor() { return reactor_; }

  // reactor::Poller: closes cached connections once the server begins its graceful shutdown.
  bool poll() override;

 private:
  http::HttpServer& server_;
  reactor::Reactor& reactor_;
  std::vector<std::unique_ptr<UpstreamGroup>> groups_;  // by UpstreamConf::index
  ProxyHooks* hooks_ = nullptr;
  bool shut_down_ = false;
};

}  // namespace kosoku::proxy
