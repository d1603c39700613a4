// The connection interface between the HTTP engine and a network backend. The engine sees only Stream,
// StreamHandler and Stack; the kernel-socket backend (net/kernel_stack.hh, io_uring sockets) implements them
// now, and kosoku's own TCP/IP stack over DPDK (kernel-bypass/) implements the same interface later.
// Everything runs on the owning core; nothing is thread-safe.
//
// Lifetime: a Stream belongs to its Stack. The handler is attached at accept time and is told exactly once
// that the stream is gone (StreamHandler::on_closed); after that call the Stream pointer is invalid. After the
// handler calls close(), it receives no further callbacks except on_closed.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/config/conf.hh"
#include "core/net/shared_buffer.hh"

namespace kosoku::net {

class Stream;

class StreamHandler {
 public:
  /// New bytes were appended to stream.input(). The handler consumes what it parsed with consume(n).
  virtual void on_readable(Stream& s) = 0;
  /// The peer sent FIN: no more input will arrive (output may still be written).
  virtual void on_peer_closed(Stream& s) = 0;
  /// Pending output fell to or below the low-water mark (set_low_water, default 0 = fully sent).
  virtual void on_writable(Stream& s) = 0;
  /// An outgoing stream (Stack::connect) finished its handshake; output queued before now is sent.
  virtual void on_connected(Stream& s) {}
  /// The stream is closed and about to be freed (error = 0, or the errno that broke it). Last callback.
  virtual void on_closed(Stream& s, int error) = 0;

 protected:
  ~StreamHandler() = default;
};

class Stream {
 public:
  enum class Close {
    kGraceful,  // send pending output, then close; if unread input was there (or arrives meanwhile), linger:
                // FIN, then discard input until the peer's FIN or the lingering timeout (nginx lingering_close on)
    kLinger,    // as kGraceful, but always linger (more input is expected, e.g. an unread request body)
    kAbort,     // drop pending output and close now (RST if input is unread)
  };

  /// Contiguous unconsumed input bytes (valid until the next consume() or return to the loop).
  virtual std::span<const char> input() const = 0;
  /// Drop the first n bytes of input().
  virtual void consume(size_t n) = 0;
  /// Stop / restart reading from the network (back-pressure: input stops growing while paused).
  virtual void pause_reading() = 0;
  virtual void resume_reading() = 0;

  /// Writable space at the end of the output queue, at least `min_bytes` long (contiguous). Fill it, then
  /// commit(n). Nothing is sent until flush().
  virtual std::span<char> reserve(size_t min_bytes) = 0;
  virtual void commit(size_t n) = 0;
  /// Append `len` bytes the caller owns, without copying (zero-copy file chunks). The caller keeps the bytes
  /// unchanged until pending_output() has dropped by everything committed up to and including them (use
  /// set_low_water/on_writable), or until on_closed.
  virtual void write_ref(const char* data, size_t len) = 0;
  /// Append `len` bytes at `data` inside `buf` (a file chunk read into it), keeping a reference to the buffer
  /// instead of copying: the backend holds it until the bytes are sent (kernel sockets) or acknowledged (kosoku's
  /// TCP, whose segments point into it) and then unrefs it; the caller may drop its own reference at once.
  /// pending_output() counts the bytes as for write_ref. The default copies (reserve/commit).
  virtual void write_shared(SharedBuffer& buf, const char* data, size_t len);
  /// Start sending committed output.
  virtual void flush() = 0;
  /// Committed output not yet acknowledged as sent by the backend (bytes).
  virtual size_t pending_output() const = 0;
  /// on_writable fires when pending_output() drops to <= bytes.
  virtual void set_low_water(size_t bytes) = 0;

  virtual void close(Close how) = 0;
  /// Makes `h` the handler of this stream from the next callback on: a protocol that takes over a connection
  /// (HTTP/2 after the HTTP/1.1 connection read its preface) calls it from inside a callback of the old
  /// handler, which must not touch the stream afterwards.
  virtual void set_handler(StreamHandler* h) = 0;

  /// Peer address (AF_INET/AF_INET6) and its text form ("192.0.2.1", "2001:db8::1").
  virtual const sockaddr* peer() const = 0;
  virtual std::string_view peer_text() const = 0;
  /// Local port (host order), for $server_port.
  virtual uint16_t local_port() const = 0;
  /// TCP keep-alive on this connection (nginx's `proxy_socket_keepalive on`, SO_KEEPALIVE): the kernel
  /// backend sets the socket option (the system's timers), kosoku's TCP its TcpConfig keepalive_* timers.
  /// Default: ignored.
  virtual void set_keepalive(bool on) {}
  /// The bytes are protected by TLS (nginx's c->ssl): $scheme is "https", $https "on".
  virtual bool secure() const { return false; }
  /// The socket expects TLS but the client sent plain bytes (nginx answers "The plain HTTP request was sent
  /// to HTTPS port").
  virtual bool plain_on_tls_socket() const { return false; }
  /// The application protocol the TLS handshake chose (RFC 7301 ALPN: "h2", "http/1.1"); empty when none.
  virtual std::string_view alpn() const { return {}; }

  void write(std::string_view data);

 protected:
  ~Stream() = default;
};

/// Chooses the handler of each accepted stream. Return nullptr to refuse it (the stack closes it).
class AcceptHandler {
 public:
  virtual StreamHandler* on_accept(Stream& s, const config::ListenSocket& listen) = 0;
  /// worker_connections reached: close up to `max` idle (keep-alive) streams to make room, as nginx does
  /// (ngx_drain_connections). Returns how many were closed.
  virtual size_t reclaim_idle(size_t max) { return 0; }

 protected:
  ~AcceptHandler() = default;
};

/// One network stack instance per core.
class Stack {
 public:
  virtual ~Stack() = default;
  /// Start listening on every socket in `sockets` (each core gets its own listener: SO_REUSEPORT on the kernel
  /// backend, RSS/flow steering on DPDK). Returns 0 or -errno (the error is also described in *err).
  virtual int listen(const std::vector<config::ListenSocket>& sockets, AcceptHandler& handler, std::string* err) = 0;
  /// Open an outgoing connection (proxy upstreams) to `addr`. Returns the stream at once (nullptr with *err
  /// on an immediate failure such as EMFILE); `handler.on_connected` runs when the handshake completes, or
  /// `on_closed(s, errno)` if it fails (ECONNREFUSED, ETIMEDOUT...). Output written before the handshake is
  /// queued and sent after it. Counts against worker_connections like accepted streams.
  virtual Stream* connect(const sockaddr* addr, socklen_t addr_len, StreamHandler& handler, std::string* err) = 0;
  /// Stop accepting new streams (graceful shutdown); existing streams continue.
  virtual void stop_accepting() = 0;
  /// Streams currently open.
  virtual size_t open_streams() const = 0;
};

inline void Stream::write_shared(SharedBuffer&, const char* data, size_t len) {
  write(std::string_view(data, len));
}

inline void Stream::write(std::string_view data) {
  if (data.empty()) return;
  std::span<char> out = reserve(data.size());
  __builtin_memcpy(out.data(), data.data(), data.size());
  commit(data.size());
}

}  // namespace kosoku::net
