// HttpConnection: one HTTP/1.1 connection (the contract is in connection.hh), and Http1Request, the wire half of a
// request on it (http_request.hh has the rest of the request). Internal to core/http: the classes are declared
// here so that their parts can live in separate files —
//   connection.cc                         the connection's life: reading and parsing heads, pipelining, request
//                                         bodies (read or discarded), the response on the wire, keep-alive and
//                                         closing;
//   http_request.cc, request_phases.cc    the request apart from the wire (HttpRequest).
// The small per-event and per-write members stay inline.
#pragma once

#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/http/chunked.hh"
#include "core/http/connection.hh"
#include "core/http/http_request.hh"
#include "core/http/parser.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::http {

class HttpConnection;

/// One request on an HTTP/1.1 connection: Exchange's wire half, on the connection's stream. Every call on a
/// request that is no longer the connection's current one (finished, or the stream gone) does nothing.
class Http1Request final : public HttpRequest {
 public:
  Http1Request(HttpConnection& c, HttpServer& srv, const config::ServerConf& default_server)
      : HttpRequest(srv, default_server), conn_(c) {}
  /// The content state goes first, while the request is still whole (its destructor may ask the wire).
  ~Http1Request() override {
    content_.reset();
    replaced_content_.clear();
  }

  // ---- Exchange: the wire
  std::string_view remote_addr() const override;
  const sockaddr* peer_addr() const override;
  const net::Stream* stream() const override;
  void disable_keep_alive() override { set_keep_alive(false); }
  uint16_t server_port() const override;
  uint64_t connection_id() const override;
  uint64_t connection_requests() const override;
  void send_head() override;
  void write(std::string_view data) override;
  void write_ref(const char* data, size_t len) override;
  void write_shared(net::SharedBuffer& buf, const char* data, size_t len) override;
  size_t pending_output() const override;
  void set_low_water(size_t bytes) override;
  void finish() override;
  void abort_response() override;
  void release() override;
  void read_body(BodySink* sink) override;
  void pause_body(bool paused) override;

 private:
  friend class HttpConnection;
  void location_chosen() override;
  int discard_available_body() override;

  HttpConnection& conn_;
  uint64_t out_head_len_ = 0;  // bytes of the response head on the wire
  // A finished request waits in the connection's retired list until the stream has sent its bytes.
  std::unique_ptr<Http1Request> next_retired_;
  uint64_t retire_at_ = 0;     // HttpConnection::committed_ once the stream has sent this much
};

/// One client connection (created by HttpServer::on_accept, deleted from a reactor task after on_closed): the
/// stream's handler, the HTTP/1.1 framing of its requests (one at a time: pipelined requests are answered in
/// order), its own timer, and a node of the server's live list.
class HttpConnection final : public net::StreamHandler,
                             public reactor::Timer,
                             public reactor::Task,
                             public HttpServer::Node {
 public:
  HttpConnection(HttpServer& srv, net::Stream& s, const config::ListenSocket& ls)
      : srv_(srv), core_(srv.core()), stream_(&s), listen_(ls) {
    server_port_ = s.local_port();
    id_ = ++srv.connection_counter;
    const config::ServerConf& def = *ls.default_server;
    set_limits(def);
    ++core_.stats->conn_idle;
    state_stat_ = &core_.stats->conn_idle;
    arm(def.client_header_timeout_ms);
    link(srv_.live);
  }

  ~HttpConnection() {
    while (retired_ != nullptr) {  // one by one: a long list is not freed by recursion
      std::unique_ptr<Http1Request> next = std::move(retired_->next_retired_);
      retired_ = std::move(next);
    }
    set_stat(nullptr);
    unlink();
  }

  // ---- StreamHandler
  void on_readable(net::Stream&) override { process(); }
  void on_peer_closed(net::Stream&) override {
    peer_closed_ = true;
    if (state_ == State::kBusy && body_sink_ != nullptr) {
      deliver_body();
      return;
    }
    if (state_ == State::kBusy && req_->state() != nullptr && req_->state()->abort_on_peer_close()) {
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
    reap_retired();
    if (state_ == State::kBusy) {
      arm_send_timeout();
      if (ContentState* st = req_->state().get()) st->on_writable();
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
    if (state_ == State::kBusy && req_->state() != nullptr) {
      abort_pending_ = true;
      req_->state()->on_abort();  // calls release() now or later
      return;
    }
    core_.reactor->post(this);
  }

  // ---- Timer: header / body / keep-alive / send timeouts
  void fire() override;

  // ---- Task: deferred deletion
  void run() override { delete this; }

  /// Graceful shutdown: an idle keep-alive connection closes now (nothing unread: a plain FIN); others
  /// close after their response.
  void shutdown_if_idle() override {
    if (req_ != nullptr) req_->set_keep_alive(false);  // HttpServer::shutting_down() keeps the next ones closed
    if (state_ != State::kIdle || stream_ == nullptr) return;
    bool quiet = stream_->pending_output() == 0 && stream_->input().empty();
    close(quiet ? net::Stream::Close::kAbort : net::Stream::Close::kGraceful);
  }
  /// Closes the connection if it is an idle keep-alive one; returns whether it did.
  bool close_if_idle() override {
    if (state_ != State::kIdle || stream_ == nullptr || !stream_->input().empty() ||
        stream_->pending_output() != 0) {
      return false;
    }
    close(net::Stream::Close::kAbort);
    return true;
  }

 private:
  friend class Http1Request;
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
  /// Whether `r` is the request the connection is answering (and the stream is still there).
  bool answering(const Http1Request& r) const {
    return req_.get() == &r && stream_ != nullptr && state_ == State::kBusy;
  }
  /// Whether the request asked for a persistent connection (RFC 9112 §9.3) and the connection can give one.
  bool may_keep_alive(const Request& q) const { return q.keep_alive() && !srv_.shutting_down() && !peer_closed_; }
  /// $remote_addr, looked up on first use (X-Forwarded-For, logs): no getpeername for requests that never ask.
  std::string_view remote_addr() const {
    if (!remote_addr_known_ && stream_ != nullptr) {
      remote_addr_.assign(stream_->peer_text());
      remote_addr_known_ = !remote_addr_.empty();
    }
    return remote_addr_;
  }

  // The wire: every byte goes to the stream through these, counted in committed_.
  void emit(std::string_view data) {
    committed_ += data.size();
    stream_->write(data);
  }
  void emit_chunk_size(size_t n) {
    char buf[24];
    int len = snprintf(buf, sizeof(buf), "%zx\r\n", n);
    emit(std::string_view(buf, static_cast<size_t>(len)));
  }
  /// Body bytes of `r` (chunked when the response is), copied, by reference or as a shared buffer's.
  template <typename Put>
  void emit_body(Http1Request& r, size_t len, Put put) {
    if (!answering(r) || r.head_only_ || len == 0) return;
    r.body_bytes_ += len;
    if (chunked_out_) emit_chunk_size(len);
    committed_ += len;
    put();
    if (chunked_out_) emit("\r\n");
  }
  void send_head(Http1Request& r);
  void finish(Http1Request& r);
  void abort_response(Http1Request& r);
  void read_body(Http1Request& r, BodySink* sink);
  void pause_body(bool paused) {
    body_paused_ = paused;
    if (!paused && body_sink_ != nullptr && !in_process_) core_.reactor->post(&body_task_);
  }

  void process();
  /// A module took the stream over (ModuleCore::take_stream): this connection lets go of it and goes.
  void hand_over();
  /// The next request's head has begun: its request object takes a field table (the pool's).
  void start_head();
  void start_request(std::span<const char> in, size_t head_len);
  /// A head that cannot be parsed, or that did not arrive within client_header_timeout: answer and close
  /// (never process what follows it on this connection).
  void reject_head(int status);
  /// Ends `r` on the wire and keeps it in the retired list until the stream has sent what it referenced.
  void retire(std::unique_ptr<Http1Request> r);
  /// Frees the retired requests whose bytes the stream has sent (all of them once it is gone). Called only
  /// where no code of a retired request is on the stack: the top of process() and on_writable.
  void reap_retired();
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
  mutable std::string remote_addr_;
  uint64_t id_ = 0;
  uint64_t requests_ = 0;
  uint64_t committed_ = 0;  // bytes written to the stream; committed_ - pending_output(): sent

  // The request being read or answered (null when idle), and those finished whose bytes are still in flight.
  std::unique_ptr<Http1Request> req_;
  std::unique_ptr<Http1Request> retired_;
  Http1Request* retired_tail_ = nullptr;
  const config::LocationConf* loc_ = nullptr;  // the last request's location: its timeouts and limits apply

  // The request body on the wire (it may outlive its request: discarded after the response).
  uint64_t body_left_ = 0;       // Content-Length body bytes still to read or discard
  std::unique_ptr<ChunkedDecoder> chunked_;  // a chunked request body (rare: allocated for it)
  BodySink* body_sink_ = nullptr;
  BodyTask body_task_{this};
  ProcessTask process_task_{this};
  bool body_paused_ = false;
  bool body_done_ = true;        // no body, or all of it consumed (read or discarded)
  bool chunked_out_ = false;     // the response uses chunked transfer coding
  bool peer_closed_ = false;
  bool waiting_output_ = false;
  bool abort_pending_ = false;
  bool in_process_ = false;
};

// ---- Http1Request: the wire calls, on the connection (inline: once per write)

inline std::string_view Http1Request::remote_addr() const { return conn_.remote_addr(); }
inline const sockaddr* Http1Request::peer_addr() const {
  return conn_.stream_ != nullptr ? conn_.stream_->peer() : nullptr;
}
inline const net::Stream* Http1Request::stream() const { return conn_.stream_; }
inline uint16_t Http1Request::server_port() const { return conn_.server_port_; }
inline uint64_t Http1Request::connection_id() const { return conn_.id_; }
inline uint64_t Http1Request::connection_requests() const { return conn_.requests_; }
inline void Http1Request::send_head() { conn_.send_head(*this); }
inline void Http1Request::write(std::string_view data) {
  conn_.emit_body(*this, data.size(), [&] { conn_.stream_->write(data); });
}
inline void Http1Request::write_ref(const char* data, size_t len) {
  wrote_by_ref_ = true;
  conn_.emit_body(*this, len, [&] { conn_.stream_->write_ref(data, len); });
  if (conn_.answering(*this)) {
    conn_.stream_->flush();
    conn_.arm_send_timeout();
  }
}
inline void Http1Request::write_shared(net::SharedBuffer& buf, const char* data, size_t len) {
  conn_.emit_body(*this, len, [&] { conn_.stream_->write_shared(buf, data, len); });
  if (conn_.answering(*this)) {
    conn_.stream_->flush();
    conn_.arm_send_timeout();
  }
}
inline size_t Http1Request::pending_output() const {
  return conn_.stream_ != nullptr ? conn_.stream_->pending_output() : 0;
}
inline void Http1Request::set_low_water(size_t bytes) {
  if (conn_.answering(*this)) conn_.stream_->set_low_water(bytes);
}
inline void Http1Request::finish() { conn_.finish(*this); }
inline void Http1Request::abort_response() { conn_.abort_response(*this); }
inline void Http1Request::release() {
  if (conn_.abort_pending_ && conn_.req_.get() == this) conn_.core_.reactor->post(&conn_);
}
inline void Http1Request::read_body(BodySink* sink) { conn_.read_body(*this, sink); }
inline void Http1Request::pause_body(bool paused) {
  if (conn_.req_.get() == this) conn_.pause_body(paused);
}

}  // namespace kosoku::http
