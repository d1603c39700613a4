#include "core/net/kernel_stack.hh"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/net/in_buffer.hh"
#include "core/net/out_chain.hh"

namespace kosoku::net {

namespace {

constexpr unsigned kBufCount = 1024;        // provided buffers per core (power of two)
constexpr unsigned kBufSize = 4096;         // bytes each
constexpr unsigned kBufGroup = 0;
constexpr size_t kMinBlock = 16 * 1024;     // output block size for small writes
constexpr unsigned kMaxIov = 64;
constexpr size_t kMaxInput = 1 << 20;       // input kept while the handler does not consume: then pause
constexpr uint64_t kLingeringTimeoutMs = 5000;   // nginx lingering_timeout default
constexpr uint64_t kLingeringTimeMs = 30000;     // nginx lingering_time default: bound on the whole close
constexpr size_t kReclaimBatch = 32;             // idle connections closed at once at the limit (nginx: 32)
constexpr size_t kPoolMax = 256;                 // buffers of each kind kept per core for reuse
constexpr uint64_t kAcceptRetryMs = 500;         // accept paused after EMFILE/ENFILE (nginx accept_mutex_delay)

// The sendmsg(2) arguments of a send in flight: taken from the core's free list when a send is submitted and
// given back when it completes, so an idle stream carries none (1 KiB of iovecs).
struct SendArgs {
  msghdr msg;
  iovec iov[kMaxIov];
};

}  // namespace

class KernelStream;

struct KernelStack::Impl {
  reactor::Reactor& reactor;
  stats::CoreStats& stats;
  uint32_t max_streams;
  io_uring_buf_ring* buf_ring = nullptr;
  char* buf_base = nullptr;
  size_t buf_ring_bytes = 0;
  size_t open = 0;
  AcceptHandler* accept_handler = nullptr;
  bool accepting = false;
  bool accept_paused = false;   // worker_connections reached: resumes when a stream closes
  bool accept_backoff = false;  // accept failed for want of a resource (EMFILE...): resumes on a timer or a close
  base::LogRateLimiter accept_log{1000};  // "accept4() failed": one line per second on this core

  struct AcceptRetryTimer final : reactor::Timer {
    Impl* stack = nullptr;
    void fire() override { stack->end_accept_backoff(); }
  } accept_retry;

  struct ListenerOp final : reactor::IoOp {
    Impl* stack = nullptr;
    const config::ListenSocket* conf = nullptr;
    int fd = -1;
    bool armed = false;
    void complete(int32_t res, uint32_t flags) override { stack->on_accept(*this, res, flags); }
  };
  std::vector<std::unique_ptr<ListenerOp>> listeners;

  struct NullOp final : reactor::IoOp {
    void complete(int32_t, uint32_t) override {}
  } null_op;

  // Per-core free lists of the per-connection buffers (4 KiB input buffers, kMinBlock output blocks, sendmsg
  // arguments): a stream holds them only while it has input not yet consumed, output not yet sent, a send in
  // flight; an idle keep-alive stream holds none (nginx frees its buffers on keep-alive too,
  // ngx_http_set_keepalive). The lists make taking them again cheap. Bounded: beyond kPoolMax the memory goes
  // back to the allocator.
  InBufferPool in_bufs{kPoolMax};
  BlockPool<kMinBlock, kPoolMax> blocks;
  std::vector<SendArgs*> free_send_args;
  // Every stream not yet destroyed (accepted or connecting), for the reset at exit (~KernelStack).
  KernelStream* live = nullptr;

  Impl(reactor::Reactor& r, stats::CoreStats& s, uint32_t max) : reactor(r), stats(s), max_streams(max) {
    accept_retry.stack = this;
  }
  ~Impl() {
    reactor.timers().cancel(accept_retry);
    for (SendArgs* a : free_send_args) delete a;
  }
  SendArgs* take_send_args() {
    if (free_send_args.empty()) return new SendArgs;
    SendArgs* a = free_send_args.back();
    free_send_args.pop_back();
    return a;
  }
  void give_send_args(SendArgs* a) {
    if (free_send_args.size() < kPoolMax) {
      free_send_args.push_back(a);
    } else {
      delete a;
    }
  }
  OutBlock* take_block(size_t cap) {
    OutBlock* b = cap == kMinBlock ? blocks.take() : nullptr;
    return b != nullptr ? b : OutBlock::make_copied(cap);
  }
  /// A sent block: a kMinBlock copied one back to the free list, any other freed (a shared one unref'd).
  void give_block(OutBlock* b) {
    if (!blocks.keep(b)) OutBlock::destroy(b);
  }

  char* buf_addr(unsigned bid) { return buf_base + static_cast<size_t>(bid) * kBufSize; }
  void recycle(unsigned bid) {
    io_uring_buf_ring_add(buf_ring, buf_addr(bid), kBufSize, static_cast<unsigned short>(bid),
                          io_uring_buf_ring_mask(kBufCount), 0);
    io_uring_buf_ring_advance(buf_ring, 1);
  }

  void arm_accept(ListenerOp& l) {
    if (l.armed || !accepting || accept_paused || accept_backoff) return;
    io_uring_prep_multishot_accept(reactor.sqe(&l), l.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    l.armed = true;
  }
  void cancel_accepts() {
    for (auto& l : listeners) {
      if (l->armed) io_uring_prep_cancel(reactor.sqe(&null_op), l.get(), 0);
    }
  }
  void pause_accept() {
    if (accept_paused) return;
    accept_paused = true;
    cancel_accepts();
  }
  void resume_accept() {
    if (!accept_paused) return;
    accept_paused = false;
    for (auto& l : listeners) arm_accept(*l);
  }
  /// accept failed for want of a descriptor or memory: stop accepting (the clients wait in the backlog) until
  /// kAcceptRetryMs have passed or one of this core's streams has closed, as nginx disables its accept events
  /// for accept_mutex_delay (ngx_event_accept) instead of retrying at once.
  void begin_accept_backoff() {
    if (!accept_backoff) {
      accept_backoff = true;
      cancel_accepts();
    }
    if (!accept_retry.armed()) reactor.timers().arm(accept_retry, reactor.now_ms() + kAcceptRetryMs);
  }
  void end_accept_backoff() {
    if (!accept_backoff) return;
    accept_backoff = false;
    reactor.timers().cancel(accept_retry);
    for (auto& l : listeners) arm_accept(*l);
  }
  void on_accept(ListenerOp& l, int32_t res, uint32_t flags);
  void accept_failed(int err);
  void stream_closed() {
    --open;
    --stats.conn_active;
    if (accept_paused && open < max_streams) resume_accept();
    // The stream's descriptor is closed by an SQE queued before the accept this re-arms (one submit, in order).
    if (accept_backoff) end_accept_backoff();
  }
};

class KernelStream final : public Stream {
 public:
  KernelStream(KernelStack::Impl& stack, int fd) : stack_(stack), fd_(fd) {
    next_live_ = stack_.live;
    if (next_live_ != nullptr) next_live_->prev_live_ = this;
    stack_.live = this;
  }

  /// The end of the worker (drain over or timed out): SO_LINGER {1, 0} and close, so the peer gets a RST now
  /// (sent once io_uring lets go of the socket, at the latest when the ring is torn down) instead of a FIN
  /// that reads like a complete response, or silence. No handler is called.
  void reset_at_exit() {
    if (fd_ < 0) return;
    linger l{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    ::close(fd_);
    fd_ = -1;
  }
  KernelStream* next_live() const { return next_live_; }

  void start(StreamHandler* h) {
    handler_ = h;
    arm_recv();
  }
  void set_handler(StreamHandler* h) override { handler_ = h; }

  /// Outgoing: submit the connect; recv and sends start when it completes.
  void start_connect(StreamHandler* h, const sockaddr* addr, socklen_t len) {
    handler_ = h;
    connecting_ = true;
    std::memcpy(&peer_, addr, len);
    peer_len_ = len;
    io_uring_prep_connect(stack_.reactor.sqe(&connect_op_), fd_, reinterpret_cast<const sockaddr*>(&peer_),
                          peer_len_);
  }

  // Stream
  std::span<const char> input() const override { return in_.view(); }
  void consume(size_t n) override {
    in_.consume(n);
    if (in_.empty()) release_input();
    // Input back-pressure released: reading resumes once the handler has drained half the limit.
    if (input_full_ && in_.size() <= kMaxInput / 2) {
      input_full_ = false;
      if (!paused_) arm_recv();
    }
  }
  void pause_reading() override { paused_ = true; cancel_recv(); }
  void resume_reading() override {
    paused_ = false;
    arm_recv();
  }
  std::span<char> reserve(size_t min_bytes) override {
    OutBlock* t = out_.writable_tail(min_bytes);
    if (t == nullptr) {
      t = stack_.take_block(min_bytes > kMinBlock ? min_bytes : kMinBlock);
      out_.push_back(t);
    }
    return {t->data + t->end, t->cap - t->end};
  }
  void write_ref(const char* data, size_t len) override {
    if (len != 0) out_.push_back(OutBlock::make_ref(data, len));
  }
  void write_shared(SharedBuffer& buf, const char* data, size_t len) override {
    if (len != 0) out_.push_back(OutBlock::make_shared(buf, data, len));
  }
  void commit(size_t n) override { out_.commit(n); }
  void flush() override;
  size_t pending_output() const override { return out_.bytes(); }
  void set_low_water(size_t bytes) override { low_water_ = bytes; }
  void close(Close how) override;
  void set_keepalive(bool on) override {
    int v = on ? 1 : 0;
    setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &v, sizeof(v));
  }
  // The peer address is looked up on first use (getpeername), not per accept: the multishot accept cannot return
  // it, and most requests never need it ($remote_addr, allow/deny, logs, X-Forwarded-For do).
  const sockaddr* peer() const override {
    resolve_peer();
    return reinterpret_cast<const sockaddr*>(&peer_);
  }
  std::string_view peer_text() const override {
    resolve_peer();
    return std::string_view(peer_text_, peer_text_len_);
  }
  uint16_t local_port() const override { return local_port_; }

  void resolve_peer() const {
    if (peer_known_) return;
    socklen_t len = sizeof(peer_);
    if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&peer_), &len) != 0) return;  // retried later
    set_peer_text();
  }
  void set_peer_text() const {
    peer_known_ = true;
    char* buf = peer_text_;
    buf[0] = '\0';
    if (peer_.sa.sa_family == AF_INET) {
      inet_ntop(AF_INET, &peer_.in4.sin_addr, buf, sizeof(peer_text_));
    } else if (peer_.sa.sa_family == AF_INET6) {
      const sockaddr_in6* a6 = &peer_.in6;
      if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
        inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], buf, sizeof(peer_text_));
      } else {
        inet_ntop(AF_INET6, &a6->sin6_addr, buf, sizeof(peer_text_));
      }
    }
    peer_text_len_ = static_cast<uint8_t>(std::strlen(buf));
  }
  /// Accepted streams: the local port is the listener's (no getsockname per connection).
  void set_local_port(uint16_t port) { local_port_ = port; }

 private:
  struct RecvOp final : reactor::IoOp {
    KernelStream* s;
    explicit RecvOp(KernelStream* k) : s(k) {}
    void complete(int32_t res, uint32_t flags) override { s->on_recv(res, flags); }
  };
  struct SendOp final : reactor::IoOp {
    KernelStream* s;
    explicit SendOp(KernelStream* k) : s(k) {}
    void complete(int32_t res, uint32_t flags) override { s->on_send(res); }
  };
  struct ConnectOp final : reactor::IoOp {
    KernelStream* s;
    explicit ConnectOp(KernelStream* k) : s(k) {}
    void complete(int32_t res, uint32_t) override { s->on_connect(res); }
  };
  struct RearmTask final : reactor::Task {
    KernelStream* s;
    explicit RearmTask(KernelStream* k) : s(k) {}
    void run() override {
      Guard g(s);
      s->rearm_pending_ = false;
      s->arm_recv();
    }
  };
  struct LingerTimer final : reactor::Timer {
    KernelStream* s;
    explicit LingerTimer(KernelStream* k) : s(k) {}
    void fire() override {
      Guard g(s);
      s->abort_now(0);
    }
  };

  ~KernelStream() {
    out_.clear([this](OutBlock* b) { stack_.give_block(b); });
    release_input();
    if (send_args_ != nullptr) stack_.give_send_args(send_args_);
  }

  /// Everything received is consumed: the buffer goes back to the core's free list (an idle stream holds none).
  void release_input() { in_.release(&stack_.in_bufs); }

  void arm_recv() {
    if (recv_armed_ || connecting_ || dead_ || peer_fin_ || ((paused_ || input_full_) && !closing_)) return;
    io_uring_sqe* sqe = stack_.reactor.sqe(&recv_op_);
    io_uring_prep_recv_multishot(sqe, fd_, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = kBufGroup;
    recv_armed_ = true;
  }
  void cancel_recv() {
    if (recv_armed_ && !recv_cancel_sent_) {
      io_uring_prep_cancel(stack_.reactor.sqe(&stack_.null_op), &recv_op_, 0);
      recv_cancel_sent_ = true;
    }
  }
  // Completions call into the handler, which may close() the stream: destruction is deferred until the
  // completion unwinds (depth_), so no member is touched after a delete.
  struct Guard {
    KernelStream* s;
    explicit Guard(KernelStream* k) : s(k) { ++s->depth_; }
    ~Guard() {
      if (--s->depth_ == 0) s->maybe_destroy();
    }
  };

  void on_recv(int32_t res, uint32_t flags) {
    Guard g(this);
    if (!(flags & IORING_CQE_F_MORE)) {
      recv_armed_ = false;
      recv_cancel_sent_ = false;
    }
    if (res > 0) {
      unsigned bid = flags >> IORING_CQE_BUFFER_SHIFT;
      stack_.stats.bytes_in += static_cast<uint64_t>(res);
      if (closing_) linger_needed_ = true;  // input after close: wait for the peer's FIN before closing
      if (!closing_) in_.append(stack_.buf_addr(bid), static_cast<size_t>(res), &stack_.in_bufs);
      stack_.recycle(bid);
      if (!closing_) {
        handler_->on_readable(*this);
        if (!closing_ && in_.size() > kMaxInput) {
          input_full_ = true;  // stop reading until the handler consumes (see consume())
          cancel_recv();
        }
      }
    } else if (res == 0) {
      peer_fin_ = true;
      if (closing_) {
        if (lingering_) abort_now(0);
      } else {
        handler_->on_peer_closed(*this);
      }
    } else if (res == -ENOBUFS) {
      // All provided buffers are in use: back-pressure, retry in the next loop pass.
      if (!rearm_pending_) {
        rearm_pending_ = true;
        stack_.reactor.post(&rearm_task_);
      }
    } else if (res != -ECANCELED) {
      peer_fin_ = true;
      fail(-res);
    }
    if (!recv_armed_ && !rearm_pending_) arm_recv();
  }

  void on_connect(int32_t res) {
    Guard g(this);
    connecting_ = false;
    if (dead_) return;
    if (res < 0) {
      fail(-res);
      return;
    }
    set_peer_text();  // the address connected to
    arm_recv();
    if (!closing_) handler_->on_connected(*this);
    flush();
  }

  void on_send(int32_t res) {
    Guard g(this);
    send_in_flight_ = false;
    if (send_args_ != nullptr) stack_.give_send_args(send_args_);
    send_args_ = nullptr;
    if (res > 0) {
      stack_.stats.bytes_out += static_cast<uint64_t>(res);
      advance_output(static_cast<size_t>(res));
    } else if (res < 0 && res != -EAGAIN && res != -EINTR) {
      send_error_ = true;
      fail(-res);
      return;
    }
    if (dead_) return;
    if (out_.bytes() > 0) {
      flush();
    } else if (closing_) {
      begin_lingering();
    }
    if (!closing_ && out_.bytes() <= low_water_) handler_->on_writable(*this);
  }

  void advance_output(size_t n) {
    // Every sent block goes back, the last one too: an idle stream holds no output block (the core's free list
    // hands the next response one at once).
    out_.drop_front(n, [this](OutBlock* b) { stack_.give_block(b); });
  }

  void begin_lingering() {
    if (lingering_) return;
    lingering_ = true;
    // Nothing unread and nothing expected: a plain close sends FIN and cannot turn into a reset that would
    // destroy the response at the client (nginx lingers only when more data may come, too).
    if (peer_fin_ || send_error_ || !linger_needed_) {
      abort_now(0);
      return;
    }
    ::shutdown(fd_, SHUT_WR);
    stack_.reactor.timers().arm(linger_timer_, stack_.reactor.now_ms() + kLingeringTimeoutMs);
    arm_recv();  // discard input until the peer's FIN
  }

  // The connection broke: tell the handler (once) and tear down.
  void fail(int error) {
    if (!closing_) close_error_ = error;
    abort_now(error);
  }

  void abort_now(int error) {
    closing_ = true;
    dead_ = true;
    if (error != 0 && close_error_ == 0) close_error_ = error;
    stack_.reactor.timers().cancel(linger_timer_);
    cancel_recv();
    if (connecting_ && !connect_cancel_sent_) {
      io_uring_prep_cancel(stack_.reactor.sqe(&stack_.null_op), &connect_op_, 0);
      connect_cancel_sent_ = true;
    }
    if (send_in_flight_ && !send_cancel_sent_) {
      io_uring_prep_cancel(stack_.reactor.sqe(&stack_.null_op), &send_op_, 0);
      send_cancel_sent_ = true;
    }
  }

  void maybe_destroy() {
    if (depth_ > 0 || !dead_ || recv_armed_ || send_in_flight_ || connecting_ || rearm_pending_ || destroyed_) return;
    destroyed_ = true;
    StreamHandler* h = handler_;
    handler_ = nullptr;
    if (h != nullptr) h->on_closed(*this, close_error_);  // the fd is still open: peer() works in on_closed
    // Closed through the ring (no close(2) per connection): the SQE goes out with this iteration's submit, and
    // the descriptor number stays taken until then, so it cannot be reused early. The FIN (with the unsent tail
    // of the response, see flush()) leaves then.
    io_uring_sqe* sqe = stack_.reactor.sqe(&stack_.null_op);
    io_uring_prep_close(sqe, fd_);
    sqe->flags |= IOSQE_CQE_SKIP_SUCCESS;
    fd_ = -1;
    (prev_live_ != nullptr ? prev_live_->next_live_ : stack_.live) = next_live_;
    if (next_live_ != nullptr) next_live_->prev_live_ = prev_live_;
    stack_.stream_closed();
    delete this;
  }

  KernelStack::Impl& stack_;
  int fd_;
  KernelStream* prev_live_ = nullptr;  // KernelStack::Impl::live
  KernelStream* next_live_ = nullptr;
  StreamHandler* handler_ = nullptr;
  // TCP over IPv4 or IPv6 only (a sockaddr_storage would be 100 bytes more per connection).
  union PeerAddr {
    sockaddr sa;
    sockaddr_in in4;
    sockaddr_in6 in6;
  };
  mutable PeerAddr peer_{};
  mutable char peer_text_[INET6_ADDRSTRLEN] = {};
  mutable uint8_t peer_text_len_ = 0;
  mutable bool peer_known_ = false;
  uint16_t local_port_ = 0;

  InBuffer in_;    // from the core's InBufferPool while it holds input, given back when all is consumed
  OutChain out_;  // committed output not yet sent: pending_output()
  size_t low_water_ = 0;
  SendArgs* send_args_ = nullptr;  // while a send is in flight

  socklen_t peer_len_ = 0;
  RecvOp recv_op_{this};
  ConnectOp connect_op_{this};
  SendOp send_op_{this};
  RearmTask rearm_task_{this};
  LingerTimer linger_timer_{this};
  bool recv_armed_ = false, recv_cancel_sent_ = false, send_in_flight_ = false, send_cancel_sent_ = false;
  bool connecting_ = false, connect_cancel_sent_ = false, input_full_ = false, linger_needed_ = false;
  bool rearm_pending_ = false, paused_ = false, peer_fin_ = false, send_error_ = false;
  bool closing_ = false, lingering_ = false, dead_ = false, destroyed_ = false;
  int close_error_ = 0;
  int depth_ = 0;
};

void KernelStream::flush() {
  if (send_in_flight_ || connecting_ || out_.bytes() == 0 || dead_) return;
  SendArgs* a = stack_.take_send_args();
  unsigned n = out_.gather(a->iov, kMaxIov);
  if (n == 0) {
    stack_.give_send_args(a);
    return;
  }
  send_args_ = a;
  a->msg = {};
  a->msg.msg_iov = a->iov;
  a->msg.msg_iovlen = n;
  // Once close() was called no more output comes: MSG_MORE keeps the tail segment in the socket so the FIN of
  // the close (or the lingering shutdown) rides on it. A response on a "Connection: close" connection is then
  // one data+FIN packet instead of a data packet and a FIN packet: one packet, one wake-up of the peer and one
  // ACK less per connection (Linux tcp_send_fin() marks the unsent tail skb).
  io_uring_prep_sendmsg(stack_.reactor.sqe(&send_op_), fd_, &a->msg, MSG_NOSIGNAL | (closing_ ? MSG_MORE : 0));
  send_in_flight_ = true;
}

void KernelStream::close(Close how) {
  if (closing_) return;
  closing_ = true;
  if (how == Close::kAbort) {
    abort_now(0);
    maybe_destroy();
    return;
  }
  // Graceful: bound the whole close by lingering_time, then flush → (FIN → drain, if needed) → close.
  stack_.reactor.timers().arm(linger_timer_, stack_.reactor.now_ms() + kLingeringTimeMs);
  linger_needed_ = how == Close::kLinger || !in_.empty();
  release_input();
  if (out_.bytes() > 0) {
    flush();
  } else if (!send_in_flight_) {
    begin_lingering();
  }
  maybe_destroy();
}

void KernelStack::Impl::on_accept(ListenerOp& l, int32_t res, uint32_t flags) {
  if (!(flags & IORING_CQE_F_MORE)) l.armed = false;
  if (res >= 0) {
    int fd = res;
    if (!accepting) {
      ::close(fd);
    } else if (open >= max_streams && accept_handler->reclaim_idle(kReclaimBatch) == 0) {
      // Every connection is busy: refuse, and let further clients wait in the backlog until one closes.
      ::close(fd);
      ++stats.conn_rejected;
      KOSOKU_LOG_EVERY_MS(1000, kAlert, "%u worker_connections are not enough", max_streams);
      pause_accept();
    } else {
      // TCP_NODELAY is inherited from the listener (set once in open_listen_socket).
      auto* s = new KernelStream(*this, fd);
      const sockaddr_storage& la = l.conf->conf.addr;
      s->set_local_port(ntohs(la.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6*>(&la)->sin6_port
                                                       : reinterpret_cast<const sockaddr_in*>(&la)->sin_port));
      ++open;
      ++stats.conn_accepted;
      ++stats.conn_active;
      StreamHandler* h = accept_handler->on_accept(*s, *l.conf);
      if (h == nullptr) {
        s->start(nullptr);
        s->close(Stream::Close::kAbort);
      } else {
        s->start(h);
      }
    }
  } else if (accepting && res != -ECANCELED && res != -EAGAIN && res != -EINTR) {
    accept_failed(-res);
  }
  if (!l.armed) arm_accept(l);
}

void KernelStack::Impl::accept_failed(int err) {
  // nginx's levels (ngx_event_accept): crit when out of descriptors, error for a connection aborted before it
  // was accepted (accepting goes on at once), alert for anything else. One line per second per core at most.
  const uint64_t now = reactor.now_ms();
  if (err == ECONNABORTED) {
    KOSOKU_LOG_LIMITED(accept_log, now, kError, "accept4() failed (%d: %s)", err, std::strerror(err));
    return;
  }
  ++stats.conn_accept_failed;
  if (err == EMFILE || err == ENFILE) {
    KOSOKU_LOG_LIMITED(accept_log, now, kCrit, "accept4() failed (%d: %s) with %zu connection(s) open on this core",
                       err, std::strerror(err), open);
  } else {
    KOSOKU_LOG_LIMITED(accept_log, now, kAlert, "accept4() failed (%d: %s)", err, std::strerror(err));
  }
  // Retrying at once would fail again at once: a busy loop while new clients time out.
  begin_accept_backoff();
}

KernelStack::KernelStack(reactor::Reactor& reactor, stats::CoreStats& stats, uint32_t max_streams)
    : impl_(std::make_unique<Impl>(reactor, stats, max_streams)) {
  Impl& s = *impl_;
  s.buf_ring_bytes = kBufCount * sizeof(io_uring_buf);
  void* ring_mem = mmap(nullptr, s.buf_ring_bytes, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (ring_mem == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "mmap buf ring");
  s.buf_ring = static_cast<io_uring_buf_ring*>(ring_mem);
  io_uring_buf_ring_init(s.buf_ring);
  io_uring_buf_reg reg{};
  reg.ring_addr = reinterpret_cast<uint64_t>(ring_mem);
  reg.ring_entries = kBufCount;
  reg.bgid = kBufGroup;
  int rc = io_uring_register_buf_ring(reactor.ring(), &reg, 0);
  if (rc < 0) {
    munmap(ring_mem, s.buf_ring_bytes);
    throw std::system_error(-rc, std::generic_category(), "io_uring_register_buf_ring");
  }
  s.buf_base = static_cast<char*>(std::aligned_alloc(4096, static_cast<size_t>(kBufCount) * kBufSize));
  for (unsigned i = 0; i < kBufCount; ++i) {
    io_uring_buf_ring_add(s.buf_ring, s.buf_addr(i), kBufSize, static_cast<unsigned short>(i),
                          io_uring_buf_ring_mask(kBufCount), static_cast<int>(i));
  }
  io_uring_buf_ring_advance(s.buf_ring, kBufCount);
}

KernelStack::~KernelStack() {
  // Streams closed in the loop's last iteration queued their close SQEs after its final submit: send them now.
  io_uring_submit(impl_->reactor.ring());
  // Connections still open now outlived the shutdown drain: reset them, as kosoku's own TCP does
  // (TcpStack::reset_all). The stream objects are not freed: the process is ending.
  size_t reset = 0;
  for (KernelStream* s = impl_->live; s != nullptr; s = s->next_live(), ++reset) s->reset_at_exit();
  if (reset > 0) KOSOKU_LOG(kNotice, "%zu connection(s) still open at exit were reset", reset);
  for (auto& l : impl_->listeners) {
    if (l->fd >= 0) ::close(l->fd);
  }
  io_uring_unregister_buf_ring(impl_->reactor.ring(), kBufGroup);
  munmap(impl_->buf_ring, impl_->buf_ring_bytes);
  std::free(impl_->buf_base);
}

int KernelStack::listen(const std::vector<config::ListenSocket>& sockets, AcceptHandler& handler, std::string* err) {
  Impl& s = *impl_;
  s.accept_handler = &handler;
  s.accepting = true;
  for (const config::ListenSocket& ls : sockets) {
    int fd = open_listen_socket(ls.conf, err);
    if (fd < 0) return fd;
    auto l = std::make_unique<Impl::ListenerOp>();
    l->stack = &s;
    l->conf = &ls;
    l->fd = fd;
    s.arm_accept(*l);
    s.listeners.push_back(std::move(l));
  }
  return 0;
}

void KernelStack::stop_accepting() {
  Impl& s = *impl_;
  if (!s.accepting) return;
  s.pause_accept();
  s.accepting = false;
  // Closing the listeners now lets the kernel refuse new connections at once.
  for (auto& l : s.listeners) {
    if (l->fd >= 0) {
      ::close(l->fd);
      l->fd = -1;
    }
  }
}

Stream* KernelStack::connect(const sockaddr* addr, socklen_t addr_len, StreamHandler& handler, std::string* err) {
  Impl& s = *impl_;
  if (s.open >= s.max_streams) {
    if (err) *err = "worker_connections are not enough";
    return nullptr;
  }
  if ((addr->sa_family != AF_INET && addr->sa_family != AF_INET6) || addr_len > sizeof(sockaddr_in6)) {
    if (err) *err = "connect() failed (97: Address family not supported by protocol)";
    return nullptr;
  }
  int fd = ::socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (err) *err = absl::StrCat("socket() failed (", errno, ": ", std::strerror(errno), ")");
    return nullptr;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto* st = new KernelStream(s, fd);
  ++s.open;
  ++s.stats.conn_active;
  st->start_connect(&handler, addr, addr_len);
  return st;
}

size_t KernelStack::open_streams() const { return impl_->open; }

}  // namespace kosoku::net
