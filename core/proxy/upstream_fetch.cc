// UpstreamFetch's request side (upstream_fetch.hh): start, peer choice and connection, the request head and
// body, retries and failures, cancel and hand-over. The response side is in upstream_fetch_response.cc.
#include "core/proxy/upstream_fetch.hh"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/proxy/upstream_state.hh"
#include "core/tls/tls_conf.hh"

namespace kosoku::proxy {

namespace {

// The sink of a detached fetch: takes everything and keeps nothing.
class DiscardSink final : public UpstreamSink {
 public:
  void on_upstream_head(const http::ParsedResponse&) override {}
  size_t upstream_room() override { return SIZE_MAX; }
  void on_upstream_data(const std::string_view*, size_t, bool) override {}
  void on_upstream_end() override {}
  void on_upstream_error(int) override {}
};

DiscardSink discard_sink;

}  // namespace

UpstreamFetch::~UpstreamFetch() {
  if (up_ != nullptr) up_->close();
}

UpstreamTry* UpstreamFetch::current_try() { return proxy::current_try(*record_); }

int64_t UpstreamFetch::try_elapsed(const UpstreamTry& t) const {
  return proxy::try_elapsed(t, group_->reactor().now_ms());
}

void UpstreamFetch::end_try(int status) { proxy::end_try(*record_, status, group_->reactor().now_ms()); }

std::string UpstreamFetch::upstream_text() const {
  if (up_peer_ < 0) return conf_->pass_url;
  return absl::StrCat(conf_->pass_ssl ? "https://" : "http://", group_->balancer().server(up_peer_).addr_text);
}

void UpstreamFetch::start(UpstreamGroup& group, const Plan& plan, UpstreamRequest& request, UpstreamSink& sink,
                          UpstreamState& record) {
  group_ = &group;
  conf_ = plan.conf;
  request_ = &request;
  sink_ = &sink;
  record_ = &record;
  phase_ = Phase::kIdle;
  start_ms_ = group.reactor().now_ms();
  idempotent_ = plan.idempotent;
  head_request_ = plan.head;
  cancelled_ = false;
  deferred_status_ = 0;
  up_ = nullptr;
  up_peer_ = -1;
  chunked_.reset();
  group_->balancer().start(attempt_, plan.hash_key, conf_->next_upstream_tries);
  if (conf_->ssl != nullptr) {
    ssl_name_.assign(!conf_->ssl->name.empty() ? std::string_view(conf_->ssl->name)
                     : conf_->ssl->name_is_host   ? plan.host
                                                  : std::string_view(conf_->ssl_name));
  }

  // Request body plan.
  body_buf_.clear();
  body_replayable_ = true;
  body_done_ = true;
  body_paused_ = false;
  head_ready_ = false;
  framing_ = BodyFraming::kNone;
  length_ = 0;
  if (conf_->pass_request_body && plan.body == http::BodyFraming::kContentLength) {
    framing_ = BodyFraming::kLength;
    length_ = plan.content_length;
    body_done_ = length_ == 0;
  } else if (conf_->pass_request_body && plan.body == http::BodyFraming::kChunked) {
    body_done_ = false;  // framing decided once the body ends or outgrows kReplayLimit
  }
  if (framing_ != BodyFraming::kNone || body_done_) build_head();
  if (!body_done_) request_->read_body(this);  // data arrives from the loop, not from inside this call
  connect_next();
}

void UpstreamFetch::detach() {
  own_record_ = *record_;
  record_ = &own_record_;
  sink_ = &discard_sink;
  if (phase_ == Phase::kBody && up_paused_) resume();  // a paused upstream goes on now
}

void UpstreamFetch::hand_over(UpstreamRequest& request, UpstreamSink& sink, UpstreamState& record) {
  record = *record_;
  record_ = &record;
  request_ = &request;
  sink_ = &sink;
}

bool UpstreamFetch::cancel() {
  if (phase_ == Phase::kIdle || phase_ == Phase::kDone) {
    if (!task_queued_) return true;
    cancelled_ = true;
    return false;
  }
  end_try(0);
  if (up_ != nullptr) close_upstream(PeerResult::kNext);
  phase_ = Phase::kDone;
  if (!task_queued_) return true;
  cancelled_ = true;
  return false;
}

// Closes the connection (never cached: the exchange on it is incomplete) and reports the attempt.
void UpstreamFetch::close_upstream(PeerResult result) {
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  group_->balancer().done(attempt_, result, group_->reactor().now_ms());
}

// ---- upstream connection and request ----

void UpstreamFetch::connect_next() {
  reactor::Reactor& r = group_->reactor();
  const int peer = group_->balancer().next(attempt_, r.now_ms());
  if (peer < 0) {
    // nginx (ngx_http_upstream_connect on NGX_BUSY): the try is recorded with the group's name as its address
    // and 502 as its status, so $upstream_addr/$upstream_status show "NAME" / "502".
    begin_try(*record_, group_->conf().peers_name(), r.now_ms());
    end_try(502);
    KOSOKU_LOG(kError, "no live upstreams while connecting to upstream%s", context());
    fail(502);
    return;
  }
  up_peer_ = peer;
  begin_try(*record_, group_->balancer().server(peer).addr_text, r.now_ms());
  std::string err;
  up_ = group_->acquire(peer, this, &err, conf_->ssl, ssl_name_);
  if (up_ == nullptr) {
    end_try(502);
    KOSOKU_LOG(kAlert, "%s while connecting to upstream%s", err, context());
    group_->balancer().done(attempt_, PeerResult::kNext, r.now_ms());
    fail(500);
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
    if (UpstreamTry* t = current_try()) t->connect_ms = 0;  // a cached keepalive connection
    phase_ = Phase::kWaitingHead;
    send_request();
    return;
  }
  phase_ = Phase::kConnecting;
  up_->arm_timer(conf_->connect_timeout_ms);
}

void UpstreamFetch::on_upstream_connected() {
  if (deferred_status_ != 0 || phase_ != Phase::kConnecting) return;
  if (UpstreamTry* t = current_try()) t->connect_ms = try_elapsed(*t);
  phase_ = Phase::kWaitingHead;
  send_request();
}

void UpstreamFetch::send_request() {
  net::Stream& s = up_->stream();
  if (!head_ready_) {
    // A chunked request body still being collected: the head goes out once its framing is known.
    if (body_paused_) {
      body_paused_ = false;
      request_->pause_body(false);
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
    request_->pause_body(false);
  }
  s.flush();
  arm_upstream_timer();
}

void UpstreamFetch::write_body(std::string_view data) {
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

void UpstreamFetch::write_terminator() {
  if (framing_ == BodyFraming::kChunked && !terminator_written_) up_->stream().write("0\r\n\r\n");
  terminator_written_ = true;
}

// proxy_send_timeout while the upstream has request bytes unsent; proxy_read_timeout once the request is
// out; nothing while waiting for the request body (client_body_timeout covers that). The read timeout runs
// from the moment the request is out to the end of the final response head, as nginx's (it arms the read
// timer once when the request is sent and not again while the head comes in): bytes of a head arriving in
// pieces or 1xx responses before it do not restart it, so an origin cannot hold the request with them.
void UpstreamFetch::arm_upstream_timer() {
  if (up_ == nullptr || phase_ != Phase::kWaitingHead) return;
  net::Stream& s = up_->stream();
  if (s.pending_output() > 0) {
    s.set_low_water(body_paused_ ? kBodyHighWater / 2 : 0);
    up_->arm_timer(conf_->send_timeout_ms);
  } else if (request_complete() && conf_->read_timeout_ms == 0) {
    up_->arm_timer(0);
  } else if (request_complete()) {
    const uint64_t now = group_->reactor().now_ms();
    if (head_deadline_ms_ == 0) head_deadline_ms_ = now + conf_->read_timeout_ms;
    up_->arm_timer(head_deadline_ms_ > now ? head_deadline_ms_ - now : 1);
  } else {
    up_->arm_timer(0);
  }
}

void UpstreamFetch::pause_body() {
  if (body_paused_) return;
  body_paused_ = true;
  request_->pause_body(true);
}

void UpstreamFetch::on_upstream_writable() {
  if (deferred_status_ != 0 || up_ == nullptr) return;
  net::Stream& s = up_->stream();
  if (body_paused_ && head_written_ && !body_done_ && s.pending_output() <= kBodyHighWater / 2) {
    body_paused_ = false;
    request_->pause_body(false);
  }
  arm_upstream_timer();
}

// ---- request body (BodySink) ----

void UpstreamFetch::on_body_data(std::string_view data) {
  // Never end the fetch from here: the client connection is in the middle of its body loop.
  if (deferred_status_ != 0 || phase_ == Phase::kDone || phase_ == Phase::kIdle) return;
  const bool streaming = up_ != nullptr && head_written_ && phase_ != Phase::kConnecting;
  if (!streaming) {
    body_buf_.append(data);
    if (body_buf_.size() >= kReplayLimit) {
      pause_body();
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
          task_queued_ = true;
          group_->reactor().post(this);
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
  if (s.pending_output() > kBodyHighWater) pause_body();
  arm_upstream_timer();
}

void UpstreamFetch::on_body_end() {
  body_done_ = true;
  if (deferred_status_ != 0 || phase_ == Phase::kDone || phase_ == Phase::kIdle) return;
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

void UpstreamFetch::on_body_error(int status) {
  body_done_ = true;
  if (deferred_status_ != 0 || phase_ == Phase::kDone || phase_ == Phase::kIdle) return;
  const bool in_body = phase_ == Phase::kBody;
  end_try(0);
  close_upstream(PeerResult::kNext);
  phase_ = Phase::kDone;
  sink_->on_upstream_error(in_body ? 502 : status);
}

void UpstreamFetch::run() {
  task_queued_ = false;
  const int status = deferred_status_;
  deferred_status_ = 0;
  if (cancelled_) {
    cancelled_ = false;
    phase_ = Phase::kDone;
    sink_->on_upstream_cancelled();
    return;
  }
  give_up(PeerResult::kNext, status);
}

// ---- retries and failures ----

bool UpstreamFetch::retry_allowed(uint32_t ft) const {
  if (phase_ == Phase::kBody || deferred_status_ != 0) return false;
  uint32_t tries = group_->balancer().single() ? 0 : (attempt_.tries > 0 ? attempt_.tries - 1 : 0);
  if (cached_error(ft)) ++tries;  // a cached connection the origin had closed: try again (nginx)
  if (tries == 0 || (conf_->next_upstream & ft) == 0) return false;
  if (head_written_ && !idempotent_ && (conf_->next_upstream & kNextNonIdempotent) == 0) return false;
  if (!body_replayable_) return false;
  if (conf_->next_upstream_timeout_ms != 0 &&
      group_->reactor().now_ms() - start_ms_ >= conf_->next_upstream_timeout_ms) {
    return false;
  }
  return true;
}

void UpstreamFetch::retry(uint32_t ft, PeerResult result) {
  end_try(ft == kNextTimeout ? 504 : 502);
  const bool cached = cached_error(ft);
  if (up_ != nullptr) {
    up_->close();
    up_ = nullptr;
  }
  // A cached connection the origin had already closed says nothing about the server: not counted as a
  // failure, and the same server may be tried again on a fresh connection (nginx adds a try but moves on).
  if (cached) group_->balancer().untry(attempt_);
  group_->balancer().done(attempt_, cached ? PeerResult::kNext : result, group_->reactor().now_ms());
  if (cached) ++attempt_.tries;
  connect_next();
}

void UpstreamFetch::give_up(PeerResult result, int status) {
  end_try(status == 504 ? 504 : 502);
  close_upstream(result);
  fail(status);
}

// The fetch ends without a (complete) response: before the head the sink answers `status`, after it the
// content is cut off.
void UpstreamFetch::fail(int status) {
  phase_ = Phase::kDone;
  sink_->on_upstream_error(status);
}

}  // namespace kosoku::proxy
