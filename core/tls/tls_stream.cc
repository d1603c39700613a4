// TlsStream: the TLS layer's state machine and data path (contract: tls_stream.hh).
#include "core/tls/tls_stream.hh"

#include <openssl/bio.h>
#include <openssl/err.h>

#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/base/log.hh"
#include "core/tls/tls_conf.hh"

namespace kosoku::tls {

namespace {

// The BIO over the lower stream: reads take from its input in place (consume what was copied), writes append to
// its output. Writes never fail (the stream's output queue grows; encrypt_pending bounds how much plaintext is
// turned into records at once), reads ask to be retried when the input is empty.
int bio_write(BIO* b, const char* data, size_t len, size_t* written) {
  auto* t = static_cast<TlsStream*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  net::Stream* s = t->lower();
  if (s == nullptr) return 0;
  std::span<char> out = s->reserve(len);
  std::memcpy(out.data(), data, len);
  s->commit(len);
  t->count_cipher(len);
  *written = len;
  return 1;
}

int bio_read(BIO* b, char* data, size_t len, size_t* read) {
  auto* t = static_cast<TlsStream*>(BIO_get_data(b));
  BIO_clear_retry_flags(b);
  net::Stream* s = t->lower();
  std::span<const char> in = s != nullptr ? s->input() : std::span<const char>();
  if (in.empty()) {
    BIO_set_retry_read(b);
    *read = 0;
    return 0;
  }
  size_t n = std::min(len, in.size());
  std::memcpy(data, in.data(), n);
  s->consume(n);
  *read = n;
  return 1;
}

long bio_ctrl(BIO* b, int cmd, long num, void* ptr) {
  switch (cmd) {
    case BIO_CTRL_FLUSH:
      return 1;  // the stream is flushed by the TlsStream after each OpenSSL call
    case BIO_CTRL_PUSH:
    case BIO_CTRL_POP:
      return 0;
    case BIO_CTRL_PENDING: {
      auto* t = static_cast<TlsStream*>(BIO_get_data(b));
      return t->lower() != nullptr ? static_cast<long>(t->lower()->input().size()) : 0;
    }
    default:
      return 0;
  }
}

int bio_create(BIO* b) {
  BIO_set_init(b, 1);
  return 1;
}

}  // namespace

BIO_METHOD* stream_bio_method() {
  static BIO_METHOD* m = [] {
    BIO_METHOD* bm = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "kosoku stream");
    BIO_meth_set_write_ex(bm, bio_write);
    BIO_meth_set_read_ex(bm, bio_read);
    BIO_meth_set_ctrl(bm, bio_ctrl);
    BIO_meth_set_create(bm, bio_create);
    return bm;
  }();
  return m;
}

TlsStream::TlsStream(net::Stream* lower, SSL* ssl, Role role, TlsShared& shared)
    : lower_(lower), ssl_(ssl), shared_(shared), role_(role) {
  BIO* bio = BIO_new(shared.bio_method != nullptr ? shared.bio_method : stream_bio_method());
  BIO_set_data(bio, this);
  SSL_set_bio(ssl_, bio, bio);
  SSL_set_app_data(ssl_, this);
  if (role_ == Role::kServer) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
    state_ = State::kHandshake;  // a client never sees plain bytes first
  }
}

TlsStream::~TlsStream() {
  {
    reactor::Timer* t = this;
    shared_.reactor->timers().cancel(*t);
  }
  if (cert_cache_ != nullptr && waiting()) cert_cache_->cancel(this);
  out_.clear([this](net::OutBlock* b) { release_block(b); });
  plain_in_.release(shared_.in_pool);
  if (waiting_cert_ && shared_.counters->handshakes_waiting > 0) --shared_.counters->handshakes_waiting;
  // A connection that ended without a TLS error keeps its session resumable: OpenSSL marks the session of an
  // SSL freed without a sent close_notify as bad (an aborted upstream connection, a client gone after its
  // response), which would cost the next connection a full handshake.
  if (error_ == 0) SSL_set_shutdown(ssl_, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
  SSL_free(ssl_);
}

void TlsStream::release_block(net::OutBlock* b) {
  if (!shared_.blocks.keep(b)) net::OutBlock::destroy(b);
}

void TlsStream::post() {
  if (posted_) return;
  posted_ = true;
  shared_.reactor->post(this);
}

void TlsStream::run() {
  posted_ = false;
  if (dead_) {
    delete this;
    return;
  }
  drive();
}

void TlsStream::resume_handshake() {
  if (waiting_cert_) {
    waiting_cert_ = false;
    --shared_.counters->handshakes_waiting;
  } else {
    cert_ready_early_ = true;  // told before SSL_do_handshake returned: handshake() retries at once
  }
  post();
}

// ---- the lower stream's events

void TlsStream::drive() {
  if (told_closed()) return;
  if (state_ == State::kDetect) {
    std::span<const char> in = lower_->input();
    if (in.empty()) return;
    // A TLS connection starts with a handshake record (RFC 8446 §5.1: ContentType handshake = 22), or an
    // SSLv2-format ClientHello (high bit set: OpenSSL refuses it); anything else is taken for plain HTTP, which
    // the HTTP layer answers (and its parser refuses garbage with 400), as nginx does.
    const auto first = static_cast<unsigned char>(in[0]);
    if (first != 22 && (first & 0x80) == 0) {
      state_ = State::kPlain;
      ++shared_.counters->plain_http;
      handler_->on_readable(*this);
      return;
    }
    state_ = State::kHandshake;
  }
  if (state_ == State::kPlain) {
    handler_->on_readable(*this);
    return;
  }
  if (state_ == State::kHandshake && !handshake()) return;
  if (state_ == State::kOpen) read_records();
}

// One step of the handshake; true once it is complete (and the stream still open).
bool TlsStream::handshake() {
  if (waiting_cert_) return false;
  ERR_clear_error();
  int r = SSL_do_handshake(ssl_);
  if (lower_ != nullptr) lower_->flush();
  if (told_closed()) return false;
  if (r != 1) {
    int e = SSL_get_error(ssl_, r);
    if (e == SSL_ERROR_WANT_READ) {
      if (lower_fin_) fail("peer closed connection in SSL handshake", e);
      return false;
    }
    if (e == SSL_ERROR_WANT_CLIENT_HELLO_CB) {  // the callback waits for a certificate: resume_handshake()
      if (cert_ready_early_) {
        cert_ready_early_ = false;  // the certificate came while the callback was still running: the task
        return false;               // resume_handshake posted runs the handshake again
      }
      waiting_cert_ = true;
      ++shared_.counters->handshakes_waiting;
      return false;
    }
    fail("SSL_do_handshake() failed", e);
    return false;
  }
  state_ = State::kOpen;
  ++shared_.counters->handshakes;
  if (SSL_session_reused(ssl_)) ++shared_.counters->sessions_reused;
  if (role_ == Role::kClient) {
    handler_->on_connected(*this);
    if (told_closed()) return false;
  }
  encrypt_pending();  // a client's request written while connecting
  return !told_closed();
}

void TlsStream::read_records() {
  bool got = false;
  bool close_notify = false;
  while (!upper_paused_) {
    if (plain_in_.size() >= kMaxPlainInput) {
      read_blocked_ = true;
      lower_->pause_reading();
      break;
    }
    std::span<char> room = plain_in_.prepare(2048, shared_.in_pool);
    size_t n = 0;
    ERR_clear_error();
    if (SSL_read_ex(ssl_, room.data(), room.size(), &n) == 1) {
      plain_in_.appended(n);
      got = true;
      continue;
    }
    int e = SSL_get_error(ssl_, 0);
    if (e == SSL_ERROR_WANT_READ) break;
    if (e == SSL_ERROR_ZERO_RETURN) {  // close_notify (RFC 8446 §6.1): the peer sends nothing more
      close_notify = true;
      break;
    }
    if (lower_ != nullptr) lower_->flush();
    fail("SSL_read() failed", e);
    return;
  }
  if (plain_in_.empty()) plain_in_.release(shared_.in_pool);
  if (lower_ != nullptr) lower_->flush();  // post-handshake messages (session tickets, key updates)
  if (told_closed()) return;
  // Nothing buffered: OpenSSL's record buffers go (SSL_MODE_RELEASE_BUFFERS frees them only after an
  // application record, not after the handshake's last one), so an idle connection holds none.
  if (lower_->input().empty()) SSL_free_buffers(ssl_);
  if (got) {
    handler_->on_readable(*this);
    if (told_closed()) return;
  }
  // SSL_has_pending: with read-ahead, whole records may wait inside OpenSSL while SSL_pending() is 0.
  bool at_end = close_notify || (lower_fin_ && lower_->input().empty() && SSL_has_pending(ssl_) == 0);
  if (at_end && !told_peer_closed_) {
    told_peer_closed_ = true;
    handler_->on_peer_closed(*this);
  }
}

void TlsStream::on_peer_closed(net::Stream&) {
  lower_fin_ = true;
  if (told_closed()) return;
  if (state_ == State::kPlain) {
    handler_->on_peer_closed(*this);
    return;
  }
  if (state_ == State::kDetect) {  // FIN before any byte: nothing to answer
    handler_->on_peer_closed(*this);
    return;
  }
  drive();
  if (!told_closed() && state_ == State::kHandshake && !waiting_cert_) {
    fail("peer closed connection in SSL handshake", SSL_ERROR_NONE);
  }
}

void TlsStream::on_connected(net::Stream&) {
  if (told_closed()) return;
  handshake();
}

void TlsStream::on_writable(net::Stream&) {
  if (lower_ == nullptr) return;
  if (state_ == State::kPlain) {
    if (!closing_) handler_->on_writable(*this);
    return;
  }
  if (state_ == State::kOpen) encrypt_pending();
  if (lower_ == nullptr) return;
  if (close_pending_) {
    if (out_.bytes() == 0) {
      start_close();
    } else {
      reactor::Timer* t = this;  // progress: the send timeout starts again
      shared_.reactor->timers().arm(*t, shared_.reactor->now_ms() + close_timeout_ms_);
    }
    return;
  }
  if (closing_ || state_ != State::kOpen) return;  // a client's handler hears nothing before on_connected
  if (pending_output() <= low_water_) {
    handler_->on_writable(*this);
  } else if (out_.bytes() == 0) {
    lower_->set_low_water(0);  // the records carrying the rest are all in the lower stream: wait for them
  }
}

void TlsStream::on_closed(net::Stream&, int error) {
  lower_ = nullptr;
  state_ = State::kClosed;
  dead_ = true;
  handler_->on_closed(*this, error_ != 0 ? error_ : error);
  post();  // freed from the loop, outside every caller's frame
}

void TlsStream::fail(const char* what, int ssl_error) {
  if (state_ != State::kOpen) ++shared_.counters->handshakes_failed;
  std::string errors = ssl_errors();
  if (ssl_error == SSL_ERROR_SYSCALL && errors.empty()) errors = "unexpected eof";
  if (role_ == Role::kClient) {  // an origin: an error for the operator (nginx logs these at error level)
    const long verify = SSL_get_verify_result(ssl_);
    const char* host = X509_VERIFY_PARAM_get0_host(SSL_get0_param(ssl_), 0);
    if (verify == X509_V_ERR_HOSTNAME_MISMATCH && host != nullptr) {
      KOSOKU_LOG(kError, "upstream SSL certificate does not match \"%s\" while SSL handshaking to upstream, "
                 "upstream: %.*s", host, static_cast<int>(peer_text().size()), peer_text().data());
    } else if (verify != X509_V_OK) {
      KOSOKU_LOG(kError, "upstream SSL certificate verify error: (%ld:%s) while SSL handshaking to upstream, "
                 "upstream: %.*s", verify, X509_verify_cert_error_string(verify),
                 static_cast<int>(peer_text().size()), peer_text().data());
    } else {
      KOSOKU_LOG(kError, "%s (%d: %s) while %s to upstream, upstream: %.*s", what, ssl_error, errors.c_str(),
                 state_ == State::kOpen ? "reading or writing TLS records" : "SSL handshaking",
                 static_cast<int>(peer_text().size()), peer_text().data());
    }
  } else {
    KOSOKU_LOG(kInfo, "%s (%d: %s) while %s, client: %.*s", what, ssl_error, errors.c_str(),
               state_ == State::kOpen ? "reading or writing TLS records" : "SSL handshaking",
               static_cast<int>(peer_text().size()), peer_text().data());
  }
  error_ = EPROTO;
  closing_ = true;
  if (lower_ != nullptr) lower_->close(Close::kAbort);
}

// ---- the plaintext side

std::span<const char> TlsStream::input() const {
  if (state_ == State::kPlain) return lower_ != nullptr ? lower_->input() : std::span<const char>();
  return plain_in_.view();
}

void TlsStream::consume(size_t n) {
  if (state_ == State::kPlain) {
    if (lower_ != nullptr) lower_->consume(n);
    return;
  }
  plain_in_.consume(n);
  if (plain_in_.empty()) plain_in_.release(shared_.in_pool);
  if (read_blocked_ && plain_in_.size() < kMaxPlainInput / 2) {
    read_blocked_ = false;
    if (!upper_paused_ && lower_ != nullptr) lower_->resume_reading();
    post();  // records may wait in OpenSSL's buffer or the lower input: no new bytes will wake us
  }
}

void TlsStream::pause_reading() {
  upper_paused_ = true;
  if (lower_ != nullptr) lower_->pause_reading();
}

void TlsStream::resume_reading() {
  if (!upper_paused_) return;
  upper_paused_ = false;
  if (lower_ != nullptr && !read_blocked_) lower_->resume_reading();
  if (state_ == State::kOpen) post();
}

std::span<char> TlsStream::reserve(size_t min_bytes) {
  if (state_ == State::kPlain) return lower_->reserve(min_bytes);
  if (net::OutBlock* t = out_.writable_tail(min_bytes)) return {t->data + t->end, t->cap - t->end};
  net::OutBlock* b = nullptr;
  if (min_bytes <= decltype(shared_.blocks)::kBlockBytes) b = shared_.blocks.take();
  if (b == nullptr) b = net::OutBlock::make_copied(std::max(min_bytes, decltype(shared_.blocks)::kBlockBytes));
  out_.push_back(b);
  return {b->data, b->cap};
}

void TlsStream::commit(size_t n) {
  if (state_ == State::kPlain) {
    lower_->commit(n);
    return;
  }
  out_.commit(n);
  plain_committed_ += n;
}

void TlsStream::write_ref(const char* data, size_t len) {
  if (state_ == State::kPlain) {
    lower_->write_ref(data, len);
    return;
  }
  if (len == 0) return;
  out_.push_back(net::OutBlock::make_ref(data, len));
  plain_committed_ += len;
}

void TlsStream::write_shared(net::SharedBuffer& buf, const char* data, size_t len) {
  if (state_ == State::kPlain) {
    lower_->write_shared(buf, data, len);
    return;
  }
  if (len == 0) return;
  out_.push_back(net::OutBlock::make_shared(buf, data, len));
  plain_committed_ += len;
}

void TlsStream::flush() {
  if (lower_ == nullptr) return;
  if (state_ == State::kPlain) {
    lower_->flush();
    return;
  }
  if (state_ == State::kOpen) encrypt_pending();
}

// Turns queued plaintext into records while the lower stream holds less than kLowerHighWater.
void TlsStream::encrypt_pending() {
  while (out_.bytes() > 0 && lower_ != nullptr && lower_->pending_output() < kLowerHighWater) {
    net::OutBlock* h = out_.head();
    while (h != nullptr && h->size() == 0) h = h->next;
    if (h == nullptr) break;
    const char* p = h->bytes() + h->begin;
    size_t n = std::min<size_t>(h->size(), record_limit_);
    if (n < record_limit_ && out_.bytes() > n) {  // small pieces: one record for them
      n = out_.copy_out(0, shared_.gather, std::min<size_t>({out_.bytes(), record_limit_, TlsShared::kGatherBytes}));
      p = shared_.gather;
    }
    size_t w = 0;
    ERR_clear_error();
    if (SSL_write_ex(ssl_, p, n, &w) != 1) {
      fail("SSL_write() failed", SSL_get_error(ssl_, 0));
      return;
    }
    out_.drop_front(w, [this](net::OutBlock* b) { release_block(b); });
    plain_encrypted_ += w;
    if (ack_count_ == kAcks) {  // extend the newest boundary
      Ack& last = acks_[(ack_head_ + ack_count_ - 1) % kAcks];
      last = {cipher_committed_, plain_encrypted_};
    } else {
      acks_[(ack_head_ + ack_count_) % kAcks] = {cipher_committed_, plain_encrypted_};
      ++ack_count_;
    }
  }
  if (lower_ == nullptr) return;
  lower_->set_low_water(out_.bytes() > 0 ? kLowerHighWater / 2 : low_water_);
  lower_->flush();
}

void TlsStream::update_acked() const {
  if (lower_ == nullptr) return;
  uint64_t sent = cipher_committed_ - lower_->pending_output();
  while (ack_count_ > 0 && acks_[ack_head_].cipher_end <= sent) {
    plain_acked_ = acks_[ack_head_].plain_end;
    ack_head_ = (ack_head_ + 1) % kAcks;
    --ack_count_;
  }
}

size_t TlsStream::pending_output() const {
  if (state_ == State::kPlain) return lower_ != nullptr ? lower_->pending_output() : 0;
  update_acked();
  return plain_committed_ - plain_acked_;
}

void TlsStream::set_low_water(size_t bytes) {
  low_water_ = bytes;
  if (lower_ != nullptr && (state_ == State::kPlain || out_.bytes() == 0)) lower_->set_low_water(bytes);
}

void TlsStream::close(Close how) {
  if (closing_ || lower_ == nullptr) return;
  closing_ = true;
  close_how_ = how;
  if (how == Close::kAbort || state_ != State::kOpen) {
    lower_->close(how);
    return;
  }
  encrypt_pending();
  if (lower_ == nullptr) return;
  if (out_.bytes() > 0) {
    close_pending_ = true;  // on_writable finishes once the rest is encrypted, fire() if it never is
    reactor::Timer* t = this;
    shared_.reactor->timers().arm(*t, shared_.reactor->now_ms() + close_timeout_ms_);
    return;
  }
  start_close();
}

void TlsStream::fire() {
  if (!close_pending_ || lower_ == nullptr) return;
  KOSOKU_LOG(kInfo, "client timed out while the response was sent (TLS close), client: %.*s",
             static_cast<int>(peer_text().size()), peer_text().data());
  close_pending_ = false;
  lower_->close(Close::kAbort);
}

// A graceful end: close_notify (RFC 8446 §6.1), then the lower stream's own graceful close.
void TlsStream::start_close() {
  close_pending_ = false;
  {
    reactor::Timer* t = this;
    shared_.reactor->timers().cancel(*t);
  }
  ERR_clear_error();
  SSL_shutdown(ssl_);  // sends close_notify; the peer's is not waited for (nginx does the same)
  ERR_clear_error();
  if (lower_ != nullptr) lower_->close(close_how_);
}

}  // namespace kosoku::tls
