// HttpConnection: the connection's life (contract: connection.hh; the class: connection_impl.hh). Reading and
// parsing request heads, pipelining, request bodies (read for a handler or discarded), the response head and
// body on the wire, keep-alive and closing; and HttpServer. The request phases are in connection_phases.cc.
#include "core/http/connection.hh"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/http/conditional.hh"
#include "core/http/connection_impl.hh"
#include "core/http/status.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"

namespace kosoku::http {

namespace {

// Pipelined requests are answered back to back until this much output is waiting, then the connection waits
// for the peer to read (bounded memory per connection whatever the peer sends).
constexpr size_t kPipelineHighWater = 256 * 1024;
constexpr size_t kDiscardChunk = 64 * 1024;

// add_header applies to these statuses unless `always` (nginx ngx_http_headers_filter).
bool add_header_status(int s) {
  return s == 200 || s == 201 || s == 204 || s == 206 || s == 301 || s == 302 || s == 303 || s == 304 ||
         s == 307 || s == 308;
}

std::string_view rebase(std::string_view v, const char* from, size_t len, const char* to) {
  if (v.data() >= from && v.data() < from + len) return std::string_view(to + (v.data() - from), v.size());
  return v;  // static literal ("/" or "*")
}

}  // namespace

// Timer: client_header_timeout, client_body_timeout, keepalive_timeout, send_timeout.
void HttpConnection::fire() {
  if (stream_ == nullptr) return;
  if (state_ == State::kBusy && body_sink_ != nullptr) {
    // client_body_timeout: the handler answers (nginx logs 408 and closes).
    body_failed(408);
    if (stream_ != nullptr) stream_->flush();
    return;
  }
  if (state_ == State::kReadingHead && !stream_->input().empty()) {
    // client_header_timeout: answer 408 and close.
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while reading client request headers, "
               "client: %s", remote_addr());
    send_simple_error(408);
    return;
  }
  if (state_ == State::kDiscardBody) {
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while reading client request body, "
               "client: %s", remote_addr());
  } else if (state_ == State::kBusy) {
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while sending response to client, "
               "client: %s", remote_addr());
  }
  close(net::Stream::Close::kAbort);
}

void HttpConnection::process() {
  if (in_process_) return;
  in_process_ = true;
  while (stream_ != nullptr) {
    if (state_ == State::kBusy && body_sink_ != nullptr && !body_paused_) {
      deliver_body();
      break;
    }
    if (state_ == State::kClosing || state_ == State::kBusy) break;
    if (state_ == State::kDiscardBody) {
      if (!discard_body()) break;
      continue;
    }
    std::span<const char> in = stream_->input();
    if (in.empty()) {
      // The client half-closed (FIN) and every request it sent is answered: close now, as nginx does, instead
      // of idling until keepalive_timeout. (A FIN in the middle of a head or body is handled by on_peer_closed.)
      if (peer_closed_ && state_ == State::kIdle) {
        close(net::Stream::Close::kGraceful);
      } else if (state_ == State::kIdle) {
        release_request();
      }
      break;
    }
    if (stream_->pending_output() > kPipelineHighWater) {
      waiting_output_ = true;
      stream_->set_low_water(kPipelineHighWater / 2);
      break;
    }
    if (state_ == State::kIdle) {
      state_ = State::kReadingHead;
      set_stat(&core_.stats->conn_reading);
      arm(listen_.default_server->client_header_timeout_ms);
      if (fields_ == nullptr) {
        fields_ = srv_.take_fields();
        req_.fields = std::span<HeaderField>(fields_.get(), kMaxFields);
      }
    }
    ParseResult r = parse_request(std::string_view(in.data(), in.size()), req_, limits_, last_len_);
    if (r.status == ParseStatus::kPartial) {
      last_len_ = in.size();
      break;
    }
    last_len_ = 0;
    if (r.status == ParseStatus::kError) {
      server_ = listen_.default_server;
      loc_ = &server_->base;
      KOSOKU_LOG(kInfo, "client sent invalid request (%s, %d), client: %s", r.reason, r.http_status,
                 stream_->peer_text());
      send_simple_error(r.http_status);
      break;
    }
    start_request(in, r.consumed);
  }
  if (stream_ != nullptr && state_ != State::kClosing) stream_->flush();
  in_process_ = false;
}

void HttpConnection::release_request() {
  if (fields_ == nullptr) return;  // released already: every request starts by taking a table
  srv_.give_fields(std::move(fields_));
  chunked_.reset();
  req_ = Request{};
  // Assigning an empty string keeps the capacity: swap with one instead.
  for (std::string* s : {&head_buf_, &uri_, &host_lower_, &return_body_}) std::string().swap(*s);
  { ResponseHead last = std::move(head_); }  // moved from: its strings' buffers go with `last`
  head_ = ResponseHead{};
  if (state_slot_ != nullptr && state_slot_->on_idle()) state_slot_.reset();
}

void HttpConnection::start_request(std::span<const char> in, size_t head_len) {
  // Own the head bytes: the stream's input buffer may move while the request waits for the disk.
  head_buf_.assign(in.data(), head_len);
  const char* from = in.data();
  const char* to = head_buf_.data();
  auto rb = [&](std::string_view& v) { v = rebase(v, from, head_len, to); };
  rb(req_.method_text);
  rb(req_.target);
  rb(req_.path);
  rb(req_.query);
  rb(req_.host);
  rb(req_.host_name);
  rb(req_.host_port);
  for (HeaderField& f : req_.headers()) {
    rb(f.name);
    rb(f.value);
  }
  stream_->consume(head_len);
  head_bytes_ = head_len;

  ++core_.stats->requests;
  ++requests_;
  state_ = State::kBusy;
  set_stat(&core_.stats->conn_writing);
  // The head is in: client_header_timeout is over (nginx deletes the read timer here). While the request is
  // served the timer runs only for client_body_timeout and send_timeout, armed where they apply.
  arm(0);
  start_ms_ = core_.reactor->now_ms();
  head_ = ResponseHead{};
  head_only_ = req_.method == Method::kHead;
  head_sent_ = false;
  out_head_len_ = 0;
  body_bytes_ = 0;
  status_ = 0;
  body_left_ = 0;
  chunked_.reset();
  body_sink_ = nullptr;
  body_paused_ = false;
  chunked_out_ = false;
  body_done_ = req_.body == BodyFraming::kNone;
  if (req_.body == BodyFraming::kContentLength) body_left_ = *req_.content_length;
  if (req_.body == BodyFraming::kChunked) chunked_ = std::make_unique<ChunkedDecoder>(ChunkedLimits{});

  // Virtual server by Host (lower-cased), then the location by the normalised path.
  host_lower_.assign(req_.host_name.data(), req_.host_name.size());
  absl::AsciiStrToLower(&host_lower_);
  server_ = listen_.find_server(host_lower_);
  loc_ = &server_->base;
  set_limits(*server_);
  keep_alive_ = req_.keep_alive() && !srv_.shutting_down() && !peer_closed_;
  run_phases();
}

void HttpConnection::send_head() {
  if (stream_ == nullptr || head_sent_) return;
  head_sent_ = true;
  status_ = head_.status;
  if (head_.content_length < 0 && status_has_body(status_)) {
    // Unknown length: chunked for HTTP/1.1 (keeps the connection), close-delimited for HTTP/1.0.
    if (req_.version_minor >= 1 && !req_.method_text.empty()) {
      chunked_out_ = !head_only_;
    } else {
      keep_alive_ = false;
    }
  }
  std::string& h = srv_.head_scratch;
  h.clear();
  absl::StrAppend(&h, "HTTP/1.1 ", status_, " ", reason_phrase(status_), "\r\nServer: kosoku\r\nDate: ",
                  core_.reactor->http_date(), "\r\n");
  if (!head_.content_type.empty()) absl::StrAppend(&h, "Content-Type: ", head_.content_type, "\r\n");
  if (head_.content_length >= 0 && status_ != 304 && status_ != 204 && status_ >= 200) {
    absl::StrAppend(&h, "Content-Length: ", head_.content_length, "\r\n");
  }
  if (head_.last_modified >= 0) {
    char date[kHttpDateLen];
    absl::StrAppend(&h, "Last-Modified: ", format_http_date(head_.last_modified, date), "\r\n");
  }
  if (!keep_alive_) {
    h.append("Connection: close\r\n");
  } else {
    h.append("Connection: keep-alive\r\n");
    if (loc_ != nullptr && loc_->keepalive_header_timeout_s > 0) {
      absl::StrAppend(&h, "Keep-Alive: timeout=", loc_->keepalive_header_timeout_s, "\r\n");
    }
  }
  if (head_.content_length < 0 && status_has_body(status_) && req_.version_minor >= 1 && !req_.method_text.empty()) {
    h.append("Transfer-Encoding: chunked\r\n");
  }
  if (!head_.etag.empty()) absl::StrAppend(&h, "ETag: ", head_.etag, "\r\n");
  if (!head_.location.empty()) {
    h.append("Location: ");
    append_uri_field(head_.location, h);  // whatever set it, a control byte never leaves raw (uri.hh)
    h.append("\r\n");
  }
  if (head_.accept_ranges) h.append("Accept-Ranges: bytes\r\n");
  h.append(head_.extra);
  if (loc_ != nullptr) {
    for (const config::AddHeader& a : loc_->add_header) {
      if (!a.always && !add_header_status(status_)) continue;
      if (a.value_tpl == nullptr || !a.value_tpl->has_variables()) {
        absl::StrAppend(&h, a.name, ": ", a.value, "\r\n");
        continue;
      }
      // nginx: a header whose value expands to "" is not sent.
      std::string value;
      RequestVariables vars(*this, RequestVariables::Response{status_, 0, 0, 0}, core_.reactor);
      config::expand(*a.value_tpl, vars, value);
      if (!value.empty()) absl::StrAppend(&h, a.name, ": ", value, "\r\n");
    }
  }
  h.append("\r\n");
  out_head_len_ = h.size();
  stream_->write(h);
}

void HttpConnection::respond(int status, std::string_view body, std::string_view content_type) {
  head_.status = status;
  if (body.empty() && !(status >= 200 && status < 300)) {
    body = error_page(status);
    if (!body.empty()) content_type = "text/html";
  }
  if (status == 304 || status == 204 || status < 200) body = {};
  head_.content_type = content_type;
  head_.content_length = static_cast<int64_t>(body.size());
  if (status >= 400) head_.etag.clear();
  send_head();
  write(body);
  finish();
}

void HttpConnection::redirect(int status, std::string_view location) {
  head_.location.assign(location);
  respond(status, {}, {});
}

void HttpConnection::send_simple_error(int status) {
  // A request we could not parse: answer and close (never process what follows it on this connection).
  // It counts as a request, as in nginx's stub_status.
  ++core_.stats->requests;
  state_ = State::kBusy;
  keep_alive_ = false;
  head_only_ = false;
  head_ = ResponseHead{};
  head_sent_ = false;
  out_head_len_ = 0;
  body_bytes_ = 0;
  head_buf_.clear();
  req_.method_text = {};
  req_.target = {};
  start_ms_ = core_.reactor->now_ms();
  respond(status, {}, {});
}

void HttpConnection::finish() {
  if (state_ != State::kBusy) return;
  if (chunked_out_ && stream_ != nullptr) {
    stream_->write("0\r\n\r\n");
    chunked_out_ = false;
  }
  body_sink_ = nullptr;
  if (ContentState* st = state_slot_.get()) st->on_response_complete();
  core_.stats->count_response(status_);
  log_request();
  req_.release_fields();  // the heap storage of a head with many field lines goes now, not with the connection
  if (stream_ == nullptr) return;
  if (!keep_alive_) {
    // close() sends what is pending (no flush first: the stream can then send the last bytes with the FIN).
    // An unread request body means more bytes are on their way: linger so they cannot reset the answer.
    close(body_done_ ? net::Stream::Close::kGraceful : net::Stream::Close::kLinger);
    return;
  }
  if (!body_done_ && (body_left_ > 0 || chunked_ != nullptr)) {
    state_ = State::kDiscardBody;
    set_stat(&core_.stats->conn_reading);
    arm(loc_->client_body_timeout_ms);
  } else {
    state_ = State::kIdle;
    set_stat(&core_.stats->conn_idle);
    arm(loc_->keepalive_timeout_ms);
  }
  if (!in_process_) {
    // Finished from a completion (disk read, upstream): the next pipelined request starts from the loop's
    // task step, never inside the completion that is still on the stack (its op may be reused).
    stream_->flush();
    core_.reactor->post(&process_task_);
  }
}

bool HttpConnection::discard_body() {
  std::span<const char> in = stream_->input();
  if (in.empty()) return false;
  if (chunked_ == nullptr) {
    if (!drop_length_body(in)) {
      arm(loc_->client_body_timeout_ms);
      return false;
    }
  } else {
    // Decoded data is dropped; only framing matters (the next request starts right after the body).
    size_t window = std::min(in.size(), kDiscardChunk);
    ChunkedStep r = chunked_->decode(std::string_view(in.data(), window));
    stream_->consume(r.consumed);
    if (r.status == ChunkedStatus::kError) {
      // The response to this request is already queued: deliver it, then close (the framing is lost).
      KOSOKU_LOG(kInfo, "client sent invalid chunked body (%s), client: %s", r.reason, stream_->peer_text());
      stream_->flush();
      close(net::Stream::Close::kGraceful);
      return false;
    }
    if (r.status == ChunkedStatus::kData) return true;  // more framing may follow in the buffer
    if (r.status != ChunkedStatus::kDone) {
      arm(loc_->client_body_timeout_ms);
      return false;
    }
    chunked_.reset();
  }
  body_done_ = true;
  state_ = State::kIdle;
  set_stat(&core_.stats->conn_idle);
  arm(loc_->keepalive_timeout_ms);
  return true;
}

int HttpConnection::discard_available_body() {
  while (!body_done_ && stream_ != nullptr) {
    std::span<const char> in = stream_->input();
    if (in.empty()) return 0;
    if (chunked_ == nullptr) {
      if (drop_length_body(in)) body_done_ = true;
      return 0;
    }
    ChunkedStep r = chunked_->decode(std::string_view(in.data(), in.size()));
    stream_->consume(r.consumed);
    if (r.status == ChunkedStatus::kError) {
      KOSOKU_LOG(kInfo, "client sent invalid chunked body (%s), client: %s", r.reason, stream_->peer_text());
      body_done_ = true;
      chunked_.reset();
      return r.http_status;
    }
    if (r.status == ChunkedStatus::kDone) {
      body_done_ = true;
      chunked_.reset();
    }
    if (r.status == ChunkedStatus::kNeedMore) return 0;
  }
  return 0;
}

void HttpConnection::read_body(BodySink* sink) {
  body_sink_ = sink;
  if (body_done_) {
    body_sink_ = nullptr;
    sink->on_body_end();
    return;
  }
  if (req_.expect_100_continue && req_.version_minor >= 1) {
    stream_->write("HTTP/1.1 100 Continue\r\n\r\n");
    stream_->flush();
  }
  // An Expect: 100-continue request whose body we do read keeps the connection reusable.
  keep_alive_ = req_.keep_alive() && !srv_.shutting_down() && !peer_closed_ && requests_ < loc_->keepalive_requests;
  arm(loc_->client_body_timeout_ms);
  if (!in_process_) core_.reactor->post(&body_task_);
}

void HttpConnection::body_failed(int status) {
  BodySink* sink = body_sink_;
  body_sink_ = nullptr;
  body_done_ = true;  // nothing more is read: the connection closes after the response
  keep_alive_ = false;
  chunked_.reset();
  body_left_ = 0;
  if (sink != nullptr) sink->on_body_error(status);
}

void HttpConnection::deliver_body() {
  while (stream_ != nullptr && body_sink_ != nullptr && !body_paused_) {
    std::span<const char> in = stream_->input();
    if (in.empty()) {
      if (peer_closed_) body_failed(0);
      return;
    }
    if (chunked_ == nullptr) {
      size_t n = in.size() < body_left_ ? in.size() : static_cast<size_t>(body_left_);
      // Copy-free: the sink sees the stream's buffer; consume after the call.
      body_sink_->on_body_data(std::string_view(in.data(), n));
      if (stream_ == nullptr) return;
      stream_->consume(n);
      body_left_ -= n;
      if (body_left_ == 0) {
        body_done_ = true;
        BodySink* sink = body_sink_;
        body_sink_ = nullptr;
        sink->on_body_end();
        return;
      }
      arm(loc_->client_body_timeout_ms);
      continue;
    }
    ChunkedStep r = chunked_->decode(std::string_view(in.data(), std::min(in.size(), kDiscardChunk)));
    if (r.status == ChunkedStatus::kError) {
      stream_->consume(r.consumed);
      body_failed(r.http_status);
      return;
    }
    if (r.status == ChunkedStatus::kData) body_sink_->on_body_data(r.data);
    if (stream_ == nullptr) return;
    stream_->consume(r.consumed);
    if (r.status == ChunkedStatus::kDone) {
      chunked_.reset();
      body_done_ = true;
      BodySink* sink = body_sink_;
      body_sink_ = nullptr;
      if (sink != nullptr) sink->on_body_end();
      return;
    }
    if (r.status == ChunkedStatus::kNeedMore) {
      arm(loc_->client_body_timeout_ms);
      return;
    }
  }
}

void HttpConnection::log_request() {
  if (srv_.access_log == nullptr || loc_ == nullptr || loc_->access_log.empty()) return;
  uint64_t request_time = core_.reactor->now_ms() - start_ms_;
  srv_.access_log->log(*loc_, *this, status_, body_bytes_ + out_head_len_, body_bytes_, request_time);
}

HttpServer::HttpServer(const CoreContext& core) : core_(core) { core_.server = this; }

HttpServer::~HttpServer() {
  while (!cores_.empty()) cores_.pop_back();  // reverse registry order: a module may use the ones before it
}

bool HttpServer::init_modules(std::string* error) {
  std::span<config::Module* const> mods = config::modules();
  cores_.resize(mods.size());
  handlers_.assign(mods.size(), nullptr);
  for (const config::Module* m : mods) {
    for (const PhaseHandler& h : m->phases) phase_handlers_[static_cast<size_t>(h.phase)].push_back(h);
  }
  for (const config::Module* m : mods) {
    if (m->init_core == nullptr) continue;
    std::string err;
    cores_[m->index] = m->init_core(*this, &err);
    if (cores_[m->index] == nullptr) {
      if (err.empty()) continue;
      *error = absl::StrCat("module \"", m->name, "\": ", err);
      return false;
    }
    if (ContentHandler* h = cores_[m->index]->content_handler()) {
      handlers_[m->index] = h;
      fallback_ = m->index;
    }
  }
  return true;
}

namespace {
constexpr size_t kFreeFieldTables = 256;  // per core: 1 MB at most
}  // namespace

std::unique_ptr<HeaderField[]> HttpServer::take_fields() {
  if (free_fields_.empty()) return std::make_unique<HeaderField[]>(kMaxFields);
  std::unique_ptr<HeaderField[]> t = std::move(free_fields_.back());
  free_fields_.pop_back();
  return t;
}

void HttpServer::give_fields(std::unique_ptr<HeaderField[]> table) {
  if (free_fields_.size() < kFreeFieldTables) free_fields_.push_back(std::move(table));
}

net::StreamHandler* HttpServer::on_accept(net::Stream& s, const config::ListenSocket& listen) {
  return new HttpConnection(*this, s, listen);
}

size_t HttpServer::reclaim_idle(size_t max) {
  size_t n = 0;
  for (Node* c = live.next; c != nullptr && n < max;) {
    Node* next = c->next;
    if (static_cast<HttpConnection*>(c)->close_if_idle()) ++n;
    c = next;
  }
  return n;
}

void HttpServer::begin_shutdown() {
  shutting_down_ = true;
  for (Node* n = live.next; n != nullptr;) {
    Node* next = n->next;
    static_cast<HttpConnection*>(n)->shutdown_if_idle();
    n = next;
  }
}

}  // namespace kosoku::http
