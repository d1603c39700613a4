// Http2Request (http2_connection.hh): the wire half of a request on an HTTP/2 stream — the head made from the
// decoded field lines, the response head as HPACK fields, the body queue behind the stream's DATA frames, and
// the request body under flow control.
#include <algorithm>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/http/conditional.hh"
#include "core/http/status.hh"
#include "core/http/uri.hh"
#include "core/http2/http2_conf.hh"
#include "core/http2/http2_connection.hh"
#include "core/stats/counters.hh"

namespace kosoku::http2 {

namespace {

void release_block(net::OutBlock* b) { net::OutBlock::destroy(b); }

// RFC 9113 §8.2.2: fields that are specific to an HTTP/1.1 connection never go into an HTTP/2 message.
bool connection_specific(std::string_view lower_name) {
  return lower_name == "connection" || lower_name == "keep-alive" || lower_name == "proxy-connection" ||
         lower_name == "transfer-encoding" || lower_name == "upgrade";
}

}  // namespace

Http2Request::Http2Request(Http2Connection& c, int32_t id, http::HttpServer& srv,
                           const config::ServerConf& default_server)
    : http::HttpRequest(srv, default_server), conn_(c), id_(id) {}

Http2Request::~Http2Request() {
  content_.reset();  // first: its destructor may still ask the wire
  replaced_content_.clear();
  out_.clear(release_block);
}

// ---- Exchange: the connection's side

std::string_view Http2Request::remote_addr() const { return conn_.remote_addr(); }
const sockaddr* Http2Request::peer_addr() const { return conn_.stream_ != nullptr ? conn_.stream_->peer() : nullptr; }
const net::Stream* Http2Request::stream() const { return conn_.stream_; }
uint16_t Http2Request::server_port() const { return conn_.server_port_; }
uint64_t Http2Request::connection_id() const { return conn_.id_; }
uint64_t Http2Request::connection_requests() const { return conn_.requests_; }

// ---- the request head

void Http2Request::add_field(std::string_view name, std::string_view value) {
  if (too_large_) return;
  const config::ServerConf& s = *server_;
  field_bytes_ += name.size() + value.size() + 32;
  ++field_count_;
  if (field_bytes_ > s.client_header_buffer_size + s.large_client_header_buffers_size * s.large_client_header_buffers_num ||
      name.size() + value.size() + 2 > s.large_client_header_buffers_size || field_count_ > s.max_headers) {
    too_large_ = true;  // the rest of the list is decoded (HPACK state) and dropped
    return;
  }
  // libnghttp2 has checked the list (RFC 9113 §8.2.1, §8.3): lower-case names, no CR, LF or NUL, pseudo-header
  // fields first and only the request's, no connection-specific field.
  if (name[0] == ':') {
    std::string* to = name == ":method" ? &method_ : name == ":path" ? &path_ : name == ":authority" ? &authority_
                                                                                                      : &scheme_;
    to->assign(value);
    return;
  }
  if (name == "cookie") {  // RFC 9113 §8.2.3: several crumbs make one field line again
    if (!cookie_.empty()) cookie_.append("; ");
    cookie_.append(value);
    return;
  }
  if (name == "host") {  // the head's Host comes from :authority, or from this field without one
    host_.assign(value);
    return;
  }
  absl::StrAppend(&fields_text_, name, ": ", value, "\r\n");
}

int Http2Request::complete_head(bool end_stream) {
  if (too_large_) {
    KOSOKU_LOG(kInfo, "client sent too large http2 header list, client: %s", conn_.remote_addr());
    return 431;
  }
  if (authority_.empty()) {
    authority_.swap(host_);
  } else if (!host_.empty() && !absl::EqualsIgnoreCase(host_, authority_)) {
    // RFC 9113 §8.3.1: a Host that differs from :authority is malformed (nginx refuses it too).
    KOSOKU_LOG(kInfo, "client sent \"Host\" header that differs from \":authority\", client: %s",
               conn_.remote_addr());
    return 400;
  }
  // The head is read by the HTTP/1.1 parser (one grammar, one set of limits for both protocols): the
  // request line from the pseudo-header fields, Host from :authority.
  std::string& h = srv_.head_scratch;
  h.clear();
  const std::string_view target = method_ == "CONNECT" ? std::string_view(authority_) : std::string_view(path_);
  absl::StrAppend(&h, method_, " ", target, " HTTP/1.1\r\nhost: ", authority_, "\r\n", fields_text_);
  if (!cookie_.empty()) absl::StrAppend(&h, "cookie: ", cookie_, "\r\n");
  h.append("\r\n");
  for (std::string* s : {&method_, &path_, &authority_, &host_, &scheme_, &cookie_, &fields_text_}) std::string().swap(*s);
  const config::ServerConf& s = *server_;
  http::ParserLimits limits;
  limits.max_fields = s.max_headers;
  limits.initial_buffer = h.size();
  limits.max_request_line = s.large_client_header_buffers_size;
  limits.max_field_line = s.large_client_header_buffers_size;
  limits.max_header_section = h.size();
  const http::ParseResult pr = http::parse_request(h, req_, limits);
  if (pr.status != http::ParseStatus::kComplete) {
    KOSOKU_LOG(kInfo, "client sent invalid request (%s, %d), client: %s", pr.reason, pr.http_status,
               conn_.remote_addr());
    return pr.http_status != 0 ? pr.http_status : 400;
  }
  begin(conn_.listen_, std::span<const char>(h.data(), h.size()), pr.consumed, conn_.core_.reactor->now_ms());
  req_.version_major = 2;
  if (end_stream) {
    body_end_ = true;
  } else if (req_.body == http::BodyFraming::kNone) {
    req_.body = http::BodyFraming::kChunked;  // a body of unknown length: DATA frames until END_STREAM
  }
  return 0;
}

// ---- the response

void Http2Request::send_head() {
  if (head_sent_ || stream_closed_ || conn_.session_ == nullptr) return;
  head_sent_ = true;
  const http::ResponseHead& head = head_;
  const int status = status_ = final_status();
  // The fields as "name: value\r\n" lines first (the modules' head filters write them so), then one pass makes
  // the HPACK list, pointing into the text: names lower-cased, connection-specific fields dropped.
  std::string& h = srv_.head_scratch;
  h.clear();
  absl::StrAppend(&h, ":status: ", status, "\r\nserver: ",
                  loc_->server_tokens ? http::kServerWithVersion : http::kServerName, "\r\ndate: ",
                  conn_.core_.reactor->http_date(), "\r\n");
  if (!head.content_type.empty()) absl::StrAppend(&h, "content-type: ", head.content_type, "\r\n");
  if (head.content_length >= 0 && status != 304 && status != 204 && status >= 200) {
    absl::StrAppend(&h, "content-length: ", head.content_length, "\r\n");
  }
  const bool error_page_body = status != head.status;  // as HTTP/1.1: no validators, no ranges
  if (head.last_modified >= 0 && !error_page_body) {
    char date[http::kHttpDateLen];
    absl::StrAppend(&h, "last-modified: ", http::format_http_date(head.last_modified, date), "\r\n");
  }
  if (!head.etag.empty()) absl::StrAppend(&h, "etag: ", head.etag, "\r\n");
  if (!head.location.empty()) {
    h.append("location: ");
    http::append_uri_field(head.location, h);
    h.append("\r\n");
  }
  if (head.accept_ranges && !error_page_body) h.append("accept-ranges: bytes\r\n");
  h.append(head.extra);
  append_module_fields(status, h);
  body_bytes_out_head_ = h.size();

  absl::InlinedVector<nghttp2_nv, 24> nv;
  for (size_t at = 0; at < h.size();) {
    size_t eol = h.find("\r\n", at);
    if (eol == std::string::npos) eol = h.size();
    const size_t colon = h.find(':', at == 0 ? 1 : at);  // ":status" starts with one
    if (colon != std::string::npos && colon < eol && colon > at) {
      char* name = h.data() + at;
      const size_t name_len = colon - at;
      for (size_t i = 0; i < name_len; ++i) name[i] = absl::ascii_tolower(static_cast<unsigned char>(name[i]));
      size_t v = colon + 1;
      while (v < eol && (h[v] == ' ' || h[v] == '\t')) ++v;
      if (!connection_specific(std::string_view(name, name_len))) {
        nv.push_back(nghttp2_nv{reinterpret_cast<uint8_t*>(name), reinterpret_cast<uint8_t*>(h.data() + v), name_len,
                                eol - v, NGHTTP2_NV_FLAG_NONE});
      }
    }
    at = eol + 2;
  }
  has_body_ = !head_only_ && http::status_has_body(status) && head.content_length != 0;
  nghttp2_data_provider source;
  source.source.ptr = this;
  source.read_callback = &Http2Request::read_data;
  // libnghttp2 copies the list: the scratch text may go once this returns.
  const int rv = nghttp2_submit_response(conn_.session_, id_, nv.data(), nv.size(), has_body_ ? &source : nullptr);
  if (rv != 0) {
    KOSOKU_LOG(kError, "nghttp2_submit_response() failed (%s), client: %s", nghttp2_strerror(rv), conn_.remote_addr());
    has_body_ = false;
    nghttp2_submit_rst_stream(conn_.session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  }
  conn_.schedule();
}

void Http2Request::write(std::string_view data) {
  if (!has_body_ || eof_ || stream_closed_ || data.empty()) return;
  body_bytes_ += data.size();
  out_.copy_in(data.data(), data.size(), [](size_t want) {
    return net::OutBlock::make_copied(std::clamp<size_t>(want, 4096, 64 * 1024));
  });
  queued();
}

void Http2Request::write_ref(const char* data, size_t len) {
  wrote_by_ref_ = true;
  if (!has_body_ || eof_ || stream_closed_ || len == 0) return;
  body_bytes_ += len;
  out_.push_back(net::OutBlock::make_ref(data, len));
  queued();
}

void Http2Request::write_shared(net::SharedBuffer& buf, const char* data, size_t len) {
  if (!has_body_ || eof_ || stream_closed_ || len == 0) return;
  body_bytes_ += len;
  out_.push_back(net::OutBlock::make_shared(buf, data, len));
  queued();
}

void Http2Request::queued() {
  if (pending_output() > low_water_) above_low_ = true;
  if (deferred_ && conn_.session_ != nullptr) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_.session_, id_);
  }
  if (!armed()) arm(TimerRole::kSend, loc_->send_timeout_ms);
  conn_.schedule();
}

size_t Http2Request::pending_output() const {
  const uint64_t sent = conn_.sent();
  return out_.bytes() + (in_stream_end_ > sent ? static_cast<size_t>(in_stream_end_ - sent) : 0);
}

void Http2Request::set_low_water(size_t bytes) {
  low_water_ = bytes;
  if (pending_output() > bytes) above_low_ = true;
}

ssize_t Http2Request::read_data(nghttp2_session*, int32_t, uint8_t*, size_t length, uint32_t* flags,
                                nghttp2_data_source* src, void*) {
  auto* r = static_cast<Http2Request*>(src->ptr);
  const size_t chunk = r->loc_->module<Http2LocConf>().chunk_size;
  const size_t n = std::min({length, r->out_.bytes(), chunk});
  if (n == 0) {
    if (r->eof_) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      return 0;
    }
    r->deferred_ = true;
    return NGHTTP2_ERR_DEFERRED;
  }
  *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
  if (r->eof_ && n == r->out_.bytes()) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return static_cast<ssize_t>(n);
}

void Http2Request::send_data(const uint8_t* framehd, size_t length) {
  net::Stream& s = *conn_.stream_;
  s.write(std::string_view(reinterpret_cast<const char*>(framehd), 9));
  bool by_ref = false;
  size_t left = length;
  for (net::OutBlock* b = out_.head(); b != nullptr && left > 0; b = b->next) {
    const size_t k = std::min(left, b->size());
    const char* p = b->bytes() + b->begin;
    // The TLS layer copies every byte into a record anyway: the frame's bytes go into its buffer at once
    // (one copy, no block per piece) instead of being gathered from references there.
    if (b->copied() || conn_.secure_) {
      s.write(std::string_view(p, k));
    } else if (b->shared != nullptr) {
      s.write_shared(*b->shared, p, k);
    } else {
      s.write_ref(p, k);
      by_ref = true;
    }
    left -= k;
  }
  conn_.committed_ += 9 + length;
  out_.drop_front(length, release_block);
  in_stream_end_ = conn_.committed_;
  if (by_ref) retire_at_ = conn_.committed_;
  if (above_low_) conn_.events_ = true;
  if (out_.bytes() > 0) {
    arm(TimerRole::kSend, loc_->send_timeout_ms);  // progress: the timeout starts again
  } else if (timer_role_ == TimerRole::kSend) {
    arm(TimerRole::kNone, 0);
  }
}

void Http2Request::finish() {
  if (finished_) return;
  finished_ = true;
  eof_ = true;
  sink_ = nullptr;
  if (http::ContentState* st = state().get()) st->on_response_complete();
  conn_.core_.stats->count_response(status_);
  log(body_bytes_ + body_bytes_out_head_, conn_.core_.reactor->now_ms());
  if (wrote_by_ref()) release_head();  // as HTTP/1.1: what stays is the content state that owns the bytes
  if (deferred_ && !stream_closed_ && conn_.session_ != nullptr) {
    deferred_ = false;
    nghttp2_session_resume_data(conn_.session_, id_);
  }
  conn_.events_ = true;
  conn_.schedule();
}

void Http2Request::abort_response() {
  if (finished_ || cut_) return;
  cut_ = true;
  conn_.core_.stats->count_response(status_);
  log(body_bytes_ + body_bytes_out_head_, conn_.core_.reactor->now_ms());
  // The client sees the stream reset, never a short response that looks complete; the content state gets
  // on_abort() once the stream is closed.
  if (!stream_closed_ && conn_.session_ != nullptr) {
    nghttp2_submit_rst_stream(conn_.session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_INTERNAL_ERROR);
  }
  conn_.schedule();
}

void Http2Request::release() {
  released_ = true;
  conn_.events_ = true;
  conn_.schedule();
}

// ---- the request body

void Http2Request::read_body(http::BodySink* sink) {
  if (stream_closed_ || sink_ != nullptr || finished_) return;
  if (body_end_ && body_in_.empty() && body_error_ == 0) {
    sink->on_body_end();
    return;
  }
  sink_ = sink;
  if (req_.expect_100_continue && !body_end_ && conn_.session_ != nullptr) {
    const nghttp2_nv cont[] = {{const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(":status")),
                                const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>("100")), 7, 3,
                                NGHTTP2_NV_FLAG_NONE}};
    nghttp2_submit_headers(conn_.session_, NGHTTP2_FLAG_NONE, id_, nullptr, cont, 1, nullptr);
  }
  if (!body_end_) arm(TimerRole::kBody, loc_->client_body_timeout_ms);
  conn_.events_ = true;
  conn_.schedule();
}

void Http2Request::pause_body(bool paused) {
  body_paused_ = paused;
  if (!paused && sink_ != nullptr) {
    conn_.events_ = true;
    conn_.schedule();
  }
}

int Http2Request::discard_available_body() {
  discarding_ = true;
  conn_.consume(id_, body_in_.size());
  std::string().swap(body_in_);
  return body_error_;
}

void Http2Request::on_data(std::string_view data) {
  body_received_ += data.size();
  const uint64_t max = loc_->client_max_body_size;
  if (max != 0 && body_received_ > max) {
    KOSOKU_LOG(kError, "client intended to send too large body: %llu bytes, client: %s",
               static_cast<unsigned long long>(body_received_), conn_.remote_addr());
    body_error_ = 413;
    conn_.consume(id_, body_in_.size() + data.size());
    std::string().swap(body_in_);
  } else {
    body_in_.append(data);
  }
  conn_.events_ = true;
  if (timer_role_ == TimerRole::kBody) arm(TimerRole::kBody, loc_->client_body_timeout_ms);
}

void Http2Request::deliver_body() {
  while (sink_ != nullptr && !body_paused_ && !stream_closed_) {
    if (body_error_ != 0) {
      body_failed(body_error_);
      return;
    }
    if (!body_in_.empty()) {
      std::string chunk;
      chunk.swap(body_in_);
      sink_->on_body_data(chunk);  // may pause, answer or finish
      conn_.consume(id_, chunk.size());
      if (body_in_.empty()) {  // nothing came meanwhile: the buffer is kept for the next DATA
        chunk.clear();
        body_in_.swap(chunk);
      }
      continue;
    }
    if (body_end_) {
      http::BodySink* s = sink_;
      sink_ = nullptr;
      if (timer_role_ == TimerRole::kBody) arm(TimerRole::kNone, 0);
      s->on_body_end();
    }
    return;
  }
}

void Http2Request::body_failed(int status) {
  http::BodySink* s = sink_;
  sink_ = nullptr;
  if (timer_role_ == TimerRole::kBody) arm(TimerRole::kNone, 0);
  if (s != nullptr) s->on_body_error(status);
}

// ---- timers

void Http2Request::arm(TimerRole role, uint64_t ms) {
  reactor::Timer* t = this;
  timer_role_ = role;
  if (role == TimerRole::kNone || ms == 0) {
    conn_.core_.reactor->timers().cancel(*t);
    timer_role_ = TimerRole::kNone;
    return;
  }
  conn_.core_.reactor->timers().arm(*t, conn_.core_.reactor->now_ms() + ms);
}

void Http2Request::fire() {
  const TimerRole role = timer_role_;
  timer_role_ = TimerRole::kNone;
  if (stream_closed_) return;
  if (role == TimerRole::kHead) {
    // The header block stopped midway: nothing else can come on the connection until it ends (RFC 9113 §6.10).
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while reading client request headers, "
               "client: %s", conn_.remote_addr());
    conn_.terminate(NGHTTP2_NO_ERROR, nullptr);
  } else if (role == TimerRole::kBody && drain_left_ > 0) {
    // The response is out and the rest of the body did not come within client_body_timeout.
    drain_left_ = 0;
    if (conn_.session_ != nullptr) nghttp2_submit_rst_stream(conn_.session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_NO_ERROR);
  } else if (role == TimerRole::kBody) {
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while reading client request body, client: %s",
               conn_.remote_addr());
    body_error_ = 408;
    if (sink_ != nullptr) body_failed(408);
  } else if (role == TimerRole::kSend) {
    // The client's windows held the response back for send_timeout (a zero-window stall): the stream goes.
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while sending response to client, client: %s",
               conn_.remote_addr());
    if (conn_.session_ != nullptr) nghttp2_submit_rst_stream(conn_.session_, NGHTTP2_FLAG_NONE, id_, NGHTTP2_CANCEL);
  }
  conn_.events_ = true;
  conn_.process();
}

}  // namespace kosoku::http2
