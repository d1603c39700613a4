#include "core/http/connection.hh"

#include <arpa/inet.h>

#include <cstring>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/http/chunked.hh"
#include "core/http/conditional.hh"
#include "core/http/status.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"
#include "core/stats/export.hh"
#include "absl/strings/match.h"

namespace kosoku::http {

namespace {

constexpr size_t kMaxFields = 100;
// Pipelined requests are answered back to back until this much output is waiting, then the connection waits
// for the peer to read (bounded memory per connection whatever the peer sends).
constexpr size_t kPipelineHighWater = 256 * 1024;
constexpr size_t kDiscardChunk = 64 * 1024;

bool addr_matches(const config::AccessRule& r, const sockaddr* sa) {
  if (r.all) return true;
  const uint8_t* a = nullptr;
  int family = sa->sa_family;
  uint8_t mapped[4];
  if (family == AF_INET) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
  } else if (family == AF_INET6) {
    const auto* in6 = &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(in6) && r.family == AF_INET) {
      std::memcpy(mapped, &in6->s6_addr[12], 4);
      a = mapped;
      family = AF_INET;
    } else {
      a = in6->s6_addr;
    }
  } else {
    return false;
  }
  if (family != r.family) return false;
  int bits = r.prefix;
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != r.addr[i]) return false;
  }
  return true;
}

bool access_allowed(const config::LocationConf& loc, const sockaddr* peer) {
  for (const config::AccessRule& r : loc.access) {
    if (addr_matches(r, peer)) return r.allow;
  }
  return true;
}

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

class HttpConnection final : public net::StreamHandler,
                             public Exchange,
                             public reactor::Timer,
                             public reactor::Task,
                             public HttpServer::Node {
 public:
  HttpConnection(HttpServer& srv, net::Stream& s, const config::ListenSocket& ls)
      : srv_(srv), core_(srv.core()), stream_(&s), listen_(ls) {
    req_.fields = std::span<HeaderField>(fields_, kMaxFields);
    server_port_ = s.local_port();
    id_ = ++srv.connection_counter;
    const config::ServerConf& def = *ls.default_server;
    set_limits(def);
    ++core_.stats->conn_idle;
    state_stat_ = &core_.stats->conn_idle;
    arm(def.client_header_timeout_ms);
    // link into the server's live list
    prev = &srv_.live;
    next = srv_.live.next;
    if (next != nullptr) next->prev = this;
    srv_.live.next = this;
  }

  ~HttpConnection() {
    set_stat(nullptr);
    if (prev != nullptr) prev->next = next;
    if (next != nullptr) next->prev = prev;
  }

  // ---- StreamHandler
  void on_readable(net::Stream&) override { process(); }
  void on_peer_closed(net::Stream&) override {
    peer_closed_ = true;
    if (state_ == State::kBusy && body_sink_ != nullptr) {
      deliver_body();
      return;
    }
    if (state_ == State::kBusy && state_slot_ != nullptr && state_slot_->abort_on_peer_close()) {
      stream_->close(net::Stream::Close::kAbort);  // on_closed: the content state gets on_abort()
      return;
    }
    if (state_ == State::kIdle || state_ == State::kReadingHead) {
      // A partial head at FIN: nothing to answer (nginx closes silently too).
      close(net::Stream::Close::kAbort);
    }
  }
  void on_writable(net::Stream&) override {
    if (stream_ == nullptr) return;
    if (state_ == State::kBusy) {
      arm_send_timeout();
      if (ContentState* st = state_slot_.get()) st->on_writable();
      return;
    }
    if (waiting_output_) {
      waiting_output_ = false;
      process();
    }
  }
  void on_closed(net::Stream&, int error) override {
    // A request still in progress may log $remote_addr after this: keep the address while the stream is there.
    if (state_ == State::kBusy) remote_addr();
    stream_ = nullptr;
    reactor::Timer* t = this;
    core_.reactor->timers().cancel(*t);
    if (state_ == State::kBusy && state_slot_ != nullptr) {
      abort_pending_ = true;
      state_slot_->on_abort();  // calls release() now or later
      return;
    }
    core_.reactor->post(this);
  }

  // ---- Timer: header / body / keep-alive / send timeouts
  void fire() override {
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

  // ---- Task: deferred deletion
  void run() override { delete this; }

  // ---- Exchange
  const Request& request() const override { return req_; }
  std::string_view uri() const override { return uri_; }
  std::string_view args() const override { return req_.query; }
  const config::ServerConf& server() const override { return *server_; }
  const config::LocationConf& location() const override { return *loc_; }
  const CoreContext& core() const override { return core_; }
  /// Looked up on first use ($remote_addr, X-Forwarded-For, logs): no getpeername for requests that never ask.
  std::string_view remote_addr() const override {
    if (!remote_addr_known_ && stream_ != nullptr) {
      remote_addr_.assign(stream_->peer_text());
      remote_addr_known_ = !remote_addr_.empty();
    }
    return remote_addr_;
  }
  uint16_t server_port() const override { return server_port_; }
  uint64_t connection_id() const override { return id_; }
  uint64_t connection_requests() const override { return requests_; }
  std::string_view host() const override { return host_lower_; }
  uint64_t request_length() const override { return head_bytes_; }
  ResponseHead& head() override { return head_; }
  const ResponseHead& head() const override { return head_; }
  std::unique_ptr<ContentState>& state() override { return state_slot_; }

  void send_head() override;
  void respond(int status, std::string_view body, std::string_view content_type) override;
  void redirect(int status, std::string_view location) override;
  void write(std::string_view data) override {
    if (stream_ == nullptr || head_only_ || data.empty()) return;
    body_bytes_ += data.size();
    if (chunked_out_) write_chunk_size(data.size());
    stream_->write(data);
    if (chunked_out_) stream_->write("\r\n");
  }
  void write_ref(const char* data, size_t len) override {
    if (stream_ == nullptr || head_only_ || len == 0) return;
    body_bytes_ += len;
    if (chunked_out_) write_chunk_size(len);
    stream_->write_ref(data, len);
    if (chunked_out_) stream_->write("\r\n");
    stream_->flush();
    arm_send_timeout();
  }
  void read_body(BodySink* sink) override;
  void pause_body(bool paused) override {
    body_paused_ = paused;
    if (!paused && body_sink_ != nullptr && !in_process_) {
      core_.reactor->post(&body_task_);
    }
  }
  size_t pending_output() const override { return stream_ != nullptr ? stream_->pending_output() : 0; }
  void set_low_water(size_t bytes) override {
    if (stream_ != nullptr) stream_->set_low_water(bytes);
  }
  void finish() override;
  void abort_response() override {
    keep_alive_ = false;
    core_.stats->count_response(status_);
    log_request();
    close(net::Stream::Close::kAbort);
  }
  /// Graceful shutdown: an idle keep-alive connection closes now (nothing unread: a plain FIN); others
  /// close after their response.
  void shutdown_if_idle() {
    keep_alive_ = false;
    if (state_ != State::kIdle || stream_ == nullptr) return;
    bool quiet = stream_->pending_output() == 0 && stream_->input().empty();
    close(quiet ? net::Stream::Close::kAbort : net::Stream::Close::kGraceful);
  }
  /// Closes the connection if it is an idle keep-alive one; returns whether it did.
  bool close_if_idle() {
    if (state_ != State::kIdle || stream_ == nullptr || !stream_->input().empty() ||
        stream_->pending_output() != 0) {
      return false;
    }
    close(net::Stream::Close::kAbort);
    return true;
  }
  void release() override {
    if (abort_pending_) core_.reactor->post(this);
  }

 private:
  enum class State { kIdle, kReadingHead, kBusy, kDiscardBody, kClosing };

  void set_limits(const config::ServerConf& s) {
    limits_.max_request_line = s.large_client_header_buffers_size;
    limits_.max_field_line = s.large_client_header_buffers_size;
    limits_.max_header_section = s.large_client_header_buffers_size * s.large_client_header_buffers_num;
  }
  void set_stat(uint64_t* which) {
    if (state_stat_ != nullptr) --*state_stat_;
    state_stat_ = which;
    if (which != nullptr) ++*which;
  }
  void arm(uint64_t ms) {
    reactor::Timer* t = this;
    if (ms == 0) {
      core_.reactor->timers().cancel(*t);
      return;
    }
    core_.reactor->timers().arm(*t, core_.reactor->now_ms() + ms);
  }
  void arm_send_timeout() {
    if (stream_ != nullptr && stream_->pending_output() > 0) arm(loc_ != nullptr ? loc_->send_timeout_ms : 60000);
  }
  void close(net::Stream::Close how) {
    state_ = State::kClosing;
    set_stat(nullptr);
    reactor::Timer* t = this;
    core_.reactor->timers().cancel(*t);
    if (stream_ != nullptr) {
      net::Stream* s = stream_;
      s->close(how);  // may call on_closed synchronously (deletion is deferred to a task)
    }
  }

  void process();
  bool discard_body();
  /// Discards the request body bytes already received; returns 0, or the status for a malformed body.
  int discard_available_body();
  /// Feeds buffered input to body_sink_; false when it needs more input (or is paused/done).
  void deliver_body();
  void body_failed(int status);
  void write_chunk_size(size_t n) {
    char buf[24];
    int len = snprintf(buf, sizeof(buf), "%zx\r\n", n);
    stream_->write(std::string_view(buf, static_cast<size_t>(len)));
  }
  struct ProcessTask final : reactor::Task {
    HttpConnection* c;
    explicit ProcessTask(HttpConnection* h) : c(h) {}
    void run() override { c->process(); }
  };
  struct BodyTask final : reactor::Task {
    HttpConnection* c;
    explicit BodyTask(HttpConnection* h) : c(h) {}
    void run() override {
      if (c->stream_ != nullptr && c->body_sink_ != nullptr) c->deliver_body();
      if (c->stream_ != nullptr) c->stream_->flush();
    }
  };
  void start_request(std::span<const char> in, size_t head_len);
  void run_phases();
  void send_simple_error(int status);
  void serve_status();
  void do_return(const config::ReturnConf& ret);
  std::string_view content_type_for_uri() const;
  void log_request();

  HttpServer& srv_;
  const CoreContext& core_;
  net::Stream* stream_;
  const config::ListenSocket& listen_;
  State state_ = State::kIdle;
  uint64_t* state_stat_ = nullptr;
  ParserLimits limits_;
  size_t last_len_ = 0;

  // Current request.
  HeaderField fields_[kMaxFields];
  Request req_;
  std::string head_buf_;
  std::string uri_;
  std::string host_lower_;
  mutable std::string remote_addr_;
  mutable bool remote_addr_known_ = false;
  uint16_t server_port_ = 0;
  uint64_t id_ = 0;
  const config::ServerConf* server_ = nullptr;
  const config::LocationConf* loc_ = nullptr;
  ResponseHead head_;
  std::string out_head_;
  std::string return_body_;
  std::unique_ptr<ContentState> state_slot_;
  uint64_t start_ms_ = 0;
  uint64_t requests_ = 0;
  uint64_t head_bytes_ = 0;
  uint64_t body_bytes_ = 0;
  uint64_t body_left_ = 0;       // Content-Length body bytes still to discard
  std::optional<ChunkedDecoder> chunked_;
  BodySink* body_sink_ = nullptr;
  bool body_paused_ = false;
  bool body_done_ = true;        // no body, or all of it consumed (read or discarded)
  bool chunked_out_ = false;     // this response uses chunked transfer coding
  BodyTask body_task_{this};
  ProcessTask process_task_{this};
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool head_sent_ = false;
  bool peer_closed_ = false;
  bool waiting_output_ = false;
  bool abort_pending_ = false;
  bool in_process_ = false;
  int status_ = 0;
};

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
      if (peer_closed_ && state_ == State::kIdle) close(net::Stream::Close::kGraceful);
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
  for (size_t i = 0; i < req_.field_count; ++i) {
    rb(fields_[i].name);
    rb(fields_[i].value);
  }
  stream_->consume(head_len);
  head_bytes_ = head_len;

  ++core_.stats->requests;
  ++requests_;
  state_ = State::kBusy;
  set_stat(&core_.stats->conn_writing);
  start_ms_ = core_.reactor->now_ms();
  head_ = ResponseHead{};
  head_only_ = req_.method == Method::kHead;
  head_sent_ = false;
  body_bytes_ = 0;
  status_ = 0;
  body_left_ = 0;
  chunked_.reset();
  body_sink_ = nullptr;
  body_paused_ = false;
  chunked_out_ = false;
  body_done_ = req_.body == BodyFraming::kNone;
  if (req_.body == BodyFraming::kContentLength) body_left_ = *req_.content_length;
  if (req_.body == BodyFraming::kChunked) chunked_.emplace(ChunkedLimits{});

  // Virtual server by Host (lower-cased), then the location by the normalised path.
  host_lower_.assign(req_.host_name.data(), req_.host_name.size());
  absl::AsciiStrToLower(&host_lower_);
  server_ = listen_.find_server(host_lower_);
  loc_ = &server_->base;
  set_limits(*server_);
  keep_alive_ = req_.keep_alive() && !srv_.shutting_down() && !peer_closed_;
  run_phases();
}

void HttpConnection::run_phases() {
  NormalizeResult nr = normalize_path(req_.path, uri_);
  int norm = nr.http_status;
  if (req_.target_form != TargetForm::kOrigin && req_.target_form != TargetForm::kAbsolute) {
    norm = req_.method == Method::kConnect ? 405 : (req_.method == Method::kOptions ? 0 : 400);
    uri_.assign("*");
  }
  if (norm != 0) {
    keep_alive_ = false;
    respond(norm, {}, {});
    return;
  }
  if (server_->base.ret.code != 0) {
    // nginx's SERVER_REWRITE phase: a server-level `return` answers before any location is chosen.
    do_return(server_->base.ret);
    return;
  }
  loc_ = server_->find_location(uri_);
  // A logged request keeps its client address even if the client resets before the response is done.
  if (!loc_->access_log.empty()) remote_addr();
  if (chunked_.has_value()) chunked_.emplace(ChunkedLimits{.max_body_size = loc_->client_max_body_size});
  if (loc_->keepalive_timeout_ms == 0 || requests_ >= loc_->keepalive_requests) keep_alive_ = false;

  // Request body framing limits (RFC 9110 §15.5.14; nginx client_max_body_size).
  uint64_t max_body = loc_->client_max_body_size;
  if (req_.body == BodyFraming::kContentLength && max_body != 0 && *req_.content_length > max_body) {
    keep_alive_ = false;
    respond(413, {}, {});
    return;
  }
  if (req_.expect_other) {
    keep_alive_ = false;
    respond(417, {}, {});
    return;
  }

  // ACCESS phase: allow/deny.
  if (!loc_->access.empty() && !access_allowed(*loc_, stream_->peer())) {
    KOSOKU_LOG(kError, "access forbidden by rule, client: %s, request: \"%s %s\"", stream_->peer_text(),
               req_.method_text, req_.target);
    respond(403, {}, {});
    return;
  }
  // A request body is never read by the handlers below: refuse 100-continue and close after the answer if the
  // client is waiting for permission, otherwise discard the body after the response.
  if (req_.body != BodyFraming::kNone && req_.expect_100_continue) keep_alive_ = false;

  ContentHandler& handler = srv_.content_handler(*loc_);
  if (&handler == &srv_.static_handler() || loc_->ret.code != 0) {
    // These answers never read the body: drop what has already arrived first (as nginx's
    // ngx_http_discard_request_body), so a malformed body is answered 400 instead of a response that
    // promises keep-alive and then closes.
    if (int status = discard_available_body(); status != 0) {
      keep_alive_ = false;
      respond(status, {}, {});
      return;
    }
  }
  if (loc_->ret.code != 0) {
    do_return(loc_->ret);
    return;
  }
  if (&handler != &srv_.static_handler()) {
    handler.handle(*this);  // e.g. proxy_pass: every method goes to the handler
    return;
  }
  if (req_.method == Method::kOther) {
    // RFC 9110 §9.1: a method the server does not recognise is 501 (a known one it refuses is 405).
    respond(501, {}, {});
    return;
  }
  if (req_.method != Method::kGet && req_.method != Method::kHead) {
    head_.extra.assign("Allow: GET, HEAD\r\n");
    respond(405, {}, {});
    return;
  }
  if (loc_->status) {
    serve_status();
    return;
  }
  handler.handle(*this);
}

// `status;` (like nginx's stub_status): every core's counters, aggregated on demand. Format by
// ?format=json|prometheus|text (default text, nginx stub_status-compatible first lines).
void HttpConnection::serve_status() {
  stats::Snapshot snap = stats::aggregate(*core_.all_stats, core_.reactor->wall_time());
  stats::add_extra(snap);
  std::string_view args = req_.query;
  std::string body;
  std::string_view type = "text/plain";
  if (absl::StrContains(args, "format=json")) {
    body = stats::render_json(snap);
    type = "application/json";
  } else if (absl::StrContains(args, "format=prom")) {
    body = stats::render_prometheus(snap);
    type = "text/plain; version=0.0.4";
  } else {
    body = stats::render_text(snap);
  }
  head_.extra.assign("Cache-Control: no-cache\r\n");
  respond(200, body, type);
}

// `return CODE [TEXT|URL]` (ngx_http_rewrite_module): redirects for 301/302/303/307/308, else a response with
// TEXT as the body (default_type). Variables in TEXT/URL are expanded.
void HttpConnection::do_return(const config::ReturnConf& ret) {
  std::string text = ret.text;
  if (ret.text_tpl != nullptr && ret.text_tpl->has_variables()) {
    text.clear();
    RequestVariables vars(*this, RequestVariables::Response{}, core_.reactor);
    config::expand(*ret.text_tpl, vars, text);
  }
  int code = ret.code;
  if (code == 301 || code == 302 || code == 303 || code == 307 || code == 308) {
    redirect(code, text);
  } else {
    return_body_ = std::move(text);
    respond(code, return_body_, return_body_.empty() ? std::string_view() : content_type_for_uri());
  }
}

// nginx's ngx_http_set_content_type: the MIME type of $uri's extension in the location's `types`, else
// default_type.
std::string_view HttpConnection::content_type_for_uri() const {
  std::string_view name = uri_;
  size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size() && loc_->types != nullptr) {
    std::string ext(name.substr(dot + 1));
    absl::AsciiStrToLower(&ext);
    auto it = loc_->types->find(ext);
    if (it != loc_->types->end()) return it->second;
  }
  return loc_->default_type;
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
  std::string& h = out_head_;
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
  if (!head_.location.empty()) absl::StrAppend(&h, "Location: ", head_.location, "\r\n");
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
  core_.stats->count_response(status_);
  log_request();
  if (stream_ == nullptr) return;
  if (!keep_alive_) {
    // close() sends what is pending (no flush first: the stream can then send the last bytes with the FIN).
    // An unread request body means more bytes are on their way: linger so they cannot reset the answer.
    close(body_done_ ? net::Stream::Close::kGraceful : net::Stream::Close::kLinger);
    return;
  }
  if (!body_done_ && (body_left_ > 0 || chunked_.has_value())) {
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
  if (!chunked_.has_value()) {
    size_t n = in.size() < body_left_ ? in.size() : static_cast<size_t>(body_left_);
    stream_->consume(n);
    body_left_ -= n;
    if (body_left_ > 0) {
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
    if (!chunked_.has_value()) {
      size_t n = in.size() < body_left_ ? in.size() : static_cast<size_t>(body_left_);
      stream_->consume(n);
      body_left_ -= n;
      if (body_left_ == 0) body_done_ = true;
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
    if (!chunked_.has_value()) {
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
  srv_.access_log->log(*loc_, *this, status_, body_bytes_ + out_head_.size(), body_bytes_, request_time);
}

HttpServer::HttpServer(const CoreContext& core, ContentHandler& static_handler)
    : core_(core), static_handler_(static_handler) {}

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
