#include "core/proxy/proxy_handler.hh"

#include <cerrno>
#include <cstring>
#include <optional>
#include <span>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/config/variables.hh"
#include "core/http/variables.hh"
#include "core/http/chunked.hh"
#include "core/proxy/proxy_request.hh"
#include "core/proxy/proxy_state.hh"
#include "core/proxy/ref_ring.hh"
#include "core/proxy/upstream_state.hh"

namespace kosoku::proxy {

void ProxyState::start() {
  if (predecessor_ != nullptr && ex_.pending_output() == 0) predecessor_.reset();
  loc_ = &ex_.location();
  conf_ = &loc_->module<proxy::ProxyLocationConf>();
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
    http::RequestVariables vars(ex_, ex_.core().reactor);
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
