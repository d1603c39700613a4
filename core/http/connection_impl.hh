// HttpConnection: one HTTP/1.1 connection (the contract is in connection.hh). Internal to core/http: the class
// is declared here so that its parts can live in separate files —
//   connection.cc         the connection's life: reading and parsing heads, pipelining, request bodies (read or
//                         discarded), the response head and body on the wire, keep-alive and closing;
//   connection_phases.cc  the request phases (http/phase.hh: nginx's SERVER_REWRITE, FIND_CONFIG, the modules'
//                         REWRITE and ACCESS handlers, CONTENT) and the answer the connection gives itself:
//                         `return`.
// The small per-event and per-write members stay inline in the class body.
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/http/chunked.hh"
#include "core/http/connection.hh"
#include "core/http/exchange.hh"
#include "core/http/parser.hh"
#include "core/http/phase.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::http {

/// One client connection (created by HttpServer::on_accept, deleted from a reactor task after on_closed): the
/// stream's handler, the Exchange its content handlers see, its own timer, and a node of the server's live list.
class HttpConnection final : public net::StreamHandler,
                             public Exchange,
                             public reactor::Timer,
                             public reactor::Task,
                             public HttpServer::Node {
 public:
  static constexpr size_t kMaxFields = HttpServer::kMaxFields;

  HttpConnection(HttpServer& srv, net::Stream& s, const config::ListenSocket& ls)
      : srv_(srv), core_(srv.core()), stream_(&s), listen_(ls) {
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
  void fire() override;

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
  const sockaddr* peer_addr() const override { return stream_ != nullptr ? stream_->peer() : nullptr; }
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
  void write_shared(net::SharedBuffer& buf, const char* data, size_t len) override {
    if (stream_ == nullptr || head_only_ || len == 0) return;
    body_bytes_ += len;
    if (chunked_out_) write_chunk_size(len);
    stream_->write_shared(buf, data, len);
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

  /// nginx's header buffers: a line may be as long as one large buffer unless it ends within the first buffer
  /// (client_header_buffer_size), and the head fills at most the first buffer and all the large ones; and at
  /// most max_headers field lines.
  void set_limits(const config::ServerConf& s) {
    limits_.max_fields = s.max_headers;
    limits_.initial_buffer = s.client_header_buffer_size;
    limits_.max_request_line = s.large_client_header_buffers_size;
    limits_.max_field_line = s.large_client_header_buffers_size;
    limits_.max_header_section =
        s.client_header_buffer_size + s.large_client_header_buffers_size * s.large_client_header_buffers_num;
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
  /// An idle keep-alive connection keeps none of its last request's memory, as nginx frees the request on
  /// keep-alive (ngx_http_set_keepalive): the field-line table, the request's and the response head's strings
  /// (Request is reset: nothing points into freed bytes), and the content state if it lets go (on_idle).
  /// Called from process() only, when nothing of the request is on the stack.
  void release_request();
  bool discard_body();
  /// Discards the request body bytes already received; returns 0, or the status for a malformed body.
  int discard_available_body();
  /// Drops the Content-Length body bytes `in` holds (at most body_left_); true when none are left to come.
  bool drop_length_body(std::span<const char> in) {
    size_t n = in.size() < body_left_ ? in.size() : static_cast<size_t>(body_left_);
    stream_->consume(n);
    body_left_ -= n;
    return body_left_ == 0;
  }
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
  void send_simple_error(int status);
  void log_request();
  // connection_phases.cc
  void run_phases();
  /// Runs the modules' handlers of `phase` (HttpServer::phase_handlers); true when one answered.
  bool run_module_phases(Phase phase);
  void do_return(const config::ReturnConf& ret);
  std::string_view content_type_for_uri() const;

  HttpServer& srv_;
  const CoreContext& core_;
  net::Stream* stream_;
  const config::ListenSocket& listen_;
  State state_ = State::kIdle;
  uint16_t server_port_ = 0;  // (the small members are grouped: the object stays in a smaller size class)
  mutable bool remote_addr_known_ = false;
  uint64_t* state_stat_ = nullptr;
  ParserLimits limits_;
  size_t last_len_ = 0;

  // Current request.
  std::unique_ptr<HeaderField[]> fields_;  // from reading a head until idle (HttpServer::take_fields)
  Request req_;
  std::string head_buf_;
  std::string uri_;
  std::string host_lower_;
  mutable std::string remote_addr_;
  uint64_t id_ = 0;
  const config::ServerConf* server_ = nullptr;
  const config::LocationConf* loc_ = nullptr;
  ResponseHead head_;
  size_t out_head_len_ = 0;  // bytes of the response head (built in HttpServer::head_scratch)
  std::string return_body_;
  std::unique_ptr<ContentState> state_slot_;
  uint64_t start_ms_ = 0;
  uint64_t requests_ = 0;
  uint64_t head_bytes_ = 0;
  uint64_t body_bytes_ = 0;
  uint64_t body_left_ = 0;       // Content-Length body bytes still to discard
  std::unique_ptr<ChunkedDecoder> chunked_;  // a chunked request body (rare: allocated for it)
  BodySink* body_sink_ = nullptr;
  BodyTask body_task_{this};
  ProcessTask process_task_{this};
  bool body_paused_ = false;
  bool body_done_ = true;        // no body, or all of it consumed (read or discarded)
  bool chunked_out_ = false;     // this response uses chunked transfer coding
  bool keep_alive_ = true;
  bool head_only_ = false;
  bool head_sent_ = false;
  bool peer_closed_ = false;
  bool waiting_output_ = false;
  bool abort_pending_ = false;
  bool in_process_ = false;
  int status_ = 0;
};

}  // namespace kosoku::http
