// ProxyState: one proxied request, the exchange's ContentState (the contract is in proxy_handler.hh). Internal
// to core/proxy: the class is declared here so that its parts can live in separate files —
//   proxy_handler.cc   the request side: start, peer choice and connection, the request head and body,
//                      retries and failures, client events; ProxyModule::handle and forward;
//   proxy_response.cc  the response side: reading and checking the head, streaming the content to the client,
//                      the end of the exchange, upstream errors and timeouts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/http/chunked.hh"
#include "core/http/response_parser.hh"
#include "core/proxy/proxy_handler.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/ref_ring.hh"
#include "core/proxy/upstream_state.hh"

namespace kosoku::proxy {

constexpr size_t kFixedFields = 100;  // response field lines held in place; more go to the heap (FieldLines)
// Request body bytes held before the upstream takes them: kept whole for a retry (proxy_next_upstream) and
// for choosing Content-Length over chunked for a chunked request body.
constexpr size_t kReplayLimit = 64 * 1024;
// Unsent request bytes on the upstream connection above which the client body is paused.
constexpr size_t kBodyHighWater = 256 * 1024;
constexpr size_t kMaxSpans = 32;  // decoded chunk pieces handled per pass
// http::parse_response_head's reason for a head longer than ResponseLimits::max_head (proxy_buffer_size).
constexpr std::string_view kTooBigHeader = "upstream sent too big header";

// One proxied request (reused across the keep-alive requests of a client connection).
//
// Re-entrancy rule: Exchange::finish(), respond() and abort_response() may start the client's next pipelined
// request at once (this object is then restarted, or destroyed if another handler takes the slot). Every path
// that calls them does so last and returns straight up; the functions that may end the exchange say so.
class ProxyState final : public http::ContentState,
                         public http::BodySink,
                         public UpstreamUser,
                         public reactor::Task {
 public:
  ProxyState(ProxyModule& m, http::Exchange& ex) : mod_(m), ex_(ex) {
    resp_.fields = std::span<http::HeaderField>(fields_, kFixedFields);
  }
  ~ProxyState() override {
    if (up_ != nullptr) up_->close();
  }

  /// Keeps the previous content state of the connection alive until the client has received what it
  /// referenced (zero-copy buffers).
  void adopt(std::unique_ptr<http::ContentState> old) { predecessor_ = std::move(old); }

  void start();  // may end the exchange

  // ContentState
  void on_abort() override;
  void on_writable() override;
  /// A client gone while the upstream works abandons the request (nginx, proxy_ignore_client_abort off).
  bool abort_on_peer_close() const override { return phase_ != Phase::kDraining && phase_ != Phase::kDone; }
  // BodySink
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
  enum class Phase { kIdle, kConnecting, kWaitingHead, kBody, kDraining, kDone };

  // May end the exchange:
  void connect_next();
  void read_head();
  void on_response_head();
  void pump();
  void complete();
  void abort_client();
  void fail_request(int status);
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
  void pause_client_body();
  void deliver(const std::string_view* spans, size_t count, bool last);
  // Hands staged ring bytes to the client: up to the busy limit until the response was read whole (`all`). A
  // slice that queued nothing (a cache passing some ranges on) is unreferenced: mark 0, free at once.
  void hand_to_client(bool all) {
    ring_.hand(all ? SIZE_MAX : busy_limit_, [this](const char* p, size_t n) -> uint64_t {
      const uint64_t before = out_;
      return write_client_ref(p, n) > before ? out_ : 0;
    });
  }
  void build_head() {
    build_request_head(ex_, *conf_, framing_, length_, req_head_);
    head_ready_ = true;
  }
  uint64_t sent() const {
    const size_t pending = ex_.pending_output();
    return out_ > pending ? out_ - pending : 0;
  }
  // Client output: out_ counts the bytes our calls queued (pending output was `before` ahead of them).
  uint64_t queued(size_t before) {
    const size_t after = ex_.pending_output();
    if (after > before) out_ += after - before;
    return out_;
  }
  uint64_t write_client(std::string_view d) {
    const size_t before = ex_.pending_output();
    ex_.write(d);
    return queued(before);
  }
  uint64_t write_client_ref(const char* p, size_t n) {
    const size_t before = ex_.pending_output();
    ex_.write_ref(p, n);
    return queued(before);
  }
  // $upstream_* bookkeeping (upstream_state.hh).
  http::UpstreamTry* current_try() { return proxy::current_try(ex_.head().upstream); }
  int64_t try_elapsed(const http::UpstreamTry& t) const { return proxy::try_elapsed(t, mod_.reactor().now_ms()); }
  void end_try(int status) { proxy::end_try(ex_.head().upstream, status, mod_.reactor().now_ms()); }
  void count_received(size_t n) {
    if (http::UpstreamTry* t = current_try()) t->length += n;
  }
  std::string upstream_text() const {
    if (up_peer_ < 0) return conf_->pass_url;
    return absl::StrCat("http://", group_->balancer().server(up_peer_).addr_text);
  }
  std::string context() const { return upstream_log_context(ex_, upstream_text()); }

  ProxyModule& mod_;
  http::Exchange& ex_;
  std::unique_ptr<http::ContentState> predecessor_;
  const config::LocationConf* loc_ = nullptr;
  const ProxyLocationConf* conf_ = nullptr;
  UpstreamGroup* group_ = nullptr;
  Balancer::Attempt attempt_;
  UpstreamConnection* up_ = nullptr;
  int up_peer_ = -1;
  Phase phase_ = Phase::kIdle;
  uint64_t start_ms_ = 0;
  bool idempotent_ = true;
  bool head_request_ = false;
  bool aborted_ = false;
  int deferred_status_ = 0;  // a failure waiting for run()

  // Request.
  std::string req_head_;
  bool head_ready_ = false;     // framing decided, req_head_ built
  BodyFraming framing_ = BodyFraming::kNone;
  uint64_t length_ = 0;         // Content-Length sent upstream (kLength)
  std::string body_buf_;        // the body read so far while it is replayable (≤ kReplayLimit + one read)
  bool body_replayable_ = true; // body_buf_ holds all of the body read so far
  bool body_done_ = true;       // the whole client body arrived (or there is none)
  bool body_paused_ = false;    // we paused the client body
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
  uint64_t remaining_ = 0;      // Content-Length bytes still to come
  std::optional<http::ChunkedDecoder> chunked_;
  bool upstream_eof_ = false;
  bool up_paused_ = false;      // upstream reading paused: the ring is full
  bool extra_ = false;          // bytes after the end of the response: the connection is not reusable
  bool head_sent_ = false;      // the client's response head went out
  std::unique_ptr<UpstreamObserver> observer_;
  std::shared_ptr<ProxyState*> alive_;  // observer back-pressure: its ready call reaches this state while it lives
  std::function<void()> observer_ready_;
  RefRing ring_;                // proxy_buffers N × SIZE (buffering) or proxy_buffer_size (no buffering)
  size_t busy_limit_ = 0;       // proxy_busy_buffers_size (buffering) or the ring's capacity
  uint64_t out_ = 0;            // client output bytes queued, counted from the start of the request
};

}  // namespace kosoku::proxy
