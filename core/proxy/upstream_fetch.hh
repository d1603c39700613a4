// One request to an upstream group and its response (nginx's ngx_http_upstream without the client side): the
// object both the client proxy path (proxy_handler.hh) and the proxy cache (core/cache) send a request with.
// Request in — an UpstreamRequest that builds the head and gives the body —, one UpstreamSink out: the final
// response head, the decoded content with back-pressure, then the end or an error.
//
//   1. choose a peer (upstream.hh Balancer), take a cached keepalive connection to it or connect
//      (proxy_connect_timeout; proxy_socket_keepalive on new connections);
//   2. send the request head (UpstreamRequest::build_head) and stream the body: Content-Length bodies as they
//      come; chunked bodies are collected up to kReplayLimit first and sent de-chunked with Content-Length when
//      they end within it, otherwise re-chunked (proxy_http_version 1.1) or refused with 411 (HTTP/1.0 upstream:
//      kosoku has no temp files to buffer an unbounded body). Never both framings (RFC 9112 §6.1). The body is
//      paused whenever the upstream has more than kBodyHighWater bytes unsent (proxy_send_timeout runs while the
//      upstream does not take them);
//   3. parse the response head (http/response_parser.hh): it must fit in proxy_buffer_size and arrive within
//      proxy_read_timeout of the request being sent (nginx); skip 1xx (together within one more
//      proxy_buffer_size); apply proxy_next_upstream (error, timeout, invalid_header, http_5xx/403/404/429;
//      only before the sink has the head, only for idempotent methods once the request went out unless
//      non_idempotent, only while the body read so far is still held for replay, within
//      proxy_next_upstream_tries/_timeout); timeouts give 504, other failures 502 (nginx);
//   4. decode the content (Content-Length, chunked, or up to the origin's FIN) and hand it to the sink, never
//      more than UpstreamSink::upstream_room() at a time: a sink with no room pauses the upstream (no read
//      timeout then: the origin is not the one waiting) until resume(). Content cut off (EOF, reset, read
//      timeout, bad chunk) is an error after the head: the sink must not take it for complete;
//   5. a response that ended cleanly on an HTTP/1.1 (or keep-alive) connection whose request was fully sent
//      returns the connection to the group's keepalive cache; everything else closes it. cancel() (the client
//      went away) closes the connection (never cached).
// Every try is recorded in an UpstreamState (address, status, connect/header/response times, body bytes;
// upstream_state.hh) for $upstream_addr, $upstream_status, $upstream_*_time and $upstream_response_length.
//
// Re-entrancy: on_upstream_end() and on_upstream_error() are the fetch's last act — it has released its
// connection and ends every path with them, so the sink may restart the fetch (start()) or hand it elsewhere
// from inside them. The fetch is never destroyed from inside a sink call; done() says when it may be.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/http/chunked.hh"
#include "core/http/exchange.hh"
#include "core/http/response_parser.hh"
#include "core/proxy/proxy_conf.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/upstream.hh"
#include "core/proxy/upstream_state.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::proxy {

/// What an UpstreamFetch sends: implemented over the client's Exchange by the proxy, over a copy that may
/// outlive the client by the cache.
class UpstreamRequest {
 public:
  /// The whole request head (request line, fields, final CRLF) into `out` (replaced), framed as the fetch
  /// chose (`content_length` with BodyFraming::kLength). Called once per fetch, when the framing is known.
  virtual void build_head(BodyFraming framing, uint64_t content_length, std::string& out) = 0;
  /// The context of an error-log line (proxy_request.hh: upstream_log_context) naming `upstream`.
  virtual std::string log_context(std::string_view upstream) const = 0;
  /// The request body (only for a fetch started with one): start delivering it to `sink` / flow control.
  virtual void read_body(http::BodySink* sink) = 0;
  virtual void pause_body(bool paused) = 0;

 protected:
  ~UpstreamRequest() = default;
};

/// Where an UpstreamFetch delivers the response.
class UpstreamSink {
 public:
  /// The final response head (after proxy_next_upstream's tries), every field as received (hop-by-hop ones
  /// included). `resp`'s views are valid during the call only. The sink may stop following the fetch here
  /// (UpstreamFetch::detach): the fetch then reads the rest of the response on its own.
  virtual void on_upstream_head(const http::ParsedResponse& resp) = 0;
  /// How many decoded content bytes the sink takes now. 0 pauses the fetch until resume() is called (from a
  /// later event on the loop, never from inside this call).
  virtual size_t upstream_room() = 0;
  /// Decoded content (de-chunked), in order, `count` pieces of at most upstream_room() bytes in total, valid
  /// during the call only. `last`: the content ends with them (on_upstream_end follows). Never ends the fetch.
  virtual void on_upstream_data(const std::string_view* spans, size_t count, bool last) = 0;
  /// All content arrived with valid framing.
  virtual void on_upstream_end() = 0;
  /// The fetch failed and is over. Before on_upstream_head: `status` is the answer nginx gives (502, 504 on a
  /// timeout, 500 when no connection could be made, 411, or the body's 400/408/413); 0: the request body broke
  /// off because the client went away. After the head: the content was cut off — never store or finish it.
  virtual void on_upstream_error(int status) = 0;
  /// A cancel() that could not complete at once (a failure was queued for the loop) has completed.
  virtual void on_upstream_cancelled() {}

 protected:
  ~UpstreamSink() = default;
};

class UpstreamFetch final : public http::BodySink, public UpstreamUser, public reactor::Task {
 public:
  /// What is sent, besides the head the request builds.
  struct Plan {
    const ProxyLocationConf* conf = nullptr;  // proxy_pass's group, timeouts, buffer size, next_upstream...
    std::string_view hash_key;                // the group's expanded `hash` key (ignored without `hash`)
    std::string_view host;                    // the request's $host (proxy_ssl_name $host)
    bool idempotent = true;                   // proxy_request.hh: idempotent()
    bool head = false;                        // the method sent is HEAD: the response has no content
    http::BodyFraming body = http::BodyFraming::kNone;  // the request body as it arrives (proxy_pass_request_body)
    uint64_t content_length = 0;              // with http::BodyFraming::kContentLength
  };

  UpstreamFetch() { resp_.fields = std::span<http::HeaderField>(fields_, kFixedFields); }
  ~UpstreamFetch();
  UpstreamFetch(const UpstreamFetch&) = delete;
  UpstreamFetch& operator=(const UpstreamFetch&) = delete;

  /// Starts the fetch (a finished one may be started again). `record` receives the tries. Every sink call may
  /// come from inside this one.
  void start(UpstreamGroup& group, const Plan& plan, UpstreamRequest& request, UpstreamSink& sink,
             UpstreamState& record);
  /// The sink wants content again after upstream_room() returned 0 (or may take staged bytes now).
  void resume();
  /// resume() as a callback that may outlive the fetch (e.g. a cache writer's drained(), StoreWriter::backlogged):
  /// it does nothing once the fetch is gone.
  const std::function<void()>& resumer();
  /// Abandons the fetch (the client went away): the connection is closed, never cached, and the sink gets
  /// nothing more. False when a failure is still queued for the loop: done() turns true later and the sink
  /// gets on_upstream_cancelled() then.
  bool cancel();
  /// The sink stops following the fetch, which reads the rest of the response on its own (the connection may
  /// then go to the keepalive cache) and records its tries in its own UpstreamState from now on.
  void detach();
  /// Hands the fetch over: `sink`, `request` and `record` replace the current ones (`record` starts as a copy of
  /// the tries so far). The request body must be complete (it is never read again).
  void hand_over(UpstreamRequest& request, UpstreamSink& sink, UpstreamState& record);
  /// Nothing is in flight: the fetch ended (end, error, cancel) and no failure is queued.
  bool done() const { return phase_ == Phase::kIdle || (phase_ == Phase::kDone && !task_queued_); }
  /// The sink has the head and the content is being read.
  bool in_body() const { return phase_ == Phase::kBody; }

  // BodySink (the request body)
  void on_body_data(std::string_view data) override;
  void on_body_end() override;
  void on_body_error(int status) override;
  // UpstreamUser
  void on_upstream_connected() override;
  void on_upstream_readable() override;
  void on_upstream_writable() override;
  void on_upstream_eof() override;
  void on_upstream_error(int error) override;
  void on_upstream_timer() override;
  // Task: a failure decided inside on_body_data, answered outside the connection's body loop.
  void run() override;

 private:
  enum class Phase { kIdle, kConnecting, kWaitingHead, kBody, kDone };
  static constexpr size_t kFixedFields = 100;  // response field lines held in place; more go to the heap
  // Request body bytes held before the upstream takes them: kept whole for a retry (proxy_next_upstream) and
  // for choosing Content-Length over chunked for a chunked request body.
  static constexpr size_t kReplayLimit = 64 * 1024;
  // Unsent request bytes on the upstream connection above which the request body is paused.
  static constexpr size_t kBodyHighWater = 256 * 1024;
  static constexpr size_t kMaxSpans = 32;  // decoded chunk pieces handled per pass

  // Each of these may end the fetch (the sink's last call); callers return straight up after them.
  void connect_next();
  void read_head();
  void on_response_head();
  void pump();
  void complete();
  void fail(int status);
  void cut_off();
  void retry(uint32_t ft, PeerResult result);
  void give_up(PeerResult result, int status);

  bool retry_allowed(uint32_t ft) const;
  bool cached_error(uint32_t ft) const { return reused_ && ft == kNextError && !got_bytes_; }
  void send_request();
  void write_body(std::string_view data);
  void write_terminator();
  bool request_complete() const {
    return head_written_ && body_done_ && (framing_ != BodyFraming::kChunked || terminator_written_);
  }
  void arm_upstream_timer();
  void pause_body();
  void build_head() {
    request_->build_head(framing_, length_, req_head_);
    head_ready_ = true;
  }
  void close_upstream(PeerResult result);
  // $upstream_* bookkeeping (upstream_state.hh).
  UpstreamTry* current_try();
  int64_t try_elapsed(const UpstreamTry& t) const;
  void end_try(int status);
  void count_received(size_t n) {
    if (UpstreamTry* t = current_try()) t->length += n;
  }
  std::string upstream_text() const;
  std::string context() const { return request_->log_context(upstream_text()); }

  UpstreamGroup* group_ = nullptr;
  const ProxyLocationConf* conf_ = nullptr;
  UpstreamRequest* request_ = nullptr;
  UpstreamSink* sink_ = nullptr;
  UpstreamState* record_ = nullptr;
  UpstreamState own_record_;  // the tries once the sink detached
  Balancer::Attempt attempt_;
  UpstreamConnection* up_ = nullptr;
  int up_peer_ = -1;
  Phase phase_ = Phase::kIdle;
  uint64_t start_ms_ = 0;
  bool idempotent_ = true;
  bool head_request_ = false;
  bool task_queued_ = false;
  bool cancelled_ = false;
  int deferred_status_ = 0;  // a failure waiting for run()

  // Request.
  std::string req_head_;
  std::string ssl_name_;        // proxy_pass https://: the name sent as SNI and verified
  bool head_ready_ = false;     // framing decided, req_head_ built
  BodyFraming framing_ = BodyFraming::kNone;
  uint64_t length_ = 0;         // Content-Length sent upstream (kLength)
  std::string body_buf_;        // the body read so far while it is replayable (≤ kReplayLimit + one read)
  bool body_replayable_ = true; // body_buf_ holds all of the body read so far
  bool body_done_ = true;       // the whole request body arrived (or there is none)
  bool body_paused_ = false;    // we paused the request body
  bool head_written_ = false;   // this attempt wrote the request head (nginx's request_sent)
  bool terminator_written_ = false;
  bool reused_ = false;         // this attempt runs on a cached keepalive connection
  bool got_bytes_ = false;      // this attempt received response bytes

  // Response.
  http::HeaderField fields_[kFixedFields];
  http::ParsedResponse resp_;
  std::string resp_head_;
  size_t last_len_ = 0;
  uint64_t head_deadline_ms_ = 0;  // when proxy_read_timeout ends for the response head (0: request not out yet)
  size_t interim_bytes_ = 0;       // bytes of the 1xx heads before the final one (≤ proxy_buffer_size)
  uint64_t remaining_ = 0;         // Content-Length bytes still to come
  std::optional<http::ChunkedDecoder> chunked_;
  bool upstream_eof_ = false;
  bool up_paused_ = false;         // upstream reading paused: the sink has no room
  bool extra_ = false;             // bytes after the end of the response: the connection is not reusable
  std::shared_ptr<UpstreamFetch*> alive_;  // resumer()'s link to this fetch, while it lives
  std::function<void()> resumer_;
};

}  // namespace kosoku::proxy
