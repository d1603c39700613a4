// HttpConnection: the connection's life (contract: connection.hh; the classes: connection_impl.hh). Reading and
// parsing request heads, pipelining, request bodies (read for a handler or discarded), the response head and
// body on the wire, keep-alive and closing, the requests' lifetimes; and HttpServer. The request apart from the
// wire is HttpRequest's (http_request.cc, request_phases.cc).
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
#include "core/net/filter_stream.hh"

namespace kosoku::http {

namespace {

// Pipelined requests are answered back to back until this much output is waiting, then the connection waits
// for the peer to read (bounded memory per connection whatever the peer sends).
constexpr size_t kPipelineHighWater = 256 * 1024;
constexpr size_t kDiscardChunk = 64 * 1024;

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
    reject_head(408);
    return;
  }
  if (state_ == State::kDiscardBody) {
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while reading client request body, "
               "client: %s", remote_addr());
  } else if (state_ == State::kBusy) {
    KOSOKU_LOG(kInfo, "client timed out (110: Connection timed out) while sending response to client, "
               "client: %s", remote_addr());
    if (req_->state() != nullptr) {
      // As a client reset: the content state gets on_abort() and releases once no I/O of its own is in flight
      // (a file read may be), then the connection goes.
      stream_->close(net::Stream::Close::kAbort);
      return;
    }
  }
  close(net::Stream::Close::kAbort);
}

void HttpConnection::process() {
  if (in_process_) return;
  in_process_ = true;
  while (stream_ != nullptr) {
    if (retired_ != nullptr) reap_retired();
    if (state_ == State::kBusy && body_sink_ != nullptr && !body_paused_) {
      deliver_body();
      if (state_ == State::kBusy) break;
      continue;  // the handler answered from the body's end: a pipelined request may follow
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
      if (peer_closed_ && state_ == State::kIdle) close(net::Stream::Close::kGraceful);
      break;
    }
    if (stream_->pending_output() > kPipelineHighWater) {
      waiting_output_ = true;
      stream_->set_low_water(kPipelineHighWater / 2);
      break;
    }
    if (state_ == State::kIdle && requests_ == 0 && srv_.takes_streams()) {
      const ModuleCore::Take t = srv_.take_stream(*stream_, listen_);
      if (t == ModuleCore::Take::kMore) break;
      if (t == ModuleCore::Take::kTaken) {
        hand_over();
        in_process_ = false;
        return;
      }
    }
    if (state_ == State::kIdle) start_head();
    ParseResult r = parse_request(std::string_view(in.data(), in.size()), req_->parsed(), limits_, last_len_);
    if (r.status == ParseStatus::kPartial) {
      last_len_ = in.size();
      break;
    }
    last_len_ = 0;
    if (r.status == ParseStatus::kError) {
      KOSOKU_LOG(kInfo, "client sent invalid request (%s, %d), client: %s", r.reason, r.http_status,
                 stream_->peer_text());
      reject_head(r.http_status);
      break;
    }
    start_request(in, r.consumed);
  }
  if (stream_ != nullptr && state_ != State::kClosing) stream_->flush();
  in_process_ = false;
}

void HttpConnection::hand_over() {
  state_ = State::kClosing;
  set_stat(nullptr);
  reactor::Timer* t = this;
  core_.reactor->timers().cancel(*t);
  stream_ = nullptr;
  unlink();
  core_.reactor->post(this);  // deleted from the loop, after the callback that is on the stack
}

void HttpConnection::start_head() {
  state_ = State::kReadingHead;
  set_stat(&core_.stats->conn_reading);
  arm(listen_.default_server->client_header_timeout_ms);
  req_ = std::make_unique<Http1Request>(*this, srv_, *listen_.default_server);
}

void HttpConnection::start_request(std::span<const char> in, size_t head_len) {
  Http1Request& r = *req_;
  r.begin(listen_, in, head_len, core_.reactor->now_ms());
  stream_->consume(head_len);

  ++core_.stats->requests;
  ++requests_;
  state_ = State::kBusy;
  set_stat(&core_.stats->conn_writing);
  // The head is in: client_header_timeout is over (nginx deletes the read timer here). While the request is
  // served the timer runs only for client_body_timeout and send_timeout, armed where they apply.
  arm(0);
  const Request& q = r.request();
  chunked_out_ = false;
  body_left_ = 0;
  chunked_.reset();
  body_sink_ = nullptr;
  body_paused_ = false;
  body_done_ = q.body == BodyFraming::kNone || (q.body == BodyFraming::kContentLength && *q.content_length == 0);
  if (q.body == BodyFraming::kContentLength) body_left_ = *q.content_length;
  if (q.body == BodyFraming::kChunked) chunked_ = std::make_unique<ChunkedDecoder>(ChunkedLimits{});
  loc_ = &r.location();
  set_limits(r.server());
  r.set_keep_alive(may_keep_alive(q));
  r.run_phases();  // may finish the request: r is not touched after this
}

void HttpConnection::reject_head(int status) {
  ++core_.stats->requests;
  state_ = State::kBusy;
  loc_ = &req_->location();
  req_->reject(status, core_.reactor->now_ms());
}

void Http1Request::location_chosen() {
  HttpConnection& c = conn_;
  c.loc_ = loc_;
  if (c.chunked_ != nullptr) *c.chunked_ = ChunkedDecoder(ChunkedLimits{.max_body_size = loc_->client_max_body_size});
  if (loc_->keepalive_timeout_ms == 0 || c.requests_ >= loc_->keepalive_requests) keep_alive_ = false;
}

int Http1Request::discard_available_body() { return conn_.answering(*this) ? conn_.discard_available_body() : 0; }

void HttpConnection::send_head(Http1Request& r) {
  if (!answering(r) || r.head_sent_) return;
  r.head_sent_ = true;
  const ResponseHead& head = r.head_;
  const Request& q = r.req_;
  const int status = r.status_ = r.final_status();
  const bool framed = q.version_minor >= 1 && !q.method_text.empty();  // an HTTP/1.1 request (not a rejected head)
  if (head.content_length < 0 && status_has_body(status)) {
    // Unknown length: chunked for HTTP/1.1 (keeps the connection), close-delimited for HTTP/1.0.
    if (framed) {
      chunked_out_ = !r.head_only_;
    } else {
      r.keep_alive_ = false;
    }
  }
  std::string& h = srv_.head_scratch;
  h.clear();
  absl::StrAppend(&h, "HTTP/1.1 ", status, " ", reason_phrase(status), "\r\nServer: ",
                  r.loc_->server_tokens ? kServerWithVersion : kServerName, "\r\nDate: ", core_.reactor->http_date(),
                  "\r\n");
  if (!head.content_type.empty()) absl::StrAppend(&h, "Content-Type: ", head.content_type, "\r\n");
  if (head.content_length >= 0 && status != 304 && status != 204 && status >= 200) {
    absl::StrAppend(&h, "Content-Length: ", head.content_length, "\r\n");
  }
  // An error page's body answered in place of the error (error_page) is not the resource: no validator of its
  // own time and no ranges (nginx's header and range filters do the same for a status other than 200).
  const bool error_page_body = status != head.status;
  if (head.last_modified >= 0 && !error_page_body) {
    char date[kHttpDateLen];
    absl::StrAppend(&h, "Last-Modified: ", format_http_date(head.last_modified, date), "\r\n");
  }
  if (!r.keep_alive_) {
    h.append("Connection: close\r\n");
  } else {
    h.append("Connection: keep-alive\r\n");
    if (r.loc_->keepalive_header_timeout_s > 0) {
      absl::StrAppend(&h, "Keep-Alive: timeout=", r.loc_->keepalive_header_timeout_s, "\r\n");
    }
  }
  if (head.content_length < 0 && status_has_body(status) && framed) h.append("Transfer-Encoding: chunked\r\n");
  if (!head.etag.empty()) absl::StrAppend(&h, "ETag: ", head.etag, "\r\n");
  if (!head.location.empty()) {
    h.append("Location: ");
    append_uri_field(head.location, h);  // whatever set it, a control byte never leaves raw (uri.hh)
    h.append("\r\n");
  }
  if (head.accept_ranges && !error_page_body) h.append("Accept-Ranges: bytes\r\n");
  h.append(head.extra);
  r.append_module_fields(status, h);
  h.append("\r\n");
  r.out_head_len_ = h.size();
  emit(h);
}

void HttpConnection::finish(Http1Request& r) {
  if (req_.get() != &r || state_ != State::kBusy) return;
  if (chunked_out_ && stream_ != nullptr) {
    emit("0\r\n\r\n");
    chunked_out_ = false;
  }
  body_sink_ = nullptr;
  if (ContentState* st = r.state().get()) st->on_response_complete();
  core_.stats->count_response(r.status_);
  r.log(r.body_bytes_ + r.out_head_len_, core_.reactor->now_ms());
  // A request that lent bytes by reference may wait a while for the stream: it keeps only its content state. One
  // that copied everything is freed at the next safe point anyway.
  if (r.wrote_by_ref()) r.release_head();
  const bool keep_alive = r.keep_alive_;
  retire(std::move(req_));
  if (stream_ == nullptr) return;
  if (!keep_alive) {
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
    // task step, never inside the completion that is still on the stack (its op may be reused); the finished
    // request is freed there too.
    stream_->flush();
    core_.reactor->post(&process_task_);
  }
}

void HttpConnection::abort_response(Http1Request& r) {
  if (req_.get() != &r || state_ != State::kBusy) return;
  r.keep_alive_ = false;
  core_.stats->count_response(r.status_);
  r.log(r.body_bytes_ + r.out_head_len_, core_.reactor->now_ms());
  close(net::Stream::Close::kAbort);  // on_closed: the content state gets on_abort(); the request stays current
}

void HttpConnection::retire(std::unique_ptr<Http1Request> r) {
  // A response whose every byte was copied into the stream is freed at the next safe point; one that
  // referenced its state's bytes waits until the stream has sent everything committed so far.
  r->retire_at_ = r->wrote_by_ref() ? committed_ : 0;
  Http1Request* raw = r.get();
  if (retired_tail_ == nullptr) {
    retired_ = std::move(r);
  } else {
    retired_tail_->next_retired_ = std::move(r);
  }
  retired_tail_ = raw;
}

void HttpConnection::reap_retired() {
  // Any request whose bytes are sent goes, wherever it is in the list: one still waiting keeps no other.
  const uint64_t sent = stream_ != nullptr ? committed_ - stream_->pending_output() : UINT64_MAX;
  Http1Request* last = nullptr;
  for (std::unique_ptr<Http1Request>* link = &retired_; *link != nullptr;) {
    Http1Request* r = link->get();
    if (r->retire_at_ <= sent) {
      std::unique_ptr<Http1Request> next = std::move(r->next_retired_);
      *link = std::move(next);  // frees the request and its content state
    } else {
      last = r;
      link = &r->next_retired_;
    }
  }
  retired_tail_ = last;
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

void HttpConnection::read_body(Http1Request& r, BodySink* sink) {
  if (!answering(r)) return;
  body_sink_ = sink;
  if (body_done_) {
    body_sink_ = nullptr;
    sink->on_body_end();
    return;
  }
  const Request& q = r.request();
  if (q.expect_100_continue && q.version_minor >= 1) {
    emit("HTTP/1.1 100 Continue\r\n\r\n");
    stream_->flush();
  }
  // An Expect: 100-continue request whose body we do read keeps the connection reusable.
  r.set_keep_alive(may_keep_alive(q) && requests_ < loc_->keepalive_requests);
  arm(loc_->client_body_timeout_ms);
  if (!in_process_) core_.reactor->post(&body_task_);
}

void HttpConnection::body_failed(int status) {
  BodySink* sink = body_sink_;
  body_sink_ = nullptr;
  body_done_ = true;  // nothing more is read: the connection closes after the response
  if (req_ != nullptr) req_->set_keep_alive(false);
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
    head_filters_.insert(head_filters_.end(), m->head_filters.begin(), m->head_filters.end());
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
    if (cores_[m->index]->takes_streams()) takers_.push_back(cores_[m->index].get());
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
  if (listen.conf.ssl) {
    for (const std::unique_ptr<ModuleCore>& m : cores_) {
      net::FilterStream* layer = m != nullptr ? m->filter_accepted(s, listen) : nullptr;
      if (layer == nullptr) continue;
      layer->set_handler(new HttpConnection(*this, *layer, listen));
      return layer;
    }
    return nullptr;  // no module layers TLS: refused (config validation keeps this from happening)
  }
  return new HttpConnection(*this, s, listen);
}

size_t HttpServer::reclaim_idle(size_t max) {
  size_t n = 0;
  for (Node* c = live.next; c != nullptr && n < max;) {
    Node* next = c->next;
    if (c->close_if_idle()) ++n;
    c = next;
  }
  return n;
}

void HttpServer::begin_shutdown() {
  shutting_down_ = true;
  for (Node* n = live.next; n != nullptr;) {
    Node* next = n->next;
    n->shutdown_if_idle();
    n = next;
  }
}

}  // namespace kosoku::http
