#include "kernel-bypass/tcpip/tcp_stack.hh"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "kernel-bypass/tcpip/tcb.hh"

namespace kosoku::tcpip {

namespace {
using namespace tcp_flag;
// SYN cookie layout (ISN bits): 24-bit MAC | 5-bit time counter | 3-bit MSS index. The counter ticks every
// 64 s; a cookie is accepted during the current and the previous period.
constexpr uint16_t kCookieMss[8] = {536, 1024, 1220, 1300, 1400, 1440, 1452, 1460};
constexpr uint64_t kCookiePeriodMs = 64'000;
}  // namespace

TcpStack::TcpStack(Interface& ip, reactor::TimerWheel& timers, const Clock& clock, stats::CoreStats& core_stats,
                   const TcpConfig& conf)
    : ip_(ip), timers_(timers), clock_(clock), core_stats_(core_stats), conf_(conf) {
  ip_.register_l4(kProtoTcp, this);
  uint32_t span = conf_.ephemeral_last - conf_.ephemeral_first + 1u;
  next_ephemeral_ = static_cast<uint16_t>(conf_.ephemeral_first + keys_.ts_offset(FourTuple{}) % span);
}

TcpStack::~TcpStack() {
  ip_.register_l4(kProtoTcp, nullptr);
  for (auto& [t, tcb] : table_) delete tcb;
  for (Tcb* z : zombies_) delete z;
}

size_t TcpStack::idle_connection_bytes() const { return sizeof(Tcb); }

uint32_t TcpStack::listen_rcvbuf(const Listener& l) const {
  int v = l.socket->conf.rcvbuf;
  return v < 0 ? conf_.recv_buffer_bytes : std::max(static_cast<uint32_t>(v), kMinRcvbuf);
}

uint32_t TcpStack::listen_sndbuf(const Listener& l) const {
  int v = l.socket->conf.sndbuf;
  return v < 0 ? conf_.send_buffer_bytes : static_cast<uint32_t>(v);
}

int TcpStack::listen_port(uint16_t port, uint32_t backlog, net::AcceptHandler& handler,
                          const config::ListenSocket* socket) {
  if (listeners_.contains(port)) return -EADDRINUSE;
  Listener& l = listeners_[port];
  l.handler = &handler;
  l.socket = socket != nullptr ? socket : &empty_socket_;
  l.backlog = backlog > 0 ? backlog : 1;
  accepting_ = true;
  return 0;
}

int TcpStack::listen(const std::vector<config::ListenSocket>& sockets, net::AcceptHandler& handler,
                     std::string* err) {
  for (const config::ListenSocket& ls : sockets) {
    const auto& a = ls.conf.addr;
    if (a.ss_family != AF_INET) {
      if (err) *err = absl::StrCat("network dpdk: not supported yet: IPv6 listen ", ls.conf.text);
      return -EAFNOSUPPORT;
    }
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    uint32_t addr = ntohl(in->sin_addr.s_addr);
    if (addr != 0 && addr != ip_.address().value) {
      if (err) {
        *err = absl::StrCat("network dpdk: not supported yet: listen ", ls.conf.text,
                            " (only 0.0.0.0 or the interface address ", ip_.address().to_string(), ")");
      }
      return -EADDRNOTAVAIL;
    }
    int rc = listen_port(ntohs(in->sin_port), static_cast<uint32_t>(ls.conf.backlog), handler, &ls);
    if (rc < 0) {
      if (err) *err = absl::StrCat("bind() to ", ls.conf.text, " failed (address already in use)");
      return rc;
    }
  }
  return 0;
}

void TcpStack::stop_accepting() {
  accepting_ = false;
  listeners_.clear();
}

uint16_t TcpStack::pick_ephemeral(Ipv4Addr dst, uint16_t dst_port) {
  uint32_t span = conf_.ephemeral_last - conf_.ephemeral_first + 1u;
  uint32_t probes = span < kEphemeralProbes ? span : kEphemeralProbes;
  for (uint32_t i = 0; i < probes; ++i) {
    uint16_t p = next_ephemeral_;
    next_ephemeral_ = p >= conf_.ephemeral_last ? conf_.ephemeral_first : static_cast<uint16_t>(p + 1);
    if (listeners_.contains(p)) continue;
    FourTuple t{ip_.address(), p, dst, dst_port};
    if (flow_owner_ != nullptr && !flow_owner_->is_local(t)) {
      ++stats_.ephemeral_not_local;
      continue;
    }
    if (!table_.contains(t)) return p;
  }
  return reuse_time_wait(dst, dst_port);
}

uint16_t TcpStack::reuse_time_wait(Ipv4Addr dst, uint16_t dst_port) {
  auto d = tw_ports_.find(dest_key(dst, dst_port));
  if (d == tw_ports_.end()) return 0;
  std::deque<uint16_t>& ports = d->second;
  uint64_t now = now_ms();
  uint32_t live = 0;
  for (size_t i = 0; i < ports.size() && live < kTimeWaitReuseProbes;) {
    FourTuple t{ip_.address(), ports[i], dst, dst_port};
    auto heard = tw_heard_ms_.find(t);
    auto it = table_.find(t);
    if (heard == tw_heard_ms_.end() || it == table_.end() || it->second->state() != TcpState::kTimeWait) {
      ports.erase(ports.begin() + static_cast<long>(i));  // stale: that TIME-WAIT ended (or was taken over)
      continue;
    }
    ++live;
    if (now - heard->second < kTimeWaitReuseMs || listeners_.contains(t.local_port) ||
        (flow_owner_ != nullptr && !flow_owner_->is_local(t))) {
      ++i;
      continue;
    }
    uint16_t port = ports[i];
    ports.erase(ports.begin() + static_cast<long>(i));
    if (ports.empty()) tw_ports_.erase(d);
    tw_heard_ms_.erase(heard);  // before terminate: remove() then leaves tw_ports_ alone
    it->second->terminate(0);   // leaves table_; freed by reap()
    ++stats_.time_wait_reused;
    return port;
  }
  if (ports.empty()) tw_ports_.erase(d);
  return 0;
}

void TcpStack::note_time_wait(const Tcb& tcb) {
  if (tcb.state() != TcpState::kTimeWait || !tcb.timestamps()) return;
  const FourTuple& t = tcb.tuple();
  if (t.local_port < conf_.ephemeral_first || t.local_port > conf_.ephemeral_last ||
      listeners_.contains(t.local_port)) {
    return;
  }
  auto [it, inserted] = tw_heard_ms_.try_emplace(t, now_ms());
  if (!inserted) {
    it->second = now_ms();  // the peer's FIN again: restarts the 1 s
    return;
  }
  tw_ports_[dest_key(t.remote, t.remote_port)].push_back(t.local_port);
}

net::Stream* TcpStack::connect(const sockaddr* addr, socklen_t addr_len, net::StreamHandler& handler,
                               std::string* err) {
  if (addr->sa_family != AF_INET || addr_len < sizeof(sockaddr_in)) {
    if (err) *err = "network dpdk: not supported yet: IPv6 upstreams";
    return nullptr;
  }
  const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
  return connect_from(0, Ipv4Addr{ntohl(in->sin_addr.s_addr)}, ntohs(in->sin_port), handler, err);
}

net::Stream* TcpStack::connect_from(uint16_t local_port, Ipv4Addr dst, uint16_t dst_port,
                                    net::StreamHandler& handler, std::string* err) {
  if (open_ >= conf_.max_streams) {
    if (err) *err = "worker_connections are not enough";
    return nullptr;
  }
  if (local_port == 0) local_port = pick_ephemeral(dst, dst_port);
  FourTuple t{ip_.address(), local_port, dst, dst_port};
  if (local_port == 0 || table_.contains(t)) {
    if (err) *err = "connect() failed (99: Cannot assign requested address)";
    return nullptr;
  }
  auto* tcb = new Tcb(*this, t);
  table_[t] = tcb;
  tcb->set_counted();
  ++open_;
  ++core_stats_.conn_active;
  ++stats_.active_opens;
  tcb->open_active(&handler);
  return tcb;
}

void TcpStack::received(const Ipv4Header& ip, std::span<const uint8_t> l4, RxChecksum l4_checksum) {
  ++stats_.segments_in;
  if (l4_checksum == RxChecksum::kBad) {
    ++stats_.bad_checksum;
    return;
  }
  TcpSegment seg;
  TcpParseError e = parse_tcp_segment(l4, ip.src, ip.dst, l4_checksum != RxChecksum::kGood, &seg);
  if (e != TcpParseError::kNone) {
    ++(e == TcpParseError::kBadChecksum ? stats_.bad_checksum : stats_.bad_header);
    return;
  }
  FourTuple t{ip.dst, seg.header.dst_port, ip.src, seg.header.src_port};
  auto it = table_.find(t);
  if (it != table_.end()) {
    Tcb* tcb = it->second;
    // A new SYN for a connection in TIME-WAIT with a higher sequence number starts a new incarnation
    // (RFC 9293 §3.6.1 / RFC 6191 as Linux does); otherwise TIME-WAIT handles it.
    if (tcb->state() == TcpState::kTimeWait && seg.header.has(kSyn) && !seg.header.has(kAck) &&
        seg.header.seq > tcb->rcv_nxt() && listeners_.contains(t.local_port)) {
      tcb->terminate(0);
    } else {
      tcb->segment_arrives(seg);
      note_time_wait(*tcb);  // still allocated: a terminated TCB is freed by reap()
      return;
    }
  }
  auto l = listeners_.find(t.local_port);
  if (l != listeners_.end() && accepting_) {
    on_listen_segment(l->second, t, seg);
    return;
  }
  reset_for(t, seg);
}

void TcpStack::reset_for(const FourTuple& t, const TcpSegment& seg) {
  // RFC 9293 §3.10.7.1: never answer a RST; otherwise RST with SEQ = SEG.ACK, or ACK = SEG.SEQ + SEG.LEN.
  const TcpHeader& h = seg.header;
  if (h.has(kRst)) return;
  ++stats_.resets_to_closed_port;
  if (h.has(kAck)) {
    send_control(t, h.ack, SeqNum{}, kRst, 0, TcpOptions{});
  } else {
    send_control(t, SeqNum{0}, h.seq + seg.seq_len(), kRst | kAck, 0, TcpOptions{});
  }
}

void TcpStack::on_listen_segment(Listener& l, const FourTuple& t, const TcpSegment& seg) {
  const TcpHeader& h = seg.header;
  if (h.has(kRst)) return;
  if (h.has(kAck)) {  // RFC 9293 §3.10.7.2: an ACK to a listener is a cookie, or gets a RST
    if (!h.has(kSyn) && conf_.syn_cookies && accept_cookie(l, t, seg)) return;
    send_control(t, h.ack, SeqNum{}, kRst, 0, TcpOptions{});
    return;
  }
  if (!h.has(kSyn)) return;
  if (h.has(kFin)) {  // SYN+FIN: no real stack sends it (a scan); discarded as Linux does (tcp_rcv_state_process)
    ++stats_.syn_fin_dropped;
    return;
  }
  ++stats_.syn_in;
  if (open_ >= conf_.max_streams) {
    refuse_max_streams(t);
    return;  // dropped: the client retries its SYN (like a full accept queue)
  }
  if (l.half_open >= l.backlog) {
    ++stats_.syn_backlog_full;
    // Linux's "Possible SYN flooding on port N" (tcp_syn_flood_action), at most once per second per core.
    KOSOKU_LOG_LIMITED(syn_backlog_log_, now_ms(), kWarn,
                       "possible SYN flooding on port %u: %u half-open connections fill its backlog, %s (%u such "
                       "SYNs so far on this core)",
                       t.local_port, l.half_open, conf_.syn_cookies ? "sending SYN cookies" : "SYN dropped",
                       stats_.syn_backlog_full);
    if (!conf_.syn_cookies) return;
    // SYN cookie (RFC 4987 §3.6): no state; the ISN encodes the MSS and a MAC of the 4-tuple and time.
    uint16_t mss = seg.options.has_mss ? seg.options.mss : 536;
    uint32_t idx = 0;
    for (uint32_t i = 0; i < 8; ++i) {
      if (kCookieMss[i] <= mss) idx = i;
    }
    uint32_t counter = static_cast<uint32_t>(now_ms() / kCookiePeriodMs);
    uint32_t mac = keys_.cookie_mac(t, h.seq.v, counter) & 0xffffff;
    SeqNum isn{(mac << 8) | ((counter & 0x1f) << 3) | idx};
    TcpOptions o;
    o.has_mss = true;
    o.mss = static_cast<uint16_t>(ip_.max_l4_payload() - TcpHeader::kMinSize);
    uint16_t window = static_cast<uint16_t>(std::min(listen_rcvbuf(l), kCookieWindow));
    send_control(t, isn, h.seq + 1, kSyn | kAck, window, o);
    ++stats_.syn_cookies_sent;
    return;
  }
  auto* tcb = new Tcb(*this, t);
  table_[t] = tcb;
  ++l.half_open;
  ++stats_.passive_opens;
  tcb->set_buffer_limits(listen_rcvbuf(l), listen_sndbuf(l));  // before the SYN-ACK: its window scale
  tcb->open_passive(seg, true);
}

bool TcpStack::accept_cookie(Listener& l, const FourTuple& t, const TcpSegment& seg) {
  uint32_t cookie = seg.header.ack.v - 1;
  uint32_t now_counter = static_cast<uint32_t>(now_ms() / kCookiePeriodMs);
  uint32_t low = (cookie >> 3) & 0x1f;
  uint32_t counter = (now_counter & ~0x1fu) | low;
  if (counter > now_counter) counter -= 32;
  if (now_counter - counter > 1 ||
      (keys_.cookie_mac(t, seg.header.seq.v - 1, counter) & 0xffffff) != (cookie >> 8)) {
    ++stats_.syn_cookies_bad;
    return false;
  }
  if (open_ >= conf_.max_streams) {
    refuse_max_streams(t);
    return true;  // valid but no room: dropped (the client retransmits its ACK or data)
  }
  ++stats_.syn_cookies_ok;
  ++stats_.passive_opens;
  auto* tcb = new Tcb(*this, t);
  table_[t] = tcb;
  tcb->set_buffer_limits(listen_rcvbuf(l), listen_sndbuf(l));
  tcb->open_from_cookie(seg, SeqNum{cookie}, kCookieMss[cookie & 7]);
  return true;
}

void TcpStack::send_control(const FourTuple& t, SeqNum seq, SeqNum ack, uint8_t flags, uint16_t window,
                            const TcpOptions& options) {
  TcpHeader h;
  h.src_port = t.local_port;
  h.dst_port = t.remote_port;
  h.seq = seq;
  h.ack = ack;
  h.flags = flags;
  h.window = window;
  size_t hl = TcpHeader::kMinSize + options.wire_size();
  ip_.send_ipv4(t.remote, kProtoTcp, hl, [&](std::span<uint8_t> out) {
    write_tcp_header(h, options, out.data());
    ip_.fill_tcp_checksum(out, t.local, t.remote);
  }, now_ms());
  ++stats_.segments_out;
  if (flags & kRst) ++stats_.rst_out;
}

void TcpStack::established(Tcb& tcb) {
  if (tcb.counts_in_backlog()) {
    auto l = listeners_.find(tcb.tuple().local_port);
    if (l != listeners_.end() && l->second.half_open > 0) --l->second.half_open;
    tcb.leave_backlog();
  }
  auto l = listeners_.find(tcb.tuple().local_port);
  if (l == listeners_.end() || !accepting_ || open_ >= conf_.max_streams) {
    if (open_ >= conf_.max_streams) refuse_max_streams(tcb.tuple());
    tcb.close(net::Stream::Close::kAbort);
    return;
  }
  tcb.set_counted();
  ++open_;
  ++core_stats_.conn_accepted;
  ++core_stats_.conn_active;
  net::StreamHandler* h = l->second.handler->on_accept(tcb, *l->second.socket);
  if (h == nullptr) {
    tcb.close(net::Stream::Close::kAbort);
    return;
  }
  tcb.set_handler(h);
}

void TcpStack::refuse_max_streams(const FourTuple& t) {
  ++stats_.refused_max_streams;
  ++core_stats_.conn_rejected;
  // nginx's accept-time alert, one line per second per core at most (an overload must not flood the log).
  KOSOKU_LOG_LIMITED(max_streams_log_, now_ms(), kAlert,
                     "%u worker_connections are not enough, connection from %s:%u to port %u dropped "
                     "(%u open on this core; %u refused so far)",
                     conf_.max_streams, t.remote.to_string(), t.remote_port, t.local_port, open_,
                     stats_.refused_max_streams);
}

void Tcb::set_keepalive(bool on) {
  const TcpConfig& c = stack_.config();
  set_keepalive(on ? c.keepalive_idle_ms : 0, c.keepalive_interval_ms, c.keepalive_probes);
}

size_t TcpStack::reset_all() {
  size_t n = 0;
  for (auto& [t, tcb] : table_) {
    TcpState st = tcb->state();
    if (st == TcpState::kClosed || st == TcpState::kTimeWait || st == TcpState::kSynSent) continue;
    // RFC 9293 §3.10.7.4 / §3.6 ABORT: <SEQ=SND.NXT><CTL=RST>; the ACK field lets a peer that validates it
    // (RFC 5961 §3) accept it at once.
    send_control(t, tcb->snd_nxt(), tcb->rcv_nxt(), kRst | kAck, 0, TcpOptions{});
    ++n;
  }
  return n;
}

void TcpStack::stream_closed(Tcb& tcb) {
  if (!tcb.counted()) return;
  --open_;
  --core_stats_.conn_active;
}

void TcpStack::remove(Tcb& tcb) {
  tx_unwait(tcb);
  if (tcb.counts_in_backlog()) {
    auto l = listeners_.find(tcb.tuple().local_port);
    if (l != listeners_.end() && l->second.half_open > 0) --l->second.half_open;
    tcb.leave_backlog();
  }
  auto it = table_.find(tcb.tuple());
  if (it != table_.end() && it->second == &tcb) {
    table_.erase(it);
    if (tw_heard_ms_.erase(tcb.tuple()) != 0) {  // TIME-WAIT over: drop the leading stale ports
      auto d = tw_ports_.find(dest_key(tcb.tuple().remote, tcb.tuple().remote_port));
      if (d != tw_ports_.end()) {
        std::deque<uint16_t>& ports = d->second;
        while (!ports.empty() &&
               !tw_heard_ms_.contains(FourTuple{tcb.tuple().local, ports.front(), tcb.tuple().remote,
                                                tcb.tuple().remote_port})) {
          ports.pop_front();
        }
        if (ports.empty()) tw_ports_.erase(d);
      }
    }
  }
  zombies_.push_back(&tcb);
}

void TcpStack::tx_wait(Tcb& tcb) {
  if (tcb.tx_waiting_) return;
  tcb.tx_waiting_ = true;
  tcb.tx_wait_prev_ = tx_wait_tail_;
  tcb.tx_wait_next_ = nullptr;
  (tx_wait_tail_ != nullptr ? tx_wait_tail_->tx_wait_next_ : tx_wait_head_) = &tcb;
  tx_wait_tail_ = &tcb;
  ++tx_waiting_count_;
  ++stats_.tx_blocked;
}

void TcpStack::tx_unwait(Tcb& tcb) {
  if (!tcb.tx_waiting_) return;
  (tcb.tx_wait_prev_ != nullptr ? tcb.tx_wait_prev_->tx_wait_next_ : tx_wait_head_) = tcb.tx_wait_next_;
  (tcb.tx_wait_next_ != nullptr ? tcb.tx_wait_next_->tx_wait_prev_ : tx_wait_tail_) = tcb.tx_wait_prev_;
  tcb.tx_wait_prev_ = tcb.tx_wait_next_ = nullptr;
  tcb.tx_waiting_ = false;
  --tx_waiting_count_;
}

size_t TcpStack::resume_tx() {
  size_t ran = 0;
  // At most the TCBs waiting now: one held again during its output() is back at the tail, and the room it
  // found short may be refilled by the draining core meanwhile; it waits for the next call.
  for (size_t n = tx_waiting_count_; n > 0 && tx_wait_head_ != nullptr && tx_room_ok(); --n) {
    Tcb& tcb = *tx_wait_head_;
    tx_unwait(tcb);
    tcb.output();  // may call tx_wait(tcb) again; never frees it (terminate() defers that to reap())
    ++ran;
  }
  return ran;
}

void TcpStack::reap() {
  for (Tcb* z : zombies_) delete z;
  zombies_.clear();
}

}  // namespace kosoku::tcpip
