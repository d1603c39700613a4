// TLS records over a net::Stream (RFC 8446; 1.2 by RFC 5246): the TLS layer between a network backend's
// stream and the HTTP framing, the same code on kernel sockets and on kosoku's TCP over DPDK. OpenSSL does the
// protocol; its records move through a BIO of our own that reads the lower stream's input in place and writes
// into the lower stream's output, so the loop never blocks and no socket is ever seen by OpenSSL.
//
// Data path and its copies (per byte):
//   in:  lower input -> OpenSSL's record buffer (BIO read, memcpy) -> decrypted in place -> this stream's
//        plaintext buffer (SSL_read, memcpy) -> the HTTP parser reads it in place.
//   out: the HTTP framing writes plaintext into this stream's chain (reserve/commit in place; write_ref and
//        write_shared keep a reference, no copy) -> encrypted by SSL_write into OpenSSL's record buffer ->
//        the lower stream's output (BIO write, memcpy). Small pieces (a response head and a small body) are
//        gathered into one record first (one memcpy into a per-core scratch) rather than sent as several.
// pending_output() counts plaintext bytes until the lower stream has sent the record that carries them, so a
// writer's write_ref promise and its low-water pacing work as on the bare stream; plaintext is encrypted only
// while the lower stream holds less than kLowerHighWater, so a large file is encrypted as the socket drains,
// not all at once.
//
// A first byte other than a TLS handshake record (0x16) makes the stream plain: bytes pass through untouched
// and plain_http() is true, so the HTTP layer can answer nginx's 400 "The plain HTTP request was sent to HTTPS
// port".
//
// Lifetime: created by the TLS module for an accepted stream (server) or by the proxy for an upstream
// (client); lives until the lower stream closes, then tells its handler on_closed and frees itself from a
// reactor task. Per core; nothing is thread-safe.
#pragma once

#include <openssl/ssl.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/certs/cert_cache.hh"
#include "core/net/filter_stream.hh"
#include "core/net/in_buffer.hh"
#include "core/net/out_chain.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::tls {

/// What one core's TLS streams share.
struct TlsShared {
  reactor::Reactor* reactor = nullptr;
  net::InBufferPool* in_pool = nullptr;  // plaintext input buffers
  BIO_METHOD* bio_method = nullptr;      // the BIO over a net::Stream (tls_stream.cc: make_bio_method)
  stats::TlsCounters* counters = &spare;  // the core's (CoreStats::tls); `spare` for clients and tests
  stats::TlsCounters spare;
  static constexpr size_t kGatherBytes = 16384;
  char gather[kGatherBytes];  // small pieces gathered into one record
  net::BlockPool<4096 - sizeof(net::OutBlock), 64> blocks;  // emptied copied output blocks kept for reuse
};

/// The BIO method (created once per process, never freed).
BIO_METHOD* stream_bio_method();

class TlsStream final : public net::FilterStream,
                        public reactor::Task,
                        public reactor::Timer,
                        public certs::CertWaiter {
 public:
  enum class Role { kServer, kClient };
  /// Takes ownership of `ssl` (SSL_free at the end). A server starts reading the ClientHello at once; a client
  /// starts its handshake when `lower` connects (on_connected). A client's lower stream may be attached after
  /// construction (attach): the stream is the handler Stack::connect is given.
  TlsStream(net::Stream* lower, SSL* ssl, Role role, TlsShared& shared);
  void attach(net::Stream& lower) { lower_ = &lower; }
  /// A client's session slot: the newest session the server gave is kept there (one reference; the slot's
  /// owner frees it), for the next connection to resume (proxy_ssl_session_reuse).
  void set_session_slot(SSL_SESSION** slot) { session_slot_ = slot; }
  SSL_SESSION** session_slot() const { return session_slot_; }
  TlsStream(const TlsStream&) = delete;
  TlsStream& operator=(const TlsStream&) = delete;
  ~TlsStream();

  /// The stream of an SSL made by the TLS module (SSL_get_app_data).
  static TlsStream* of(const SSL* ssl) { return static_cast<TlsStream*>(SSL_get_app_data(ssl)); }

  SSL* ssl() const { return ssl_; }
  bool plain_http() const { return state_ == State::kPlain; }
  bool handshake_done() const { return state_ == State::kOpen; }
  /// The SNI name as the client sent it, empty if none ($ssl_server_name).
  const std::string& server_name() const { return server_name_; }
  void set_server_name(std::string_view name) { server_name_.assign(name); }
  /// The virtual server the ClientHello chose (by SNI; null before it: the socket's default server applies).
  const config::ServerConf* server() const { return server_; }
  void set_server(const config::ServerConf* srv) { server_ = srv; }
  /// Largest record payload to send (ssl_buffer_size).
  void set_record_limit(size_t bytes) { record_limit_ = bytes < 512 ? 512 : bytes; }
  /// The client-hello callback suspended the handshake (a certificate is being read by `cache`): resume it on
  /// this core once it is there (certs::CertWaiter); a stream gone before then is taken off the cache's list.
  void wait_for_certificate(certs::CertCache& cache) { cert_cache_ = &cache; }
  void on_cert_ready() override { resume_handshake(); }
  void resume_handshake();

  // ---- net::Stream (the plaintext side, to the HTTP framing)
  std::span<const char> input() const override;
  void consume(size_t n) override;
  void pause_reading() override;
  void resume_reading() override;
  std::span<char> reserve(size_t min_bytes) override;
  void commit(size_t n) override;
  void write_ref(const char* data, size_t len) override;
  void write_shared(net::SharedBuffer& buf, const char* data, size_t len) override;
  void flush() override;
  size_t pending_output() const override;
  void set_low_water(size_t bytes) override;
  void close(Close how) override;
  const sockaddr* peer() const override { return lower_ != nullptr ? lower_->peer() : nullptr; }
  std::string_view peer_text() const override { return lower_ != nullptr ? lower_->peer_text() : ""; }
  uint16_t local_port() const override { return lower_ != nullptr ? lower_->local_port() : 0; }
  void set_keepalive(bool on) override {
    if (lower_ != nullptr) lower_->set_keepalive(on);
  }
  bool secure() const override { return state_ != State::kPlain; }
  bool plain_on_tls_socket() const override { return state_ == State::kPlain; }
  std::string_view alpn() const override {
    const unsigned char* p = nullptr;
    unsigned len = 0;
    SSL_get0_alpn_selected(ssl_, &p, &len);
    return {reinterpret_cast<const char*>(p), len};
  }

  // ---- net::StreamHandler (the lower stream)
  void on_readable(net::Stream&) override { drive(); }
  void on_peer_closed(net::Stream&) override;
  void on_writable(net::Stream&) override;
  void on_connected(net::Stream&) override;
  void on_closed(net::Stream&, int error) override;

  // ---- reactor::Task: a deferred drive (resumed handshake, reading resumed) or the deletion
  void run() override;
  // ---- reactor::Timer: a graceful close still encrypting made no progress for the close timeout
  void fire() override;

  /// The lower stream, for the BIO.
  net::Stream* lower() const { return lower_; }
  /// Ciphertext bytes the BIO wrote into the lower stream (a stream position).
  void count_cipher(size_t n) { cipher_committed_ += n; }

  /// Most bytes the lower stream holds unsent before encryption waits (bytes).
  static constexpr size_t kLowerHighWater = 256 * 1024;
  /// Most decrypted bytes held for the reader before decryption waits (bytes): the bare kernel stream's
  /// input bound, so a request head as large as large_client_header_buffers allows still fits.
  static constexpr size_t kMaxPlainInput = 1 << 20;
  /// A graceful close waiting for plaintext to be encrypted (the lower stream full: the client stopped
  /// reading) aborts when no byte moved for `ms` (the server's send_timeout; nginx's default 60 s), as the
  /// HTTP layer's send_timeout would have, since its timer stops at close().
  void set_close_timeout(uint64_t ms) { close_timeout_ms_ = ms != 0 ? ms : 60000; }

 private:
  enum class State : uint8_t { kDetect, kHandshake, kOpen, kPlain, kClosed };

  void drive();
  bool handshake();
  void read_records();
  void encrypt_pending();
  void start_close();
  void fail(const char* what, int ssl_error);
  void post();
  /// Moves acknowledged plaintext forward from the lower stream's progress.
  void update_acked() const;
  bool told_closed() const { return closing_ || lower_ == nullptr; }
  void release_block(net::OutBlock* b);

  net::Stream* lower_;
  SSL* ssl_;
  TlsShared& shared_;
  Role role_;
  State state_ = State::kDetect;
  bool closing_ = false;          // the handler called close(): no callbacks to it but on_closed
  Close close_how_ = Close::kGraceful;
  bool close_pending_ = false;    // graceful close waits for the plaintext to be encrypted
  bool lower_fin_ = false;        // the lower stream's peer sent FIN
  bool told_peer_closed_ = false;
  bool upper_paused_ = false;
  bool read_blocked_ = false;     // decryption stopped at kMaxPlainInput
  bool posted_ = false;
  bool dead_ = false;             // on_closed ran: the task frees the stream
  bool waiting_cert_ = false;     // the handshake is suspended in the client-hello callback
  bool cert_ready_early_ = false; // resume_handshake ran before the suspension was seen
  size_t low_water_ = 0;
  size_t record_limit_ = 16384;
  uint64_t close_timeout_ms_ = 60000;
  std::string server_name_;
  const config::ServerConf* server_ = nullptr;
  SSL_SESSION** session_slot_ = nullptr;
  certs::CertCache* cert_cache_ = nullptr;  // the cache this stream may wait on (cancelled at the end)
  int error_ = 0;                 // why the layer closed the lower stream (EPROTO: a TLS failure), for on_closed
  net::InBuffer plain_in_;
  net::OutChain out_;                 // plaintext not yet encrypted
  uint64_t plain_committed_ = 0;      // plaintext bytes the writer committed (a stream position)
  uint64_t plain_encrypted_ = 0;      // ... of them encrypted into records
  mutable uint64_t plain_acked_ = 0;  // ... whose records the lower stream has sent
  uint64_t cipher_committed_ = 0;     // ciphertext bytes written into the lower stream
  // Record boundaries not yet sent: (ciphertext end, plaintext end), oldest first; a small ring (when full,
  // the newest entry is extended: acknowledgement then comes a little later, never earlier).
  static constexpr unsigned kAcks = 8;
  struct Ack {
    uint64_t cipher_end;
    uint64_t plain_end;
  };
  mutable Ack acks_[kAcks];
  mutable unsigned ack_head_ = 0, ack_count_ = 0;
};

}  // namespace kosoku::tls
