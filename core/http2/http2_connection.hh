// HTTP/2 (RFC 9113) on a net::Stream: Http2Connection drives a libnghttp2 server session over the stream's
// bytes (nghttp2_session_mem_recv in, nghttp2_session_send's callbacks out: the library never sees a socket),
// so it runs the same on kernel sockets, on kosoku's TCP over DPDK and under the TLS layer. Each stream is an
// Http2Request, an http::HttpRequest whose wire half puts the response on that stream, so the static, proxy,
// cache, admin and status handlers serve it unchanged.
//
// Files: this header declares both classes; http2_connection.cc has the connection's life (the session and
// its callbacks, reading and sending, flow control and the defences against abusive peers, timeouts, shutdown),
// http2_request.cc the request's wire half (its head made from the decoded field lines, the response head as
// HPACK fields, the body queue behind the stream's DATA frames, the request body).
//
// Everything runs on the connection's core. Nothing the handlers see is called from inside a libnghttp2
// callback: the callbacks record what happened (a request head complete, body data, a stream closed) and the
// connection acts on it after the library returns (run_events), so a handler may call back into the session.
#pragma once

#include <nghttp2/nghttp2.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/http/connection.hh"
#include "core/http/http_request.hh"
#include "core/net/out_chain.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::stats {
struct Http2Counters;
}

namespace kosoku::http2 {

struct Http2SrvConf;
class Http2Connection;

/// One HTTP/2 stream's request: Exchange's wire half on the connection's session. Owned by the connection
/// (its list of requests); freed once its stream is closed, its response complete (or its content state
/// released after an abort) and the bytes it lent by reference (write_ref) sent.
class Http2Request final : public http::HttpRequest, public reactor::Timer {
 public:
  Http2Request(Http2Connection& c, int32_t id, http::HttpServer& srv, const config::ServerConf& default_server);
  ~Http2Request() override;

  // ---- Exchange: the wire
  std::string_view remote_addr() const override;
  const sockaddr* peer_addr() const override;
  const net::Stream* stream() const override;
  void disable_keep_alive() override {}  // a stream ends with its response whatever: nothing to keep
  uint16_t server_port() const override;
  uint64_t connection_id() const override;
  uint64_t connection_requests() const override;
  void send_head() override;
  void write(std::string_view data) override;
  void write_ref(const char* data, size_t len) override;
  void write_shared(net::SharedBuffer& buf, const char* data, size_t len) override;
  /// The response bytes not yet sent: those queued for DATA frames, and those handed to the stream and not
  /// sent yet (counted from this request's last byte there, so bytes of other streams sent in between may
  /// count too: never less than the truth, which is what write_ref's users need).
  size_t pending_output() const override;
  void set_low_water(size_t bytes) override;
  void finish() override;
  void abort_response() override;
  void release() override;
  void read_body(http::BodySink* sink) override;
  void pause_body(bool paused) override;

  // ---- Timer: client_header_timeout while the header block arrives, client_body_timeout while the body is
  // awaited, send_timeout while the client's window holds the response back.
  void fire() override;

  int32_t id() const { return id_; }

 private:
  friend class Http2Connection;
  enum class TimerRole : uint8_t { kNone, kHead, kBody, kSend };

  int discard_available_body() override;

  // The request head, from the decoded field lines (on_header) to a request (complete_head).
  /// One decoded field line (RFC 9113 §8.2), kept for complete_head.
  void add_field(std::string_view name, std::string_view value);
  /// The field lines are complete (END_HEADERS): the head is built and parsed; 0, or the status the stream
  /// is answered with (431 for a list over the bounds, 400 for one the HTTP/1.1 grammar refuses).
  int complete_head(bool end_stream);

  // The response body queue behind the stream's DATA frames (the data source).
  static ssize_t read_data(nghttp2_session*, int32_t id, uint8_t* buf, size_t length, uint32_t* flags,
                           nghttp2_data_source* src, void* conn);
  /// Sends `length` bytes of the queue as one DATA frame with header `framehd` (NGHTTP2_DATA_FLAG_NO_COPY).
  void send_data(const uint8_t* framehd, size_t length);
  void queued();  // bytes were queued: the session is asked to send them
  void arm(TimerRole role, uint64_t ms);

  // The request body.
  void on_data(std::string_view data);
  void deliver_body();
  void body_failed(int status);

  Http2Connection& conn_;
  const int32_t id_;
  TimerRole timer_role_ = TimerRole::kNone;

  // Head being decoded.
  std::string method_, path_, authority_, host_, scheme_, cookie_;
  std::string fields_text_;  // "name: value\r\n" of the regular fields, in order
  size_t field_bytes_ = 0;   // RFC 9113 §6.5.2 size of the list so far (name + value + 32 per field)
  uint32_t field_count_ = 0;
  bool too_large_ = false;   // over large_client_header_buffers or max_headers: answered 431
  bool trailers_ = false;    // the HEADERS being decoded are trailers (ignored)

  // Response body.
  net::OutChain out_;
  size_t low_water_ = 0;
  uint64_t in_stream_end_ = 0;  // Http2Connection::committed_ after this request's last byte handed over
  uint64_t retire_at_ = 0;      // the same for its last byte lent by reference
  bool above_low_ = false;      // pending output went over the low-water mark since on_writable last ran
  bool has_body_ = false;       // the response has a body (a data source was submitted)
  uint64_t body_bytes_out_head_ = 0;  // the response head's size as HTTP/1.1 text ($bytes_sent counts it)
  bool eof_ = false;            // finish() ran: the queue is the whole rest of the body
  bool deferred_ = false;       // the session waits for queued bytes (NGHTTP2_ERR_DEFERRED)

  // Request body.
  std::string body_in_;          // DATA received and not yet given to the sink (the stream's window bounds it)
  http::BodySink* sink_ = nullptr;
  uint64_t body_received_ = 0;
  int body_error_ = 0;           // a broken body's status, for a sink that comes later
  bool body_end_ = false;        // END_STREAM received
  bool body_paused_ = false;
  bool discarding_ = false;      // body bytes are dropped as they arrive
  uint64_t drain_left_ = 0;      // after the response: body bytes still dropped before RST_STREAM NO_ERROR

  // Life.
  bool head_done_ = false;    // the header block is complete (END_HEADERS)
  bool phases_run_ = false;   // the head was complete and the phases started
  int reject_status_ = 0;     // the head is answered with this status instead (complete_head)
  bool finished_ = false;     // finish() ran
  bool cut_ = false;          // abort_response() ran: the stream is reset
  bool stream_closed_ = false;  // the session closed the stream (or the connection is gone)
  bool closed_normally_ = false;  // ...after the response's END_STREAM went out (not a reset)
  bool abort_told_ = false;   // the content state got on_abort()
  bool released_ = false;     // after on_abort: the content state called release()
  Http2Request* prev_ = nullptr;  // the connection's list
  Http2Request* next_ = nullptr;
};

/// One HTTP/2 connection (made by the http2 module when a connection's first bytes are the preface, or its
/// TLS handshake chose "h2"): the stream's handler, the session, its requests, one timer (idle, and
/// send_timeout on the connection's own output) and a node of the server's live list.
class Http2Connection final : public net::StreamHandler,
                              public reactor::Timer,
                              public reactor::Task,
                              public http::HttpServer::Node {
 public:
  Http2Connection(http::HttpServer& srv, net::Stream& s, const config::ListenSocket& ls);
  ~Http2Connection();
  /// Sets the session up (SETTINGS from the configuration) and posts the first read of the bytes already in
  /// the stream's input. False when libnghttp2 cannot start one (out of memory): the caller closes.
  bool start();

  // ---- StreamHandler
  void on_readable(net::Stream&) override;
  void on_peer_closed(net::Stream&) override;
  void on_writable(net::Stream&) override;
  void on_closed(net::Stream&, int error) override;

  // ---- Timer: the idle timeout (keepalive_timeout / http2_idle_timeout) and send_timeout
  void fire() override;

  // ---- Task: the work left after a callback (events, sending), and deletion once the connection is gone
  void run() override;

  // ---- HttpServer::Node
  void shutdown_if_idle() override;
  bool close_if_idle() override;

  const http::CoreContext& core() const { return core_; }
  /// The client's address as text ($remote_addr), looked up on first use.
  std::string_view remote_addr() const;
  /// Whether the connection came over TLS ("h2") or cleartext ("h2c").
  bool secure() const { return secure_; }

 private:
  friend class Http2Request;

  void process();
  /// Hands the stream's input to the session, at most recv_buffer_size bytes per call.
  void receive();
  /// Lets the session write frames into the stream while its output is under the high-water mark.
  void send();
  /// What the callbacks recorded: request heads to run, bodies to deliver, aborts to tell, requests to free.
  void run_events();
  /// Flushes the stream; when it took the output at once, the work that waited for room is posted.
  void flush();
  void reap();
  /// Ends the connection with a GOAWAY carrying `code` (RFC 9113 §7), counted; the stream closes once the
  /// GOAWAY is sent.
  void terminate(uint32_t code, const char* why);
  void close(net::Stream::Close how);
  void arm_timer();
  /// The last stream id a GOAWAY may carry: the last one the session took, never more than an earlier
  /// GOAWAY's (RFC 9113 §6.8: the value never increases).
  int32_t goaway_last_id() const {
    return std::min(goaway_last_, nghttp2_session_get_last_proc_stream_id(session_));
  }
  void schedule() {
    if (!destroying_) core_.reactor->post(this);
  }
  size_t active_requests() const { return requests_count_; }
  uint64_t sent() const { return stream_ != nullptr ? committed_ - stream_->pending_output() : UINT64_MAX; }
  /// Consumes `n` bytes of stream `id`'s receive window (the session then sends WINDOW_UPDATE as needed).
  void consume(int32_t id, size_t n);
  /// Counts a reset (sent or received) against the rapid-reset budget; false once it is spent.
  bool charge_reset();
  /// Counts `n` bytes of frames that carry no request or response payload against the flood budget.
  bool charge_control(size_t n);
  /// The session closed `r`'s stream (or the connection went): counted, and its content state is told.
  void stream_gone(Http2Request* r);
  void link(Http2Request* r);
  void unlink(Http2Request* r);
  Http2Request* request_of(int32_t id) const;

  // libnghttp2 callbacks (user_data: the connection).
  static ssize_t on_send(nghttp2_session*, const uint8_t* data, size_t len, int flags, void* conn);
  static int on_send_data(nghttp2_session*, nghttp2_frame* frame, const uint8_t* framehd, size_t length,
                          nghttp2_data_source* src, void* conn);
  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* conn);
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* conn);
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t flags, void* conn);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* conn);
  static int on_data_chunk(nghttp2_session*, uint8_t flags, int32_t id, const uint8_t* data, size_t len, void* conn);
  static int before_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* conn);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame* frame, void* conn);
  static int on_stream_close(nghttp2_session*, int32_t id, uint32_t error_code, void* conn);
  static int on_invalid_frame(nghttp2_session*, const nghttp2_frame* frame, int lib_error, void* conn);

  http::HttpServer& srv_;
  const http::CoreContext& core_;
  net::Stream* stream_;
  const config::ListenSocket& listen_;
  const Http2SrvConf& conf_;
  stats::Http2Counters& counters_;
  nghttp2_session* session_ = nullptr;
  uint64_t id_ = 0;
  uint64_t requests_ = 0;     // streams that began, for keepalive_requests and $connection_requests
  uint64_t committed_ = 0;    // bytes written to the stream; committed_ - pending_output(): sent
  mutable std::string remote_addr_;
  uint16_t server_port_ = 0;
  bool secure_ = false;
  bool in_callback_ = false;  // inside the session (recv or send): handlers are not called
  bool more_input_ = false;   // input is left for the next read step (http2_recv_buffer_size)
  bool blocked_ = false;      // the last send step stopped at the stream's high-water mark
  bool in_process_ = false;
  bool goaway_sent_ = false;  // no new stream is taken
  int32_t goaway_last_ = 0x7fffffff;  // the lowest last stream id a GOAWAY of ours carried
  bool closing_ = false;      // close once the GOAWAY (and what is queued) is out
  bool peer_closed_ = false;
  bool dead_ = false;         // the stream is gone: delete once no request holds the connection
  bool destroying_ = false;   // in the destructor: a request's content state going posts nothing

  Http2Request* requests_head_ = nullptr;  // every live request, oldest first
  Http2Request* requests_tail_ = nullptr;
  size_t requests_count_ = 0;    // of them, those whose stream is open
  std::vector<Http2Request*> ready_;   // heads complete: the phases run in run_events
  bool events_ = false;          // something for run_events (bodies, aborts, writable, reaping)

  // Defences (RFC 9113 §10.5; CVE-2023-44487 rapid reset, CVE-2019-9512..9518 floods).
  double reset_tokens_ = 0;      // resets allowed now; refilled at reset_rate_ per second up to reset_burst_
  double reset_rate_ = 0, reset_burst_ = 0;
  uint64_t reset_refill_ms_ = 0;
  uint64_t control_bytes_ = 0;   // received frame bytes that carried no payload (SETTINGS, PING, ...)
  uint64_t payload_bytes_ = 0;   // request heads and body bytes received, DATA bytes sent
  int32_t max_request_id_ = 0;   // the highest stream id a request opened
  std::array<int32_t, 32> reset_ids_{};  // the streams the server reset last (their trailers may still come)
  uint32_t reset_next_ = 0;
};

}  // namespace kosoku::http2
