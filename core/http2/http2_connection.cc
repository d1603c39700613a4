// Http2Connection (http2_connection.hh): the session over the stream, its callbacks, reading and sending with
// bounded memory, the defences against abusive peers, the timers and graceful shutdown.
#include "core/http2/http2_connection.hh"

#include <algorithm>

#include "core/base/log.hh"
#include "core/http2/http2_conf.hh"
#include "core/stats/counters.hh"

namespace kosoku::http2 {

namespace {

// The connection writes frames while the stream holds less than this much unsent output, and goes on once
// the stream has sent down to kLowWater (bounded memory per connection whatever its streams produce).
constexpr size_t kHighWater = 256 * 1024;
constexpr size_t kLowWater = 64 * 1024;
// Frame bytes that carry no payload (SETTINGS, PING, WINDOW_UPDATE, PRIORITY, RST_STREAM, empty DATA) a peer
// may send beyond the payload bytes exchanged (nginx's "http2 flood detected" rule has the same shape).
constexpr uint64_t kControlAllowance = 1 << 20;
constexpr uint8_t kFrameHeaderLen = 9;
// Request body bytes read and dropped after the response is complete, before the stream is reset.
constexpr uint64_t kDrainAfterResponse = 1 << 20;

Http2Connection* self(void* p) { return static_cast<Http2Connection*>(p); }

const char* error_name(uint32_t code) { return nghttp2_http2_strerror(code); }

}  // namespace

Http2Connection::Http2Connection(http::HttpServer& srv, net::Stream& s, const config::ListenSocket& ls)
    : srv_(srv), core_(srv.core()), stream_(&s), listen_(ls),
      conf_(ls.default_server->module<Http2SrvConf>()), counters_(srv.core().stats->http2) {
  server_port_ = s.local_port();
  secure_ = s.secure();
  id_ = ++srv.connection_counter;
  ++counters_.connections;
  ++core_.stats->conn_idle;
  http::HttpServer::Node::link(srv_.live);
  // Rapid reset (CVE-2023-44487): a client may reset about twice the streams it may have open at once in a
  // burst, and as many as it may have open per second after that.
  reset_burst_ = std::max<double>(200, 2.0 * conf_.max_concurrent_streams);
  reset_rate_ = std::max<double>(100, conf_.max_concurrent_streams);
  reset_tokens_ = reset_burst_;
  reset_refill_ms_ = core_.reactor->now_ms();
}

Http2Connection::~Http2Connection() {
  destroying_ = true;
  while (requests_head_ != nullptr) {
    Http2Request* r = requests_head_;
    unlink(r);
    delete r;
  }
  if (session_ != nullptr) nghttp2_session_del(session_);
  --*(requests_count_ > 0 ? &core_.stats->conn_writing : &core_.stats->conn_idle);
  http::HttpServer::Node::unlink();
}

bool Http2Connection::start() {
  nghttp2_session_callbacks* cb = nullptr;
  if (nghttp2_session_callbacks_new(&cb) != 0) return false;
  nghttp2_session_callbacks_set_send_callback(cb, &on_send);
  nghttp2_session_callbacks_set_send_data_callback(cb, &on_send_data);
  nghttp2_session_callbacks_set_on_begin_frame_callback(cb, &on_begin_frame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cb, &on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cb, &on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, &on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, &on_data_chunk);
  nghttp2_session_callbacks_set_before_frame_send_callback(cb, &before_frame_send);
  nghttp2_session_callbacks_set_on_frame_send_callback(cb, &on_frame_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, &on_stream_close);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cb, &on_invalid_frame);
  nghttp2_option* opt = nullptr;
  if (nghttp2_option_new(&opt) != 0) {
    nghttp2_session_callbacks_del(cb);
    return false;
  }
  // The request body's window is given back as the handler consumes it (flow control follows the reader).
  nghttp2_option_set_no_auto_window_update(opt, 1);
  nghttp2_option_set_no_recv_client_magic(opt, 0);
  // The HPACK dynamic table the encoder of our responses keeps.
  nghttp2_option_set_max_deflate_dynamic_table_size(opt, 4096);
  // The library's own reset limit stays above ours, which answers first with ENHANCE_YOUR_CALM.
  nghttp2_option_set_stream_reset_rate_limit(opt, static_cast<uint64_t>(reset_burst_ * 4),
                                             static_cast<uint64_t>(reset_rate_ * 4));
  nghttp2_option_set_max_outbound_ack(opt, 1000);
  nghttp2_option_set_max_settings(opt, 32);
  nghttp2_option_set_server_fallback_rfc7540_priorities(opt, 1);
  const int rv = nghttp2_session_server_new2(&session_, cb, this, opt);
  nghttp2_option_del(opt);
  nghttp2_session_callbacks_del(cb);
  if (rv != 0) return false;

  const config::ServerConf& srv = *listen_.default_server;
  const uint32_t header_list = static_cast<uint32_t>(
      srv.client_header_buffer_size + srv.large_client_header_buffers_size * srv.large_client_header_buffers_num);
  const nghttp2_settings_entry settings[] = {
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, conf_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, static_cast<uint32_t>(conf_.body_preread_size)},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, header_list},
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      // RFC 9218: responses are ordered by the request's `priority` field (and PRIORITY_UPDATE frames), not
      // by RFC 7540's dependency tree, whose closed streams would have to be kept.
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  };
  if (nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings, std::size(settings)) != 0) return false;
  // The connection's receive window: every stream's preread at once (RFC 9113 §6.9.2; the default 65,535
  // would let one upload stall the others).
  const uint64_t conn_window =
      std::min<uint64_t>(uint64_t{conf_.max_concurrent_streams} * conf_.body_preread_size, (1u << 31) - 1);
  if (conn_window > 65535) {
    nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, static_cast<int32_t>(conn_window));
  }
  stream_->set_low_water(kLowWater);
  arm_timer();
  schedule();  // the preface and whatever followed it are in the stream's input already
  return true;
}

std::string_view Http2Connection::remote_addr() const {
  if (remote_addr_.empty() && stream_ != nullptr) remote_addr_.assign(stream_->peer_text());
  return remote_addr_;
}

// ---- the stream's events

void Http2Connection::on_readable(net::Stream&) { process(); }

void Http2Connection::on_peer_closed(net::Stream&) {
  // No more frames can come: what is in flight is answered (a client that half-closes after its requests
  // still gets them), then the connection closes.
  peer_closed_ = true;
  // A request whose header block is still incomplete can never be served: its stream goes.
  for (Http2Request* r = requests_head_; r != nullptr; r = r->next_) {
    if (!r->head_done_ && !r->stream_closed_ && session_ != nullptr) {
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, r->id_, NGHTTP2_CANCEL);
    }
  }
  process();
}

void Http2Connection::on_writable(net::Stream&) {
  for (Http2Request* r = requests_head_; r != nullptr; r = r->next_) {
    if (r->above_low_) events_ = true;
  }
  arm_timer();
  process();
}

void Http2Connection::on_closed(net::Stream&, int error) {
  remote_addr();  // requests still running may log $remote_addr
  stream_ = nullptr;
  dead_ = true;
  ready_.clear();
  reactor::Timer* t = this;
  core_.reactor->timers().cancel(*t);
  for (Http2Request* r = requests_head_; r != nullptr; r = r->next_) {
    if (!r->stream_closed_) stream_gone(r);
  }
  events_ = true;
  schedule();
}

void Http2Connection::run() {
  if (dead_) {
    destroying_ = true;  // what run_events causes is seen below: nothing is posted meanwhile
    run_events();
    if (requests_head_ == nullptr) {
      delete this;
      return;
    }
    destroying_ = false;
    return;  // a request's content state still works: release() brings the connection back here
  }
  process();
}

void Http2Connection::process() {
  if (in_process_ || dead_) return;
  in_process_ = true;
  for (int round = 0; round < 4 && stream_ != nullptr; ++round) {
    receive();
    if (stream_ == nullptr) break;
    run_events();
    if (stream_ == nullptr) break;
    send();
    if (!events_ && ready_.empty() && !more_input_) break;
  }
  if (stream_ != nullptr) {
    if (events_ || !ready_.empty() || more_input_) schedule();
    // Done: every stream answered and nothing more can come (GOAWAY sent or the peer closed its side).
    const bool done = nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0;
    if ((done || ((peer_closed_ || goaway_sent_) && requests_count_ == 0 && requests_head_ == nullptr)) &&
        stream_->pending_output() == 0 && !closing_) {
      close(net::Stream::Close::kGraceful);
    } else if (closing_ && nghttp2_session_want_write(session_) == 0) {
      close(net::Stream::Close::kGraceful);
    } else {
      flush();
      arm_timer();
    }
  }
  in_process_ = false;
}

void Http2Connection::flush() {
  stream_->flush();
  // The stream may take what was written at once (kosoku's TCP moves it into its send buffer, the TLS layer
  // encrypts on flush) without a later on_writable: whatever waited for that room goes on from the loop.
  bool again = blocked_ && stream_->pending_output() <= kHighWater;
  for (Http2Request* r = requests_head_; r != nullptr && !again; r = r->next_) {
    again = r->above_low_ && !r->finished_ && !r->stream_closed_ && r->pending_output() <= r->low_water_;
  }
  if (again) {
    events_ = true;
    schedule();
  }
}

void Http2Connection::receive() {
  more_input_ = false;
  if (goaway_sent_ && closing_) {
    stream_->consume(stream_->input().size());  // after a fatal GOAWAY nothing the peer sends matters
    return;
  }
  std::span<const char> in = stream_->input();
  if (in.empty()) return;
  const size_t n = std::min<size_t>(in.size(), conf_.recv_buffer_size);
  in_callback_ = true;
  const ssize_t rv = nghttp2_session_mem_recv(session_, reinterpret_cast<const uint8_t*>(in.data()), n);
  in_callback_ = false;
  if (stream_ == nullptr) return;
  if (rv < 0) {
    // A connection error the library detected (RFC 9113 §5.4.1): it has queued its GOAWAY where one applies.
    if (rv == NGHTTP2_ERR_FLOODED) {
      ++counters_.flood;
      KOSOKU_LOG(kInfo, "http2 flood detected (unanswered control frames), client: %s", remote_addr());
      terminate(NGHTTP2_ENHANCE_YOUR_CALM, nullptr);
    } else if (rv == NGHTTP2_ERR_BAD_CLIENT_MAGIC) {
      KOSOKU_LOG(kInfo, "client sent invalid http2 connection preface, client: %s", remote_addr());
      terminate(NGHTTP2_PROTOCOL_ERROR, nullptr);
    } else {
      if (rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS) ++counters_.flood;
      KOSOKU_LOG(kInfo, "client sent invalid http2 frames (%s), client: %s", nghttp2_strerror(static_cast<int>(rv)),
                 remote_addr());
      terminate(rv == NGHTTP2_ERR_TOO_MANY_CONTINUATIONS ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR,
                nullptr);
    }
    stream_->consume(in.size());
    return;
  }
  stream_->consume(static_cast<size_t>(rv));
  more_input_ = !stream_->input().empty();  // the rest on the next round or loop turn
}

void Http2Connection::send() {
  blocked_ = false;
  if (stream_ == nullptr) return;
  if (stream_->pending_output() > kHighWater) {
    blocked_ = true;
    return;
  }
  in_callback_ = true;
  const int rv = nghttp2_session_send(session_);
  in_callback_ = false;
  if (rv != 0 && stream_ != nullptr) {
    KOSOKU_LOG(kError, "http2 session failed (%s), client: %s", nghttp2_strerror(rv), remote_addr());
    close(net::Stream::Close::kAbort);
  }
}

void Http2Connection::run_events() {
  // Heads complete: the phases run (a handler may answer at once and call back into the session).
  while (!ready_.empty() && stream_ != nullptr) {
    std::vector<Http2Request*> ready;
    ready.swap(ready_);
    for (Http2Request* r : ready) {
      if (r->stream_closed_) continue;
      r->phases_run_ = true;
      ++core_.stats->requests;
      if (r->reject_status_ != 0) {
        r->reject(r->reject_status_, core_.reactor->now_ms());
      } else {
        r->run_phases();
      }
    }
  }
  if (!events_) return;
  events_ = false;
  for (Http2Request* r = requests_head_; r != nullptr; r = r->next_) {
    if (r->stream_closed_ && !r->finished_ && !r->closed_normally_ && !r->abort_told_ && r->phases_run_) {
      // The stream went (the client reset it, or the connection is gone) while its response was in progress.
      r->abort_told_ = true;
      if (http::ContentState* st = r->state().get()) {
        st->on_abort();  // calls release() now or once its own I/O is done
      } else {
        r->released_ = true;
      }
      continue;
    }
    if (r->stream_closed_) continue;
    if (r->sink_ != nullptr && !r->body_paused_ && (!r->body_in_.empty() || r->body_end_ || r->body_error_ != 0)) {
      r->deliver_body();
    }
    if (r->above_low_ && !r->finished_ && r->pending_output() <= r->low_water_) {
      r->above_low_ = false;
      if (http::ContentState* st = r->state().get()) st->on_writable();
    }
  }
  reap();
}

void Http2Connection::reap() {
  const uint64_t done = sent();
  for (Http2Request* r = requests_head_; r != nullptr;) {
    Http2Request* next = r->next_;
    const bool response_over = r->finished_ || !r->phases_run_ || (r->abort_told_ && r->released_);
    if (r->stream_closed_ && response_over && r->retire_at_ <= done) {
      unlink(r);
      delete r;
    }
    r = next;
  }
}

void Http2Connection::terminate(uint32_t code, const char* why) {
  if (why != nullptr) KOSOKU_LOG(kInfo, "%s, client: %s", why, remote_addr());
  if (session_ != nullptr && !closing_) nghttp2_session_terminate_session2(session_, goaway_last_id(), code);
  goaway_sent_ = true;
  closing_ = true;
}

void Http2Connection::close(net::Stream::Close how) {
  closing_ = true;
  reactor::Timer* t = this;
  core_.reactor->timers().cancel(*t);
  if (stream_ != nullptr) {
    net::Stream* s = stream_;
    s->close(how);  // on_closed follows, now or later
  }
}

void Http2Connection::arm_timer() {
  if (stream_ == nullptr) return;
  reactor::Timer* t = this;
  uint64_t ms = 0;
  if (stream_->pending_output() > 0) {
    ms = listen_.default_server->base.send_timeout_ms;
  } else if (requests_count_ == 0) {
    ms = conf_.idle_timeout_ms != 0 ? conf_.idle_timeout_ms : listen_.default_server->base.keepalive_timeout_ms;
    if (ms == 0) ms = 1;  // keepalive_timeout 0: close as soon as the connection is idle
  } else {
    // A handler waiting for room (on_writable) is looked at again after send_timeout at the latest.
    for (Http2Request* r = requests_head_; r != nullptr && ms == 0; r = r->next_) {
      if (r->above_low_ && !r->stream_closed_) ms = listen_.default_server->base.send_timeout_ms;
    }
  }
  if (ms == 0) {
    core_.reactor->timers().cancel(*t);
    return;
  }
  core_.reactor->timers().arm(*t, core_.reactor->now_ms() + ms);
}

void Http2Connection::fire() {
  if (stream_ == nullptr) return;
  if (stream_->pending_output() > 0) {
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while sending response to client, client: %s",
               remote_addr());
    close(net::Stream::Close::kAbort);
    return;
  }
  if (requests_count_ > 0) {
    events_ = true;  // run_events tells the handlers whose pending output fell below their mark
    process();
    return;
  }
  // Idle: a graceful GOAWAY, then the close once it is out.
  if (!goaway_sent_) {
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, goaway_last_id(), NGHTTP2_NO_ERROR, nullptr, 0);
    goaway_sent_ = true;
  }
  closing_ = true;
  process();
}

void Http2Connection::shutdown_if_idle() {
  if (stream_ == nullptr || goaway_sent_) return;
  // RFC 9113 §6.8: the last stream id taken; the streams up to it are answered, none is opened after.
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, goaway_last_id(), NGHTTP2_NO_ERROR, nullptr, 0);
  goaway_sent_ = true;
  schedule();
}

bool Http2Connection::close_if_idle() {
  if (stream_ == nullptr || requests_count_ != 0 || requests_head_ != nullptr || stream_->pending_output() != 0) {
    return false;
  }
  close(net::Stream::Close::kAbort);
  return true;
}

void Http2Connection::consume(int32_t id, size_t n) {
  if (session_ != nullptr && n > 0) {
    nghttp2_session_consume(session_, id, n);
    if (!in_callback_) schedule();  // a WINDOW_UPDATE to send
  }
}

bool Http2Connection::charge_reset() {
  const uint64_t now = core_.reactor->now_ms();
  reset_tokens_ = std::min(reset_burst_, reset_tokens_ + (now - reset_refill_ms_) * reset_rate_ / 1000.0);
  reset_refill_ms_ = now;
  if (reset_tokens_ < 1) return false;
  reset_tokens_ -= 1;
  return true;
}

bool Http2Connection::charge_control(size_t n) {
  control_bytes_ += n;
  return control_bytes_ <= payload_bytes_ + kControlAllowance;
}

void Http2Connection::link(Http2Request* r) {
  r->prev_ = requests_tail_;
  r->next_ = nullptr;
  if (requests_tail_ != nullptr) {
    requests_tail_->next_ = r;
  } else {
    requests_head_ = r;
  }
  requests_tail_ = r;
}

void Http2Connection::unlink(Http2Request* r) {
  if (r->prev_ != nullptr) {
    r->prev_->next_ = r->next_;
  } else {
    requests_head_ = r->next_;
  }
  if (r->next_ != nullptr) {
    r->next_->prev_ = r->prev_;
  } else {
    requests_tail_ = r->prev_;
  }
  r->prev_ = r->next_ = nullptr;
}

Http2Request* Http2Connection::request_of(int32_t id) const {
  return session_ != nullptr ? static_cast<Http2Request*>(nghttp2_session_get_stream_user_data(session_, id))
                             : nullptr;
}

// ---- libnghttp2 callbacks: they record, the connection acts after the library returns

ssize_t Http2Connection::on_send(nghttp2_session*, const uint8_t* data, size_t len, int, void* p) {
  Http2Connection* c = self(p);
  if (c->stream_ == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (c->stream_->pending_output() > kHighWater) {
    c->blocked_ = true;
    return NGHTTP2_ERR_WOULDBLOCK;
  }
  c->stream_->write(std::string_view(reinterpret_cast<const char*>(data), len));
  c->committed_ += len;
  return static_cast<ssize_t>(len);
}

int Http2Connection::on_send_data(nghttp2_session*, nghttp2_frame*, const uint8_t* framehd, size_t length,
                                  nghttp2_data_source* src, void* p) {
  Http2Connection* c = self(p);
  if (c->stream_ == nullptr) return NGHTTP2_ERR_CALLBACK_FAILURE;
  if (c->stream_->pending_output() > kHighWater) {
    c->blocked_ = true;
    return NGHTTP2_ERR_WOULDBLOCK;
  }
  auto* r = static_cast<Http2Request*>(src->ptr);
  r->send_data(framehd, length);
  c->payload_bytes_ += length;
  return 0;
}

int Http2Connection::on_begin_frame(nghttp2_session* session, const nghttp2_frame_hd* hd, void* p) {
  Http2Connection* c = self(p);
  if (hd->type != NGHTTP2_HEADERS || (hd->stream_id & 1) == 0 || hd->stream_id >= c->max_request_id_) return 0;
  if (nghttp2_session_find_stream(session, hd->stream_id) != nullptr) return 0;  // trailers
  // RFC 9113 §5.1.1: a client stream id below one already used opens nothing — a closed stream's id again, or
  // one skipped. Only a stream the server reset may still see the client's HEADERS (trailers in flight).
  if (std::find(c->reset_ids_.begin(), c->reset_ids_.end(), hd->stream_id) != c->reset_ids_.end()) return 0;
  if (!c->closing_) {
    KOSOKU_LOG(kInfo, "client sent HEADERS for stream %d below stream %d, client: %s", hd->stream_id,
               c->max_request_id_, c->remote_addr());
    c->terminate(NGHTTP2_PROTOCOL_ERROR, nullptr);
  }
  return 0;
}

int Http2Connection::on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame, void* p) {
  Http2Connection* c = self(p);
  if (frame->hd.type != NGHTTP2_HEADERS) return 0;
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    if (Http2Request* r = c->request_of(frame->hd.stream_id)) r->trailers_ = true;
    return 0;
  }
  if (c->goaway_sent_) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  c->max_request_id_ = std::max(c->max_request_id_, frame->hd.stream_id);
  auto* r = new Http2Request(*c, frame->hd.stream_id, c->srv_, *c->listen_.default_server);
  c->link(r);
  if (++c->requests_count_ == 1) {
    --c->core_.stats->conn_idle;
    ++c->core_.stats->conn_writing;
  }
  ++c->requests_;
  ++c->counters_.streams;
  ++c->counters_.streams_active;
  nghttp2_session_set_stream_user_data(session, frame->hd.stream_id, r);
  // The header block must be complete within client_header_timeout (no other frame may come meanwhile).
  r->arm(Http2Request::TimerRole::kHead, c->listen_.default_server->client_header_timeout_ms);
  // keepalive_requests (nginx >= 1.19.7 for HTTP/2 too): this stream is served, then the connection ends.
  if (c->requests_ >= c->listen_.default_server->base.keepalive_requests && !c->goaway_sent_) {
    nghttp2_submit_goaway(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR, nullptr, 0);
    c->goaway_sent_ = true;
    c->goaway_last_ = frame->hd.stream_id;
  }
  return 0;
}

int Http2Connection::on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                               const uint8_t* value, size_t valuelen, uint8_t, void* p) {
  Http2Connection* c = self(p);
  Http2Request* r = c->request_of(frame->hd.stream_id);
  if (r == nullptr || r->trailers_) return 0;
  c->payload_bytes_ += namelen + valuelen;
  r->add_field(std::string_view(reinterpret_cast<const char*>(name), namelen),
               std::string_view(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}

int Http2Connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* p) {
  Http2Connection* c = self(p);
  const bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  switch (frame->hd.type) {
    case NGHTTP2_HEADERS: {
      Http2Request* r = c->request_of(frame->hd.stream_id);
      if (r == nullptr) return 0;
      if (r->trailers_) {
        r->trailers_ = false;
        if (end_stream) {
          r->body_end_ = true;
          c->events_ = true;
        }
        return 0;
      }
      r->head_done_ = true;
      r->arm(Http2Request::TimerRole::kNone, 0);
      r->reject_status_ = r->complete_head(end_stream);
      c->ready_.push_back(r);
      return 0;
    }
    case NGHTTP2_DATA:
      if (frame->hd.length == 0 && !end_stream &&
          !c->charge_control(kFrameHeaderLen)) {  // empty DATA frames (CVE-2019-9518)
        ++c->counters_.flood;
        c->terminate(NGHTTP2_ENHANCE_YOUR_CALM, "http2 flood detected (empty DATA frames)");
        return 0;
      }
      if (end_stream) {
        if (Http2Request* r = c->request_of(frame->hd.stream_id)) {
          r->body_end_ = true;
          c->events_ = true;
        }
      }
      return 0;
    case NGHTTP2_RST_STREAM:
      ++c->counters_.rst_received;
      if (!c->charge_reset()) {
        ++c->counters_.rapid_reset;
        c->terminate(NGHTTP2_ENHANCE_YOUR_CALM, "http2 flood detected (streams reset too fast)");
      }
      return 0;
    case NGHTTP2_SETTINGS:
    case NGHTTP2_PING:
    case NGHTTP2_WINDOW_UPDATE:
    case NGHTTP2_PRIORITY:
      if (!c->charge_control(kFrameHeaderLen + frame->hd.length)) {
        ++c->counters_.flood;
        c->terminate(NGHTTP2_ENHANCE_YOUR_CALM, "http2 flood detected (control frames)");
      }
      return 0;
    default:
      return 0;
  }
}

int Http2Connection::on_data_chunk(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t len, void* p) {
  Http2Connection* c = self(p);
  c->payload_bytes_ += len;
  Http2Request* r = c->request_of(id);
  if (r == nullptr || r->discarding_ || r->body_error_ != 0) {
    c->consume(id, len);
    if (r != nullptr && r->drain_left_ > 0) {
      if (len >= r->drain_left_) {
        r->drain_left_ = 0;
        nghttp2_submit_rst_stream(c->session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR);
      } else {
        r->drain_left_ -= len;
      }
    }
    return 0;
  }
  r->on_data(std::string_view(reinterpret_cast<const char*>(data), len));
  return 0;
}

int Http2Connection::before_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* p) {
  Http2Connection* c = self(p);
  if (frame->hd.type != NGHTTP2_GOAWAY || frame->goaway.last_stream_id <= c->goaway_last_ || c->stream_ == nullptr) {
    return 0;
  }
  // libnghttp2's own GOAWAY for a connection error after one of ours names the streams the session took since:
  // ours goes instead, with our last stream id and its error code (RFC 9113 §6.8: the value never increases).
  const uint32_t last = static_cast<uint32_t>(c->goaway_last_), code = frame->goaway.error_code;
  const unsigned char goaway[17] = {0, 0, 8, NGHTTP2_GOAWAY, 0, 0, 0, 0, 0,
                                    static_cast<unsigned char>(last >> 24), static_cast<unsigned char>(last >> 16),
                                    static_cast<unsigned char>(last >> 8), static_cast<unsigned char>(last),
                                    static_cast<unsigned char>(code >> 24), static_cast<unsigned char>(code >> 16),
                                    static_cast<unsigned char>(code >> 8), static_cast<unsigned char>(code)};
  c->stream_->write(std::string_view(reinterpret_cast<const char*>(goaway), sizeof(goaway)));
  c->committed_ += sizeof(goaway);
  nghttp2_frame ours = *frame;
  ours.goaway.last_stream_id = c->goaway_last_;
  on_frame_send(nullptr, &ours, p);  // counted and logged as sent
  c->closing_ = true;
  return NGHTTP2_ERR_CANCEL;
}

int Http2Connection::on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* p) {
  Http2Connection* c = self(p);
  if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    Http2Request* r = c->request_of(frame->hd.stream_id);
    if (r != nullptr && !r->body_end_ && !r->stream_closed_) {
      // The response is complete before the request body (RFC 9113 §8.1). The rest of the body is read and
      // dropped, up to kDrainAfterResponse bytes and client_body_timeout, then RST_STREAM NO_ERROR asks the
      // client to stop: a reset that comes while the client still sends makes some clients lose the response.
      r->discarding_ = true;
      c->consume(r->id_, r->body_in_.size());
      std::string().swap(r->body_in_);
      r->drain_left_ = kDrainAfterResponse;
      r->arm(Http2Request::TimerRole::kBody, r->loc_->client_body_timeout_ms);
    }
  }
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    ++c->counters_.rst_sent;
    c->reset_ids_[c->reset_next_++ % c->reset_ids_.size()] = frame->hd.stream_id;
    // Streams the server resets because of what the client sent count as the client's resets.
    if (frame->rst_stream.error_code != NGHTTP2_NO_ERROR && !c->charge_reset() && !c->goaway_sent_) {
      ++c->counters_.rapid_reset;
      c->terminate(NGHTTP2_ENHANCE_YOUR_CALM, "http2 flood detected (streams reset too fast)");
    }
  } else if (frame->hd.type == NGHTTP2_GOAWAY) {
    c->goaway_sent_ = true;
    c->goaway_last_ = std::min(c->goaway_last_, frame->goaway.last_stream_id);
    switch (frame->goaway.error_code) {
      case NGHTTP2_NO_ERROR:
        ++c->counters_.goaway_no_error;
        break;
      case NGHTTP2_ENHANCE_YOUR_CALM:
        ++c->counters_.goaway_enhance_your_calm;
        break;
      case NGHTTP2_PROTOCOL_ERROR:
      case NGHTTP2_FRAME_SIZE_ERROR:
      case NGHTTP2_COMPRESSION_ERROR:
      case NGHTTP2_FLOW_CONTROL_ERROR:
      case NGHTTP2_STREAM_CLOSED:
        ++c->counters_.goaway_protocol_error;
        break;
      default:
        ++c->counters_.goaway_other;
        break;
    }
    if (frame->goaway.error_code != NGHTTP2_NO_ERROR) {
      KOSOKU_LOG(kInfo, "http2 connection closed with GOAWAY %s, client: %s", error_name(frame->goaway.error_code),
                 c->remote_addr());
    }
  }
  return 0;
}

int Http2Connection::on_stream_close(nghttp2_session*, int32_t id, uint32_t error_code, void* p) {
  Http2Connection* c = self(p);
  Http2Request* r = c->request_of(id);
  if (r == nullptr || r->stream_closed_) return 0;
  r->closed_normally_ = error_code == NGHTTP2_NO_ERROR && r->head_sent_ && !r->cut_ &&
                        (r->eof_ || !r->has_body_);
  c->stream_gone(r);
  return 0;
}

void Http2Connection::stream_gone(Http2Request* r) {
  r->stream_closed_ = true;
  reactor::Timer* t = r;
  core_.reactor->timers().cancel(*t);
  --counters_.streams_active;
  if (--requests_count_ == 0) {
    --core_.stats->conn_writing;
    ++core_.stats->conn_idle;
  }
  events_ = true;
}

int Http2Connection::on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int lib_error, void* p) {
  Http2Connection* c = self(p);
  KOSOKU_LOG(kInfo, "client sent invalid http2 frame (type %d, stream %d: %s), client: %s", frame->hd.type,
             frame->hd.stream_id, nghttp2_strerror(lib_error), c->remote_addr());
  return 0;
}

}  // namespace kosoku::http2
