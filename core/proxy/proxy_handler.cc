#include "core/proxy/proxy_handler.hh"

#include <cerrno>
#include <cstring>
#include <optional>
#include <span>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/config/variables.hh"
#include "core/http/chunked.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/ref_ring.hh"
#include "core/proxy/upstream_state.hh"

namespace kosoku::proxy {

namespace {

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

void ProxyState::start() {
  if (predecessor_ != nullptr && ex_.pending_output() == 0) predecessor_.reset();
  loc_ = &ex_.location();
  conf_ = &loc_->proxy;
  group_ = &mod_.group(*conf_->upstream);
  const http::Request& req = ex_.request();
  reactor::Reactor& r = mod_.reactor();
  phase_ = Phase::kIdle;
  start_ms_ = r.now_ms();
  idempotent_ = idempotent(req);
  head_request_ = req.method == http::Method::kHead;
  aborted_ = false;
  deferred_status_ = 0;
  up_ = nullptr;
  up_peer_ = -1;
  head_sent_ = false;
  observer_.reset();
  chunked_.reset();
  // nginx: with proxy_buffering the response is read ahead into proxy_buffers and at most
  // proxy_busy_buffers_size of it is being sent to the client at a time; without, one proxy_buffer_size
  // buffer is read and passed on as it comes. (kosoku has no temp files: a full ring stops the upstream.)
  const size_t cap = conf_->buffering ? conf_->buffers_num * conf_->buffers_size : conf_->buffer_size;
  ring_.reset(cap);
  busy_limit_ = conf_->buffering ? conf_->busy_buffers_size : cap;

  std::string key;
  if (group_->conf().hash_key != nullptr) {
    ProxyVariables vars(ex_, *conf_);
    config::expand(*group_->conf().hash_key, vars, key);
  }
  group_->balancer().start(attempt_, key, conf_->next_upstream_tries);

  // Request body plan.
  body_buf_.clear();
  body_replayable_ = true;
  body_done_ = true;
  body_paused_ = false;
  head_ready_ = false;
  framing_ = BodyFraming::kNone;
  length_ = 0;
  if (conf_->pass_request_body && req.body == http::BodyFraming::kContentLength) {
    framing_ = BodyFraming::kLength;
    length_ = *req.content_length;
    body_done_ = length_ == 0;
  } else if (conf_->pass_request_body && req.body == http::BodyFraming::kChunked) {
    body_done_ = false;  // framing decided once the body ends or outgrows kReplayLimit
  }
  if (framing_ != BodyFraming::kNone || body_done_) build_head();
  if (!body_done_) ex_.read_body(this);  // data arrives from the loop, not from inside this call
  out_ = ex_.pending_output();
  connect_next();
}

// ---- upstream connection and request ----

void ProxyState::connect_next() {
  reactor::Reactor& r = mod_.reactor();
  const int peer = group_->balancer().next(attempt_, r.now_ms());
  if (peer < 0) {
    // nginx (ngx_http_upstream_connect on NGX_BUSY): the try is recorded with the group's name as its address
    // and 502 as its status, so $upstream_addr/$upstream_status show "NAME" / "502".
    begin_try(ex_.head().upstream, group_->conf().peers_name(), r.now_ms());
    end_try(502);
    KOSOKU_LOG(kError, "no live upstreams while connecting to upstream%s", context());
    fail_request(502);
    return;
  }
  up_peer_ = peer;
  begin_try(ex_.head().upstream, group_->balancer().server(peer).addr_text, r.now_ms());
  std::string err;
  up_ = group_->acquire(peer, this, &err);
  if (up_ == nullptr) {
    end_try(502);
    KOSOKU_LOG(kAlert, "%s while connecting to upstream%s", err, context());
    group_->balancer().done(attempt_, PeerResult::kNext, r.now_ms());
    fail_request(500);
    return;
  }
  reused_ = up_->reused();
  if (!reused_ && conf_->socket_keepalive) up_->stream().set_keepalive(true);  // proxy_socket_keepalive
  got_bytes_ = false;
  head_written_ = false;
  terminator_written_ = false;
  upstream_eof_ = false;
  up_paused_ = false;
  extra_ = false;
  last_len_ = 0;
  head_deadline_ms_ = 0;
  interim_bytes_ = 0;
  if (up_->connected()) {
    if (http::UpstreamTry* t = current_try()) t->connect_ms = 0;  // a cached keepalive connection
    phase_ = Phase::kWaitingHead;
    send_request();
    return;
  }
  phase_ = Phase::kConnecting;
  up_->arm_timer(conf_->connect_timeout_ms);
}

void ProxyState::on_upstream_connected() {
  if (deferred_status_ != 0 || phase_ != Phase::kConnecting) return;
  if (http::UpstreamTry* t = current_try()) t->connect_ms = try_elapsed(*t);
  phase_ = Phase::kWaitingHead;
  send_request();
}

void ProxyState::send_request() {
  net::Stream& s = up_->stream();
  if (!head_ready_) {
    // A chunked client body still being collected: the head goes out once its framing is known.
    if (body_paused_) {
      body_paused_ = false;
      ex_.pause_body(false);
    }
    up_->arm_timer(0);
    return;
  }
  if (!head_written_) {
    s.write(req_head_);
    head_written_ = true;
    if (!body_buf_.empty()) write_body(body_buf_);
  }
  if (body_done_) {
    write_terminator();
  } else if (body_paused_ && s.pending_output() <= kBodyHighWater / 2) {
    body_paused_ = false;
    ex_.pause_body(false);
  }
  s.flush();
  arm_upstream_timer();
}

void ProxyState::write_body(std::string_view data) {
  if (data.empty()) return;
  net::Stream& s = up_->stream();
  if (framing_ == BodyFraming::kChunked) {
    char line[24];
    const int n = snprintf(line, sizeof(line), "%zx\r\n", data.size());
    s.write(std::string_view(line, static_cast<size_t>(n)));
    s.write(data);
    s.write("\r\n");
  } else {
    s.write(data);
  }
}

void ProxyState::write_terminator() {
  if (framing_ == BodyFraming::kChunked && !terminator_written_) up_->stream().write("0\r\n\r\n");
  terminator_written_ = true;
}

// proxy_send_timeout while the upstream has request bytes unsent; proxy_read_timeout once the request is
// out; nothing while waiting for the client's body (client_body_timeout covers that). The read timeout runs
// from the moment the request is out to the end of the final response head, as nginx's (it arms the read
// timer once when the request is sent and not again while the head comes in): bytes of a head arriving in
// pieces or 1xx responses before it do not restart it, so an origin cannot hold the request with them.
void ProxyState::arm_upstream_timer() {
  if (up_ == nullptr || phase_ != Phase::kWaitingHead) return;
  net::Stream& s = up_->stream();
  if (s.pending_output() > 0) {
    s.set_low_water(body_paused_ ? kBodyHighWater / 2 : 0);
    up_->arm_timer(conf_->send_timeout_ms);
  } else if (request_complete() && conf_->read_timeout_ms == 0) {
    up_->arm_timer(0);
  } else if (request_complete()) {
    const uint64_t now = mod_.reactor().now_ms();
    if (head_deadline_ms_ == 0) head_deadline_ms_ = now + conf_->read_timeout_ms;
    up_->arm_timer(head_deadline_ms_ > now ? head_deadline_ms_ - now : 1);
  } else {
    up_->arm_timer(0);
  }
}

void ProxyState::pause_client_body() {
  if (body_paused_) return;
  body_paused_ = true;
  ex_.pause_body(true);
}

void ProxyState::on_upstream_writable() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  net::Stream& s = up_->stream();
  if (body_paused_ && head_written_ && !body_done_ && s.pending_output() <= kBodyHighWater / 2) {
    body_paused_ = false;
    ex_.pause_body(false);
  }
  arm_upstream_timer();
}

// ---- request body (BodySink) ----

void ProxyState::on_body_data(std::string_view data) {
  // Never end the exchange from here: the connection is in the middle of its body loop.
  if (deferred_status_ != 0 || phase_ == Phase::kDraining || phase_ == Phase::kDone) return;
  const bool streaming = up_ != nullptr && head_written_ && phase_ != Phase::kConnecting;
  if (!streaming) {
    body_buf_.append(data);
    if (body_buf_.size() >= kReplayLimit) {
      pause_client_body();
      if (!head_ready_) {
        // A chunked body larger than what we hold: re-chunk it (HTTP/1.1 upstream) or refuse it.
        if (conf_->http_version_minor == 1) {
          framing_ = BodyFraming::kChunked;
          build_head();
          if (up_ != nullptr && phase_ == Phase::kWaitingHead) send_request();
        } else {
          KOSOKU_LOG(kError, "chunked request body larger than %d bytes needs \"proxy_http_version 1.1\"%s",
                     static_cast<int>(kReplayLimit), context());
          deferred_status_ = 411;
          mod_.reactor().post(this);
        }
      }
    }
    return;
  }
  if (body_replayable_) {
    if (body_buf_.size() + data.size() <= kReplayLimit) {
      body_buf_.append(data);
    } else {
      body_replayable_ = false;
      body_buf_.clear();
    }
  }
  net::Stream& s = up_->stream();
  write_body(data);
  s.flush();
  if (s.pending_output() > kBodyHighWater) pause_client_body();
  arm_upstream_timer();
}

void ProxyState::on_body_end() {
  body_done_ = true;
  if (deferred_status_ != 0 || phase_ == Phase::kDraining || phase_ == Phase::kDone) return;
  if (!head_ready_) {
    framing_ = BodyFraming::kLength;  // a chunked body that fit: forwarded de-chunked with its length
    length_ = body_buf_.size();
    build_head();
  }
  if (up_ == nullptr || phase_ == Phase::kConnecting) return;
  if (!head_written_) {
    send_request();
    return;
  }
  write_terminator();
  up_->stream().flush();
  arm_upstream_timer();
}

void ProxyState::on_body_error(int status) {
  body_done_ = true;
  if (deferred_status_ != 0 || phase_ == Phase::kDraining || phase_ == Phase::kDone) return;
  end_try(0);
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  group_->balancer().done(attempt_, PeerResult::kNext, mod_.reactor().now_ms());
  if (status == 0 || head_sent_) {
    abort_client();
    return;
  }
  fail_request(status);
}

void ProxyState::run() {
  if (aborted_) {
    deferred_status_ = 0;
    ex_.release();
    return;
  }
  const int status = deferred_status_;
  deferred_status_ = 0;
  give_up(PeerResult::kNext, status);
}

// ---- retries and failures ----

bool ProxyState::retry_allowed(uint32_t ft) const {
  if (head_sent_ || deferred_status_ != 0) return false;
  uint32_t tries = group_->balancer().single() ? 0 : (attempt_.tries > 0 ? attempt_.tries - 1 : 0);
  if (cached_error(ft)) ++tries;  // a cached connection the origin had closed: try again (nginx)
  if (tries == 0 || (conf_->next_upstream & ft) == 0) return false;
  if (head_written_ && !idempotent_ && (conf_->next_upstream & kNextNonIdempotent) == 0) return false;
  if (!body_replayable_) return false;
  if (conf_->next_upstream_timeout_ms != 0 &&
      mod_.reactor().now_ms() - start_ms_ >= conf_->next_upstream_timeout_ms) {
    return false;
  }
  return true;
}

void ProxyState::retry(uint32_t ft, PeerResult result) {
  end_try(ft == kNextTimeout ? 504 : 502);
  const bool cached = cached_error(ft);
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  // A cached connection the origin had already closed says nothing about the server: not counted as a
  // failure, and the same server may be tried again on a fresh connection (nginx adds a try but moves on).
  if (cached) group_->balancer().untry(attempt_);
  group_->balancer().done(attempt_, cached ? PeerResult::kNext : result, mod_.reactor().now_ms());
  if (cached) ++attempt_.tries;
  connect_next();
}

void ProxyState::give_up(PeerResult result, int status) {
  end_try(status == 504 ? 504 : 502);
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  group_->balancer().done(attempt_, result, mod_.reactor().now_ms());
  fail_request(status);
}

void ProxyState::fail_request(int status) {
  if (head_sent_) {
    abort_client();
    return;
  }
  phase_ = Phase::kDone;
  ex_.respond(status);
}

// ---- response ----

void ProxyState::on_upstream_readable() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  if (!up_->stream().input().empty()) got_bytes_ = true;
  if (phase_ == Phase::kWaitingHead) {
    read_head();
  } else if (phase_ == Phase::kBody) {
    pump();
  }
}

void ProxyState::on_upstream_eof() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  upstream_eof_ = true;
  if (phase_ == Phase::kWaitingHead) {
    read_head();
  } else if (phase_ == Phase::kBody) {
    pump();
  }
}

void ProxyState::read_head() {
  net::Stream& s = up_->stream();
  http::ResponseLimits lim;
  lim.max_head = conf_->buffer_size;
  for (;;) {
    std::span<const char> in = s.input();
    if (in.empty()) break;
    const std::string_view buf(in.data(), in.size());
    http::ResponseParseResult r = http::parse_response_head(buf, resp_, lim, head_request_, last_len_);
    if (r.status == http::ParseStatus::kPartial) {
      last_len_ = in.size();
      break;
    }
    std::string_view invalid;  // why the head is refused, or empty
    if (r.status == http::ParseStatus::kError) {
      invalid = r.reason;
    } else if (resp_.status == 101) {
      invalid = "unexpected 101";
    } else if (resp_.interim()) {
      // 100 Continue and other 1xx: not passed on (nginx 1.22 takes a 1xx for the final head). Together they get
      // one proxy_buffer_size, as much as the final head: at most ~290 of them with the default 4k, so a stream
      // of 1xx responses ends in a 502 like a head that never ends.
      interim_bytes_ += r.consumed;
      if (interim_bytes_ > conf_->buffer_size) invalid = kTooBigHeader;
    }
    if (!invalid.empty()) {
      // A head that does not fit in proxy_buffer_size is nginx's "upstream sent too big header" (then 502).
      KOSOKU_LOG(kError, "%s%s while reading response header from upstream%s",
                 invalid == kTooBigHeader ? "" : "upstream sent invalid header: ", invalid, context());
      if (retry_allowed(kNextInvalidHeader)) {
        retry(kNextInvalidHeader, PeerResult::kFailed);
      } else {
        give_up(PeerResult::kFailed, 502);
      }
      return;
    }
    if (resp_.interim()) {
      s.consume(r.consumed);
      last_len_ = 0;
      continue;
    }
    // Keep the head: move its views into our copy before the bytes leave the stream's buffer.
    resp_head_.assign(buf.data(), r.consumed);
    const char* from = buf.data();
    auto rebase = [&](std::string_view& v) {
      v = v.empty() ? std::string_view() : std::string_view(resp_head_.data() + (v.data() - from), v.size());
    };
    rebase(resp_.reason);
    for (http::HeaderField& f : resp_.headers()) {
      rebase(f.name);
      rebase(f.value);
    }
    s.consume(r.consumed);
    last_len_ = 0;
    on_response_head();
    return;
  }
  if (upstream_eof_) {
    KOSOKU_LOG(kError, "upstream prematurely closed connection while reading response header from upstream%s",
               context());
    if (retry_allowed(kNextError)) {
      retry(kNextError, PeerResult::kFailed);
    } else {
      give_up(PeerResult::kFailed, 502);
    }
    return;
  }
  arm_upstream_timer();
}

void ProxyState::on_response_head() {
  if (http::UpstreamTry* t = current_try()) {
    t->status = resp_.status;
    t->header_ms = try_elapsed(*t);
  }
  const uint32_t ft = next_upstream_flag(resp_.status);
  if (ft != 0 && retry_allowed(ft)) {
    retry(ft, resp_.status == 403 || resp_.status == 404 ? PeerResult::kNext : PeerResult::kFailed);
    return;
  }
  build_response_head(resp_, *conf_, ex_.head());
  rewrite_redirects(ex_, *conf_, ex_.head());
  if (ProxyHooks* hooks = mod_.hooks()) {
    observer_ = hooks->observe(ex_, resp_);
    if (observer_ != nullptr) {
      alive_ = std::make_shared<ProxyState*>(this);
      observer_ready_ = [alive = std::weak_ptr<ProxyState*>(alive_)] {
        if (std::shared_ptr<ProxyState*> p = alive.lock()) (*p)->on_writable();  // pumps again in kBody
      };
      observer_->on_head(resp_);
    }
  }
  phase_ = Phase::kBody;
  remaining_ = resp_.framing == http::ResponseFraming::kContentLength ? resp_.content_length : 0;
  if (resp_.framing == http::ResponseFraming::kChunked) chunked_.emplace(http::ChunkedLimits{});
  const size_t before = ex_.pending_output();
  ex_.send_head();
  queued(before);
  head_sent_ = true;
  resp_.release_fields();  // the head's lines were copied into the client's response: no heap storage kept
  if (resp_.framing == http::ResponseFraming::kNone ||
      (resp_.framing == http::ResponseFraming::kContentLength && remaining_ == 0)) {
    if (!up_->stream().input().empty()) extra_ = true;
    complete();
    return;
  }
  pump();
}

// Moves response content from the upstream to the client until the upstream has nothing more or the ring is
// full (then the upstream is not read until the client has taken data: on_writable).
void ProxyState::pump() {
  net::Stream& s = up_->stream();
  for (;;) {
    ring_.release(sent());
    hand_to_client(false);
    std::span<const char> in = s.input();
    if (in.empty()) {
      if (ring_.staged() > 0) ex_.set_low_water(ring_.busy() / 2);  // staged bytes wait for the client
      if (upstream_eof_) {
        if (resp_.framing == http::ResponseFraming::kClose) {
          complete();
          return;
        }
        KOSOKU_LOG(kError, "upstream prematurely closed connection while reading upstream%s", context());
        abort_client();
        return;
      }
      if (up_paused_) {
        up_paused_ = false;
        s.resume_reading();
      }
      up_->arm_timer(conf_->read_timeout_ms);
      return;
    }
    const size_t space = ring_.free();
    const bool held = observer_ != nullptr && observer_->holding(observer_ready_);  // the cache's disk is behind
    if (space == 0 || held) {
      if (!up_paused_) {
        up_paused_ = true;
        s.pause_reading();
      }
      up_->arm_timer(0);  // waiting for the client (send_timeout runs on that side)
      ex_.set_low_water(ring_.busy() / 2);
      return;
    }
    switch (resp_.framing) {
      case http::ResponseFraming::kContentLength: {
        size_t n = in.size();
        if (n > remaining_) n = static_cast<size_t>(remaining_);
        if (n > space) n = space;
        const std::string_view data(in.data(), n);
        const bool last = n == remaining_;
        deliver(&data, 1, last);
        s.consume(n);
        count_received(n);
        remaining_ -= n;
        if (remaining_ == 0) {
          if (!s.input().empty()) extra_ = true;
          complete();
          return;
        }
        break;
      }
      case http::ResponseFraming::kChunked: {
        const std::string_view window(in.data(), in.size() < space ? in.size() : space);
        std::string_view spans[kMaxSpans];
        size_t count = 0;
        size_t used = 0;
        bool done = false;
        while (used < window.size() && count < kMaxSpans) {
          http::ChunkedStep step = chunked_->decode(window.substr(used));
          used += step.consumed;
          if (step.status == http::ChunkedStatus::kError) {
            KOSOKU_LOG(kError, "upstream sent invalid chunked response (%s) while reading upstream%s", step.reason,
                       context());
            abort_client();
            return;
          }
          if (step.status == http::ChunkedStatus::kData) spans[count++] = step.data;
          if (step.status == http::ChunkedStatus::kDone) {
            done = true;
            break;
          }
          if (step.status == http::ChunkedStatus::kNeedMore) break;
        }
        deliver(spans, count, done);
        s.consume(used);
        count_received(used);
        if (done) {
          if (!s.input().empty()) extra_ = true;
          complete();
          return;
        }
        break;
      }
      case http::ResponseFraming::kClose: {
        const std::string_view data(in.data(), in.size() < space ? in.size() : space);
        deliver(&data, 1, false);
        s.consume(data.size());
        count_received(data.size());
        break;
      }
      case http::ResponseFraming::kNone:
        complete();
        return;
    }
  }
}

// Hands decoded content to the observer and the client. The last piece of a response with nothing else in
// flight is copied into the client stream (finish() flushes it); everything else goes through the ring by
// reference, at most busy_limit_ bytes in flight to the client until the response has been read whole. The
// total never exceeds ring_.free().
void ProxyState::deliver(const std::string_view* spans, size_t count, bool last) {
  if (observer_ != nullptr) {
    for (size_t i = 0; i < count; ++i) observer_->on_data(spans[i]);
  }
  if (last && ring_.idle()) {
    for (size_t i = 0; i < count; ++i) write_client(spans[i]);
    return;
  }
  for (size_t i = 0; i < count; ++i) ring_.append(spans[i]);
  hand_to_client(last);
}

void ProxyState::complete() {
  end_try(0);
  phase_ = Phase::kDraining;
  if (observer_ != nullptr) {
    observer_->on_end(true);
    observer_.reset();
  }
  const bool keep = resp_.reusable() && !extra_ && !upstream_eof_ && request_complete() &&
                    up_->stream().pending_output() == 0;
  up_->release(keep);
  up_ = nullptr;
  group_->balancer().done(attempt_, PeerResult::kOk, mod_.reactor().now_ms());
  hand_to_client(true);  // a close-delimited response ends here: whatever is staged goes out
  ring_.release(sent());
  if (!ring_.idle()) {
    // The ring's bytes are still referenced by the client stream: finish once they are sent, so that the
    // next request (which may reuse or replace this state) never overwrites bytes in flight.
    ex_.set_low_water(0);
    return;
  }
  phase_ = Phase::kDone;
  ex_.finish();
}

void ProxyState::abort_client() {
  end_try(502);
  phase_ = Phase::kDone;
  if (observer_ != nullptr) {
    observer_->on_end(false);
    observer_.reset();
  }
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  group_->balancer().done(attempt_, PeerResult::kNext, mod_.reactor().now_ms());
  ex_.abort_response();
}

// ---- client events ----

void ProxyState::on_writable() {
  if (phase_ == Phase::kDraining) {
    ring_.release(sent());
    if (ring_.idle()) {
      phase_ = Phase::kDone;
      ex_.finish();
    }
    return;
  }
  if (phase_ == Phase::kBody && up_ != nullptr && deferred_status_ == 0) pump();
}

void ProxyState::on_abort() {
  aborted_ = true;
  end_try(0);
  if (observer_ != nullptr) {
    observer_->on_end(false);
    observer_.reset();
  }
  if (up_ != nullptr) {
    up_->close();  // never cached: the exchange on it is incomplete
    up_ = nullptr;
    group_->balancer().done(attempt_, PeerResult::kNext, mod_.reactor().now_ms());
  }
  phase_ = Phase::kDone;
  if (deferred_status_ != 0) return;  // run() releases
  ex_.release();
}

// ---- upstream failures ----

void ProxyState::on_upstream_error(int error) {
  up_ = nullptr;  // gone
  if (deferred_status_ != 0) return;
  const char* what = error != 0 ? std::strerror(error) : "connection closed";
  switch (phase_) {
    case Phase::kConnecting:
    case Phase::kWaitingHead: {
      if (phase_ == Phase::kConnecting) {
        KOSOKU_LOG(kError, "connect() failed (%d: %s) while connecting to upstream%s", error, what, context());
      } else {
        KOSOKU_LOG(kError, "upstream connection failed (%d: %s) while reading response header from upstream%s",
                   error, what, context());
      }
      if (retry_allowed(kNextError)) {
        retry(kNextError, PeerResult::kFailed);
      } else {
        give_up(PeerResult::kFailed, 502);
      }
      return;
    }
    case Phase::kBody:
      KOSOKU_LOG(kError, "upstream connection failed (%d: %s) while reading upstream%s", error, what, context());
      abort_client();
      return;
    default:
      return;
  }
}

void ProxyState::on_upstream_timer() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  switch (phase_) {
    case Phase::kConnecting:
    case Phase::kWaitingHead: {
      const char* where = phase_ == Phase::kConnecting ? "connecting to upstream"
                          : up_->stream().pending_output() > 0 ? "sending request to upstream"
                                                                : "reading response header from upstream";
      KOSOKU_LOG(kError, "upstream timed out (110: Connection timed out) while %s%s", where, context());
      if (retry_allowed(kNextTimeout)) {
        retry(kNextTimeout, PeerResult::kFailed);
      } else {
        give_up(PeerResult::kFailed, 504);
      }
      return;
    }
    case Phase::kBody:
      KOSOKU_LOG(kError, "upstream timed out (110: Connection timed out) while reading upstream%s", context());
      abort_client();
      return;
    default:
      return;
  }
}

}  // namespace

// ---- ProxyModule (the per-request part; the module itself is in proxy_module.cc) ----

void ProxyModule::handle(http::Exchange& ex) {
  if (hooks_ != nullptr && hooks_->intercept(ex)) return;
  forward(ex);
}

void ProxyModule::forward(http::Exchange& ex) {
  std::unique_ptr<http::ContentState>& slot = ex.state();
  auto* st = dynamic_cast<ProxyState*>(slot.get());
  if (st == nullptr) {
    auto fresh = std::make_unique<ProxyState>(*this, ex);
    fresh->adopt(std::move(slot));
    st = fresh.get();
    slot = std::move(fresh);
  }
  st->start();
}

}  // namespace kosoku::proxy
