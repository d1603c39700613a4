#include "kernel-bypass/tcpip/tcb.hh"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

namespace {
constexpr unsigned kChallengeAcksPerSecond = 10;  // RFC 5961 §7 rate limit, per connection
constexpr uint64_t kOowAckIntervalMs = 500;        // oow_ack(): Linux's net.ipv4.tcp_invalid_ratelimit default
constexpr size_t kZeroCopyMinBytes = 1024;  // shorter payloads are cheaper to copy than to attach
using namespace tcp_flag;
}  // namespace

const char* state_name(TcpState s) {
  static constexpr const char* kNames[] = {"CLOSED",     "SYN-SENT",   "SYN-RECEIVED", "ESTABLISHED", "FIN-WAIT-1",
                                           "FIN-WAIT-2", "CLOSE-WAIT", "CLOSING",      "LAST-ACK",    "TIME-WAIT"};
  return kNames[static_cast<int>(s)];
}

Tcb::Tcb(TcpStack& stack, const FourTuple& tuple) : stack_(stack), tuple_(tuple) {
  peer_addr_.sin_family = AF_INET;
  peer_addr_.sin_addr.s_addr = htonl(tuple.remote.value);
  peer_addr_.sin_port = htons(tuple.remote_port);
  peer_text_ = tuple.remote.to_string();
  const TcpConfig& c = stack_.conf_;
  rto_ms_ = c.rto_initial_ms;
  ts_offset_ = stack_.keys_.ts_offset(tuple);
  set_buffer_limits(c.recv_buffer_bytes, c.send_buffer_bytes);
  update_memory();
}

Tcb::~Tcb() {
  send_.clear([this](OutBlock* b) { free_block(b); });
  wait_.clear([this](OutBlock* b) { free_block(b); });
  stack_.stats_.memory_bytes -= accounted_bytes_;
}

// ---------------------------------------------------------------- opening

void Tcb::open_active(net::StreamHandler* handler) {
  handler_ = handler;
  iss_ = SeqNum{stack_.keys_.isn(tuple_, stack_.clock_.now_us())};
  snd_una_ = iss_;
  snd_nxt_ = snd_max_ = data_seq_ = iss_ + 1;
  ws_ok_ = stack_.conf_.window_scaling;
  ts_ok_ = stack_.conf_.timestamps;
  sack_ok_ = stack_.conf_.sack;
  enter(TcpState::kSynSent);
  send_syn();
}

void Tcb::take_syn_options(const TcpOptions& o, bool we_offered) {
  const TcpConfig& c = stack_.conf_;
  peer_mss_ = o.has_mss ? std::max<uint16_t>(o.mss, 64) : 536;  // RFC 9293 §3.7.1: 536 when absent
  ws_ok_ = c.window_scaling && o.has_window_scale && (we_offered ? ws_ok_ : true);
  if (ws_ok_) {
    snd_wscale_ = std::min<uint8_t>(o.window_scale, 14);  // RFC 7323 §2.3
  } else {
    snd_wscale_ = rcv_wscale_ = 0;
  }
  ts_ok_ = c.timestamps && o.has_timestamps && (we_offered ? ts_ok_ : true);
  if (ts_ok_) ts_recent_ = o.ts_val;
  sack_ok_ = c.sack && o.sack_permitted && (we_offered ? sack_ok_ : true);  // RFC 2018 §2
  size_t our_mss = stack_.ip_.max_l4_payload() - TcpHeader::kMinSize;
  mss_ = static_cast<uint16_t>(std::min<size_t>(peer_mss_, our_mss) - (ts_ok_ ? 12 : 0));
  cc_.reset(mss_);
  cc_.set_prr(stack_.conf_.prr);
  cc_.set_algorithm(stack_.conf_.congestion_control);
}

void Tcb::open_passive(const TcpSegment& syn, bool listener_backlog) {
  passive_ = true;
  in_backlog_ = listener_backlog;
  irs_ = syn.header.seq;
  rcv_nxt_ = irs_ + 1;
  take_syn_options(syn.options, false);
  keepalive_from_listener();
  snd_wnd_ = max_snd_wnd_ = syn.header.window;  // never scaled in a SYN (RFC 7323 §2.2)
  snd_wl1_ = syn.header.seq;
  iss_ = SeqNum{stack_.keys_.isn(tuple_, stack_.clock_.now_us())};
  snd_una_ = iss_;
  snd_nxt_ = snd_max_ = data_seq_ = iss_ + 1;
  snd_wl2_ = iss_;
  enter(TcpState::kSynReceived);
  send_syn();
}

void Tcb::open_from_cookie(const TcpSegment& ack, SeqNum iss, uint16_t mss) {
  passive_ = true;
  irs_ = ack.header.seq - 1;
  rcv_nxt_ = ack.header.seq;
  // The cookie SYN-ACK advertised a window (TcpStack::on_listen_segment): data on this ACK is in it.
  rcv_adv_ = rcv_nxt_ + std::min<uint32_t>(rcv_space(), TcpStack::kCookieWindow);
  iss_ = iss;
  snd_una_ = snd_nxt_ = snd_max_ = data_seq_ = iss + 1;
  TcpOptions none;
  none.has_mss = true;
  none.mss = mss;
  take_syn_options(none, false);  // the cookie kept only the MSS: no window scaling, timestamps or SACK
  keepalive_from_listener();
  snd_wnd_ = max_snd_wnd_ = ack.header.window;
  snd_wl1_ = ack.header.seq;
  snd_wl2_ = ack.header.ack;
  enter(TcpState::kEstablished);
  ++stack_.stats_.established;
  stack_.established(*this);
  if (state_ == TcpState::kClosed) return;
  if (!ack.payload.empty() || ack.header.has(kFin)) segment_arrives(ack);
}

void Tcb::send_syn() {
  if (retries_ == 0) {
    timing_ = true;
    timed_seq_ = iss_;
    timed_at_us_ = stack_.clock_.now_us();
  } else {
    timing_ = false;  // Karn: no sample from a retransmitted SYN
  }
  send_segment(iss_, 0, state_ == TcpState::kSynSent ? kSyn : (kSyn | kAck));
  arm_retransmit();
}

// ---------------------------------------------------------------- input

bool Tcb::acceptable(const TcpSegment& seg) const {
  uint32_t len = seg.seq_len();
  int32_t w = rcv_adv_ - rcv_nxt_;
  uint32_t wnd = w > 0 ? static_cast<uint32_t>(w) : 0;
  SeqNum seq = seg.header.seq;
  auto in_window = [&](SeqNum s) { return rcv_nxt_ <= s && s < rcv_nxt_ + wnd; };
  if (len == 0) return wnd == 0 ? seq == rcv_nxt_ : in_window(seq);
  if (wnd == 0) return false;
  return in_window(seq) || in_window(seq + (len - 1));
}

void Tcb::challenge_ack() {
  uint64_t now = stack_.now_ms();
  if (now - last_challenge_ms_ >= 1000) {
    last_challenge_ms_ = now;
    challenges_this_second_ = 0;
  }
  if (++challenges_this_second_ > kChallengeAcksPerSecond) return;
  ++stack_.stats_.challenge_acks;
  send_ack();
}

void Tcb::oow_ack(const TcpSegment& seg) {
  const TcpHeader& h = seg.header;
  if (seg.payload.empty() && !h.has(kSyn) && !h.has(kFin)) {
    uint64_t now = stack_.now_ms();
    if (oow_acked_ && now - last_oow_ack_ms_ < kOowAckIntervalMs) {
      ++stack_.stats_.oow_acks_skipped;
      return;
    }
    oow_acked_ = true;
    last_oow_ack_ms_ = now;
  }
  send_ack();
}

void Tcb::syn_sent_arrives(const TcpSegment& seg) {
  const TcpHeader& h = seg.header;
  if (h.has(kAck) && (h.ack <= iss_ || h.ack > snd_max_)) {
    if (!h.has(kRst)) stack_.send_control(tuple_, h.ack, SeqNum{}, kRst, 0, TcpOptions{});
    return;
  }
  if (h.has(kRst)) {
    if (h.has(kAck)) {
      ++stack_.stats_.rst_in;
      terminate(ECONNREFUSED);
    }
    return;
  }
  if (!h.has(kSyn)) return;
  irs_ = h.seq;
  rcv_nxt_ = irs_ + 1;
  // Our SYN's (unscaled, RFC 7323 §2.2) window counts from IRS + 1, unknown when the SYN left: anchor the
  // advertised right edge here, or RCV.ADV - RCV.NXT is garbage and can refuse all data.
  rcv_adv_ = rcv_nxt_ + std::min<uint32_t>(rcv_space(), 65535);
  take_syn_options(seg.options, true);
  snd_wnd_ = max_snd_wnd_ = h.window;
  snd_wl1_ = h.seq;
  snd_wl2_ = h.ack;
  if (!h.has(kAck)) {  // simultaneous open (RFC 9293 §3.5 figure 7)
    enter(TcpState::kSynReceived);
    send_syn();
    return;
  }
  rtt_on_ack(seg, h.ack);
  timing_ = false;
  snd_una_ = h.ack;
  retries_ = 0;
  stack_.timers_.cancel(rtx_timer_);
  enter(TcpState::kEstablished);
  ++stack_.stats_.established;
  send_ack();
  if (handler_ != nullptr) handler_->on_connected(*this);
  if (state_ == TcpState::kClosed) return;
  output();
}

void Tcb::segment_arrives(const TcpSegment& seg) {
  const TcpHeader& h = seg.header;
  if (state_ == TcpState::kClosed) return;
  if (state_ == TcpState::kSynSent) {
    syn_sent_arrives(seg);
    return;
  }
  // A retransmitted SYN while our SYN-ACK is outstanding: send the SYN-ACK again.
  if (state_ == TcpState::kSynReceived && passive_ && h.has(kSyn) && !h.has(kAck) && h.seq == irs_) {
    send_segment(iss_, 0, kSyn | kAck);
    return;
  }
  // PAWS (RFC 7323 §5.3 R1); RSTs are exempt.
  if (ts_ok_ && seg.options.has_timestamps && !h.has(kRst) &&
      static_cast<int32_t>(seg.options.ts_val - ts_recent_) < 0) {
    ++stack_.stats_.paws_dropped;
    // Typically the late original of a segment already retransmitted: report it as a D-SACK (RFC 2883, as
    // Linux's tcp_send_dupack) so the sender can see its retransmission was spurious.
    if (sack_ok_ && !seg.payload.empty() && h.seq < rcv_nxt_) note_dsack(h.seq, seg.payload.size());
    oow_ack(seg);
    return;
  }
  if (!acceptable(seg)) {
    if (h.has(kRst)) return;
    // Zero receive window: still process a valid ACK (RFC 9293 §3.10.7.4, first check).
    if (h.has(kAck) && h.seq == rcv_nxt_ && rcv_adv_ == rcv_nxt_ && state_ != TcpState::kSynReceived) {
      process_ack(seg);
      if (state_ == TcpState::kClosed) return;
      output();
    }
    if (sack_ok_ && !seg.payload.empty() && h.seq < rcv_nxt_) note_dsack(h.seq, seg.payload.size());
    oow_ack(seg);
    return;
  }
  last_heard_ms_ = stack_.now_ms();  // keep-alive: the peer is alive
  ka_unanswered_ = 0;
  // RFC 7323 §4.3: remember the timestamp of the segment that covers the last ACK we sent.
  if (ts_ok_ && seg.options.has_timestamps && h.seq <= last_ack_sent_) ts_recent_ = seg.options.ts_val;
  if (h.has(kRst)) {  // RFC 5961 §3.2
    ++stack_.stats_.rst_in;
    if (h.seq != rcv_nxt_) {
      challenge_ack();
      return;
    }
    bool quiet = state_ == TcpState::kSynReceived || state_ == TcpState::kClosing ||
                 state_ == TcpState::kLastAck || state_ == TcpState::kTimeWait;
    terminate(quiet ? 0 : ECONNRESET);
    return;
  }
  if (h.has(kSyn)) {  // RFC 5961 §4.2: any SYN in a synchronized state gets a challenge ACK
    challenge_ack();
    return;
  }
  if (!h.has(kAck)) return;
  if (state_ == TcpState::kSynReceived) {
    if (!(snd_una_ < h.ack && h.ack <= snd_max_)) {
      stack_.send_control(tuple_, h.ack, SeqNum{}, kRst, 0, TcpOptions{});
      return;
    }
    rtt_on_ack(seg, h.ack);
    timing_ = false;
    retries_ = 0;
    snd_una_ = h.ack;
    snd_wnd_ = static_cast<uint32_t>(h.window) << snd_wscale_;
    max_snd_wnd_ = std::max(max_snd_wnd_, snd_wnd_);
    snd_wl1_ = h.seq;
    snd_wl2_ = h.ack;
    stack_.timers_.cancel(rtx_timer_);
    enter(TcpState::kEstablished);
    ++stack_.stats_.established;  // (passive ones included; cookie ones are counted in open_from_cookie)
    if (passive_) {
      stack_.established(*this);
    } else if (handler_ != nullptr) {
      handler_->on_connected(*this);
    }
    if (state_ == TcpState::kClosed) return;
  } else {
    if (h.ack > snd_max_) {  // acknowledges something not yet sent
      send_ack();
      return;
    }
    if (max_snd_wnd_ != 0 && h.ack < snd_una_ - max_snd_wnd_) {  // RFC 5961 §5.2
      challenge_ack();
      return;
    }
    process_ack(seg);
    if (state_ == TcpState::kClosed) return;
    if (state_ == TcpState::kFinWait1 && fin_acked()) enter(TcpState::kFinWait2);
    if (state_ == TcpState::kClosing && fin_acked()) {
      enter_time_wait();
      return;
    }
    if (state_ == TcpState::kLastAck && fin_acked()) {
      terminate(0);
      return;
    }
  }
  process_text(seg);
  if (state_ == TcpState::kClosed) return;
  output();
}

void Tcb::process_ack(const TcpSegment& seg) {
  const TcpHeader& h = seg.header;
  SeqNum ack = h.ack;
  uint32_t wnd = static_cast<uint32_t>(h.window) << snd_wscale_;
  bool acked_data = false;
  bool advanced = ack > snd_una_;
  bool dup_candidate = ack == snd_una_ && seg.payload.empty() && !h.has(kFin) && snd_max_ > snd_una_;
  uint32_t acked = 0;
  size_t pending_before = pending_output();
  FrtoAck frto = frto_ack_before(advanced, dup_candidate && wnd == snd_wnd_);
  if (advanced) {
    if (rto_eifel_) {
      rto_eifel_ = false;
      if (eifel_delayed(seg, rto_eifel_ts_)) undo_spurious_rto(snd_max_ - ack, ack - snd_una_);
    }
    if (ack > snd_nxt_) {  // after an RTO rewound snd_nxt_ (and forgot the FIN it had sent)
      snd_nxt_ = ack;
      if (fin_queued_ && ack > fin_seq()) fin_sent_ = true;  // the ACK covers that FIN: it was sent
    }
    rtt_on_ack(seg, ack);
    acked = ack - snd_una_;
    if (ack > data_seq_) {
      size_t n = std::min<size_t>(ack - data_seq_, out_bytes());
      drop_acked(n);
      data_seq_ += static_cast<uint32_t>(n);
      acked_data = n > 0;
      if (acked_data && wait_.bytes() > 0) take();  // room freed: the next waiting output is taken
      stack_.core_stats_.bytes_out += n;
    }
    snd_una_ = ack;
    retries_ = 0;
    uint32_t flight = snd_max_ - snd_una_;
    if (!sack_ok_ && cc_.on_ack(ack, acked, flight, cwnd_limited_round(), stack_.clock_.now_us(),
                                        cc_rtt_us())) {  // NewReno partial ACK: resend the next hole now
      size_t len = std::min<size_t>(send_.bytes(), mss_);
      if (len > 0) {
        send_segment(snd_una_, len, kAck);
        ++stack_.stats_.retransmits;
      }
      arm_retransmit();
    }
    if (snd_una_ == snd_max_) {
      stack_.timers_.cancel(rtx_timer_);
    } else if (sack_ok_ || !cc_.in_recovery()) {  // RFC 6298 §5.3 (NewReno re-arms on partial ACKs)
      arm_retransmit();
    }
  } else if (!sack_ok_ && dup_candidate && wnd == snd_wnd_) {
    ++stack_.stats_.dup_acks_in;
    if (cc_.on_dupack(snd_una_, snd_max_, snd_max_ - snd_una_)) {
      size_t len = std::min<size_t>(send_.bytes(), mss_);
      bool fin = fin_sent_ && len == out_bytes();
      send_segment(snd_una_, len, kAck | (fin ? kFin : 0));
      ++stack_.stats_.fast_retransmits;
      timing_ = false;
      arm_retransmit();
    }
  }
  if (snd_wl1_ < h.seq || (snd_wl1_ == h.seq && snd_wl2_ <= ack)) {  // window update (RFC 9293 §3.10.7.4)
    snd_wnd_ = wnd;
    snd_wl1_ = h.seq;
    snd_wl2_ = ack;
    max_snd_wnd_ = std::max(max_snd_wnd_, wnd);
    if (wnd > 0 && persist_timer_.armed()) {
      stack_.timers_.cancel(persist_timer_);
      persist_ms_ = 0;
    }
  }
  if (sack_ok_) {
    sack_ack(seg, advanced, acked, dup_candidate);
    // The PTO restarts on an ACK that advances SND.UNA (RFC 8985 §7.2), and is cancelled once recovery starts.
    if (advanced || (tlp_timer_.armed() && !cc_.may_enter_sack_recovery(snd_una_))) tlp_arm();
  }
  if (rto_recovery_) frto_on_ack(seg, frto);  // F-RTO steps 2 and 3 (before on_writable may send)
  // Pending output is what the send buffer has not taken: it drops only here (an ACK made room).
  size_t pending = pending_output();
  if (acked_data && handler_ != nullptr && !closing_ && pending < pending_before && pending <= low_water_) {
    handler_->on_writable(*this);
  }
}

void Tcb::process_text(const TcpSegment& seg) {
  const TcpHeader& h = seg.header;
  bool fin = h.has(kFin);
  std::span<const uint8_t> data = seg.payload;
  if (state_ == TcpState::kTimeWait) {
    if (fin) {  // the peer's FIN again: our ACK was lost; acknowledge and restart 2·MSL
      send_ack();
      arm(tw_timer_, stack_.conf_.time_wait_ms);
    }
    return;
  }
  if (state_ != TcpState::kEstablished && state_ != TcpState::kFinWait1 && state_ != TcpState::kFinWait2) {
    if (fin || !data.empty()) send_ack();  // CLOSE-WAIT, CLOSING, LAST-ACK: the peer already sent its FIN
    return;
  }
  if (data.empty() && !fin) return;
  SeqNum seq = h.seq;
  if (seq < rcv_nxt_) {  // trim what we already have
    uint32_t d = rcv_nxt_ - seq;
    if (sack_ok_ && !data.empty()) note_dsack(seq, data.size());
    if (d >= data.size() + (fin ? 1 : 0)) {
      send_ack();  // a pure retransmission
      return;
    }
    data = d >= data.size() ? data.subspan(data.size()) : data.subspan(d);
    seq = rcv_nxt_;
  }
  int32_t room = rcv_adv_ - seq;  // trim to the window we advertised
  if (room < 0) room = 0;
  if (data.size() > static_cast<size_t>(room)) {
    data = data.first(static_cast<size_t>(room));
    fin = false;
  }
  if (seq != rcv_nxt_) {  // out of order: keep it (bounded by the window) and send a duplicate ACK now
    ++stack_.stats_.out_of_order_in;
    if (!closing_ && (!data.empty() || fin)) {
      ooo_insert(seq, data, fin);
      if (sack_ok_ && !data.empty()) sack_note_ooo(seq);
    }
    send_ack();
    return;
  }
  // In order.
  auto append = [&](const char* p, size_t n) {
    if (closing_ || n == 0) return;  // after close(): input is discarded (lingering close)
    if (in_.append(p, n)) update_memory();
  };
  append(reinterpret_cast<const char*>(data.data()), data.size());
  rcv_nxt_ += static_cast<uint32_t>(data.size());
  stack_.core_stats_.bytes_in += data.size();
  bool filled_hole = !ooo_.empty();
  // RFC 2883 §4: octets of this segment the out-of-order queue already held (a retransmission repacketized
  // over a hole and data above it) are duplicates: the first such stretch is reported as a D-SACK.
  SackBlock held_dup{rcv_nxt_, rcv_nxt_};
  if (sack_ok_ && filled_hole && ooo_.front().seq < rcv_nxt_) {
    const OooSegment& o = ooo_.front();
    held_dup = SackBlock{o.seq, std::min(rcv_nxt_, o.seq + static_cast<uint32_t>(o.data.size()))};
  }
  while (!ooo_.empty() && ooo_.front().seq <= rcv_nxt_) {
    OooSegment& o = ooo_.front();
    SeqNum end = o.seq + static_cast<uint32_t>(o.data.size());
    if (end > rcv_nxt_) {
      uint32_t skip = rcv_nxt_ - o.seq;
      append(o.data.data() + skip, o.data.size() - skip);
      stack_.core_stats_.bytes_in += o.data.size() - skip;
      rcv_nxt_ = end;
    }
    if (o.fin && end == rcv_nxt_) fin = true;
    ooo_bytes_ -= o.data.size();
    ooo_.erase(ooo_.begin());
  }
  if (filled_hole) update_memory();
  if (held_dup.left < held_dup.right) note_dsack(held_dup.left, static_cast<size_t>(held_dup.right - held_dup.left));
  if (!data.empty()) ++unacked_segments_;
  if (!fin) {
    if (filled_hole || unacked_segments_ >= 2) {
      send_ack();
    } else if (unacked_segments_ > 0 && !delack_timer_.armed()) {
      arm(delack_timer_, stack_.conf_.delayed_ack_ms);
    }
  }
  notify_readable();
  if (state_ == TcpState::kClosed) return;
  if (fin) peer_fin();
}

void Tcb::peer_fin() {
  rcv_nxt_ += 1;
  peer_fin_ = true;
  ooo_.clear();
  ooo_bytes_ = 0;
  update_memory();
  send_ack();
  switch (state_) {
    case TcpState::kEstablished:
      enter(TcpState::kCloseWait);
      break;
    case TcpState::kFinWait1:
      if (fin_acked()) {
        enter_time_wait();
      } else {
        enter(TcpState::kClosing);  // simultaneous close
      }
      return;
    case TcpState::kFinWait2:
      enter_time_wait();
      return;
    default:
      break;
  }
  if (!closing_ && handler_ != nullptr) handler_->on_peer_closed(*this);
}

// ---------------------------------------------------------------- timers

void Tcb::arm(TcbTimer& t, uint64_t delay_ms) { stack_.timers_.arm(t, stack_.now_ms() + delay_ms); }

void Tcb::arm_retransmit() { arm(rtx_timer_, rto_ms_); }

void Tcb::on_timer(TimerKind k) {
  switch (k) {
    case TimerKind::kRetransmit:
      on_retransmit_timer();
      break;
    case TimerKind::kDelayedAck:
      if (unacked_segments_ > 0 && state_ != TcpState::kClosed) send_ack();
      break;
    case TimerKind::kPersist:
      on_persist_timer();
      break;
    case TimerKind::kTimeWait:
      terminate(0);
      break;
    case TimerKind::kLinger:
      if (state_ != TcpState::kClosed && state_ != TcpState::kTimeWait) {
        send_rst(snd_nxt_);
        terminate(0);
      }
      break;
    case TimerKind::kNotify:
      notify_readable();
      break;
    case TimerKind::kKeepalive:
    case TimerKind::kRelease:
      on_idle_timer(k);
      break;
    case TimerKind::kTlp:
      on_tlp_timer();
      break;
    case TimerKind::kRack:
      on_rack_timer();
      break;
  }
}

void Tcb::on_retransmit_timer() {
  const TcpConfig& c = stack_.conf_;
  if (state_ == TcpState::kSynSent || state_ == TcpState::kSynReceived) {
    if (++retries_ > c.syn_retries) {
      ++stack_.stats_.timeouts;
      terminate(ETIMEDOUT);
      return;
    }
    rto_ms_ = std::min(rto_ms_ * 2, c.rto_max_ms);
    ++stack_.stats_.retransmits;
    send_syn();
    return;
  }
  if (snd_una_ == snd_max_ || state_ == TcpState::kClosed || state_ == TcpState::kTimeWait) return;
  if (++retries_ > c.max_retransmits) {
    ++stack_.stats_.timeouts;
    send_rst(snd_nxt_);
    terminate(ETIMEDOUT);
    return;
  }
  ++stack_.stats_.rto_expired;
  // RFC 3522 for the timeout: the retransmission below carries TSval ts_now(); the first ACK of new data
  // that echoes an older one was sent for an original, so the timeout was spurious (undo_spurious_rto). Only a
  // first expiry that reduced the window is judged; another expiry before an ACK gives up on it. Without
  // timestamps F-RTO (RFC 5682, tcb_frto.cc) judges it by the ACKs that follow.
  bool fast_recovery = cc_.in_recovery();
  bool fresh = cc_.on_timeout(snd_max_ - snd_una_, snd_max_);
  rto_eifel_ = fresh && ts_ok_;
  rto_eifel_ts_ = ts_now();
  if (sack_ok_) sack_on_timeout();
  rto_ms_ = std::min(rto_ms_ * 2, c.rto_max_ms);  // RFC 6298 §5.5 backoff
  timing_ = false;                                // Karn
  frto_ = Frto::kOff;                             // F-RTO: step 1 again (frto_on_timeout, after the output)
  snd_nxt_ = snd_una_;                            // go back: resend from the first unacknowledged byte
  if (fin_sent_ && snd_nxt_ <= fin_seq()) fin_sent_ = false;
  output();
  frto_on_timeout(fresh, fast_recovery);
  arm_retransmit();
}

void Tcb::on_persist_timer() {
  size_t unsent = out_bytes() - std::min<size_t>(out_bytes(), snd_nxt_ - data_seq_);
  if (snd_wnd_ != 0 || unsent == 0 || state_ == TcpState::kClosed) {
    persist_ms_ = 0;
    return;
  }
  // Probe with an old sequence number (SND.UNA - 1): the peer must answer with an ACK carrying its window.
  send_segment(snd_una_ - 1, 0, kAck);
  ++stack_.stats_.zero_window_probes;
  persist_ms_ = std::min(persist_ms_ * 2, stack_.conf_.persist_max_ms);
  arm(persist_timer_, persist_ms_);
}

// ---------------------------------------------------------------- output

uint32_t Tcb::ts_now() const { return static_cast<uint32_t>(stack_.now_ms()) + ts_offset_; }

uint32_t Tcb::rcv_space() const {
  size_t limit = recv_limit_;
  if (closing_) return static_cast<uint32_t>(limit);
  size_t used = in_.size() + ooo_bytes_;
  return used >= limit ? 0 : static_cast<uint32_t>(limit - used);
}

uint16_t Tcb::window_field(bool syn) {
  uint32_t space = rcv_space();
  if (syn) {
    rcv_adv_ = rcv_nxt_ + std::min<uint32_t>(space, 65535);
    return static_cast<uint16_t>(std::min<uint32_t>(space, 65535));
  }
  int32_t adv = rcv_adv_ - rcv_nxt_;
  uint32_t current = adv > 0 ? static_cast<uint32_t>(adv) : 0;
  uint32_t wnd = space;
  // Receiver SWS avoidance (RFC 9293 §3.8.6.2.2): move the right edge only by a useful amount; never back.
  uint32_t threshold = std::min<uint32_t>(recv_limit_ / 2, mss_);
  if (wnd < current || wnd - current < threshold) wnd = current;
  uint32_t unit = 1u << rcv_wscale_;
  uint32_t field = std::min<uint32_t>((wnd + unit - 1) >> rcv_wscale_, 65535);
  SeqNum edge = rcv_nxt_ + (field << rcv_wscale_);
  if (edge > rcv_adv_) rcv_adv_ = edge;
  return static_cast<uint16_t>(field);
}

void Tcb::send_segment(SeqNum seq, size_t len, uint8_t flags) {
  TcpHeader h;
  h.src_port = tuple_.local_port;
  h.dst_port = tuple_.remote_port;
  h.seq = seq;
  h.flags = flags;
  if (flags & kAck) h.ack = rcv_nxt_;
  TcpOptions o;
  bool syn = (flags & kSyn) != 0;
  if (syn) {
    o.has_mss = true;
    o.mss = static_cast<uint16_t>(stack_.ip_.max_l4_payload() - TcpHeader::kMinSize);
    o.has_window_scale = ws_ok_;
    o.window_scale = rcv_wscale_;
    o.has_timestamps = ts_ok_;
  } else if (!(flags & kRst)) {
    o.has_timestamps = ts_ok_;
  }
  if (syn) o.sack_permitted = sack_ok_;  // RFC 2018 §2: only on SYN segments
  if (o.has_timestamps) {
    o.ts_val = ts_now();
    o.ts_ecr = (flags & kAck) ? ts_recent_ : 0;
  }
  if (sack_ok_ && !syn && (flags & kAck) && !(flags & kRst) && (!ooo_.empty() || dsack_pending_)) sack_fill(&o);
  h.window = (flags & kRst) ? 0 : window_field(syn);
  size_t hl = TcpHeader::kMinSize + o.wire_size();
  size_t off = seq - data_seq_;
  // Zero-copy TX: bytes of a shared buffer (a file chunk, Stream::write_shared) go by reference if the link can.
  Interface::TxPayload ext{nullptr, nullptr, len};
  if (len >= kZeroCopyMinBytes && stack_.ip_.tx_payload_by_reference()) {
    const char* at = nullptr;
    ext.buf = send_.shared_at(off, len, &at);
    ext.data = reinterpret_cast<const uint8_t*>(at);
  }
  if (ext.buf != nullptr) {
    stack_.ip_.send_ipv4(tuple_.remote, kProtoTcp, hl, [&](std::span<uint8_t> out) {
      write_tcp_header(h, o, out.data());
      stack_.ip_.fill_tcp_checksum(out, tuple_.local, tuple_.remote, {ext.data, len});
    }, stack_.now_ms(), &ext);
  } else {
    stack_.ip_.send_ipv4(tuple_.remote, kProtoTcp, hl + len, [&](std::span<uint8_t> out) {
      write_tcp_header(h, o, out.data());
      if (len > 0) send_.copy_out(off, out.data() + hl, len);
      stack_.ip_.fill_tcp_checksum(out, tuple_.local, tuple_.remote);  // pseudo-header only with TX offload
    }, stack_.now_ms());
  }
  ++stack_.stats_.segments_out;
  frto_sent(seq, len);  // F-RTO: the highest octet retransmitted since the timeout
  if (len > 0) cc_.prr_sent(static_cast<uint32_t>(len));  // RFC 6937 prr_out (counted in recovery; SACK reads it)
  if (flags & kAck) {
    last_ack_sent_ = rcv_nxt_;
    unacked_segments_ = 0;
    if (delack_timer_.armed()) stack_.timers_.cancel(delack_timer_);
  }
}

bool Tcb::cwnd_limited_round() {
  bool limited = cwnd_limited_;
  if (limited && !(snd_una_ < cwnd_limited_end_)) cwnd_limited_ = false;  // the round is over: output() decides anew
  return limited;
}

void Tcb::send_rst(SeqNum seq) {
  if (state_ == TcpState::kClosed || state_ == TcpState::kSynSent) return;
  ++stack_.stats_.rst_out;
  send_segment(seq, 0, kRst | kAck);
}

void Tcb::output() {
  switch (state_) {
    case TcpState::kEstablished:
    case TcpState::kCloseWait:
    case TcpState::kFinWait1:
    case TcpState::kClosing:
    case TcpState::kLastAck:
      break;
    default:
      return;
  }
  if (sack_ok_ && cc_.in_recovery()) {
    sack_send();  // RFC 6675: pipe, not cwnd - flight, clocks what goes out
  } else {
    if (rack_on() && rack_.any_lost() && snd_nxt_ < snd_max_) rack_retransmit_lost();  // lost in the go-back
    uint32_t peer = std::min(snd_wnd_, stack_.conf_.send_window_bytes);
    uint32_t wnd = std::min(peer, cc_.cwnd());
    // No loss marked: by RACK, or without it IsLost(SND.UNA) (RFC 6675 §5 step 2 runs only while that is false;
    // after an F-RTO undo it can hold until the next ACK starts recovery).
    if (sack_ok_ && !sb_.empty() && snd_nxt_ == snd_max_ && frto_ == Frto::kOff && !rto_recovery_ &&
        cc_.may_enter_sack_recovery(snd_una_) &&
        !(rack_on() ? rack_.any_lost() : sb_.lost_boundary(snd_una_, mss_) > snd_una_)) {
      // SACKed octets have left the network: before recovery starts (a hole RACK's reo_wnd still waits on,
      // or fewer than DupThresh duplicates) new data is clocked by cwnd - pipe, not cwnd - FlightSize (RFC 6675
      // §5 step 2; Linux's tcp_packets_in_flight), so the ACK clock runs on while a reordered segment is late.
      // Not while a timeout's recovery runs or a loss is marked (that goes first). The peer's window still
      // counts from SND.UNA.
      uint32_t flight = snd_max_ - snd_una_, pipe = sack_pipe();
      if (flight > pipe) wnd = std::min<uint64_t>(peer, static_cast<uint64_t>(cc_.cwnd()) + (flight - pipe));
    }
    while (send_next(wnd)) {
    }
    size_t unsent = send_.bytes() - std::min<size_t>(snd_nxt_ - data_seq_, send_.bytes());
    if (unsent > 0 && wnd < peer && (snd_max_ - snd_una_) + mss_ > wnd) {
      cwnd_limited_ = true;
      cwnd_limited_end_ = snd_max_;
    }
  }
  size_t sent = std::min<size_t>(snd_nxt_ - data_seq_, out_bytes());
  if (snd_wnd_ == 0 && out_bytes() > sent && !persist_timer_.armed() && snd_max_ == snd_una_) {
    persist_ms_ = persist_ms_ ? persist_ms_ : rto_ms_;
    arm(persist_timer_, persist_ms_);
  }
}

bool Tcb::send_next(uint32_t wnd) {
  if (fin_sent_ && snd_nxt_ > fin_seq()) return false;
  if (sack_ok_ && snd_nxt_ < snd_max_) {  // going back after an RTO: skip what the peer SACKed since
    SeqNum skip = std::min(sb_.sacked_end(snd_nxt_), fin_seq());
    if (snd_nxt_ < skip) snd_nxt_ = skip;
  }
  size_t offset = snd_nxt_ - data_seq_;
  size_t avail = send_.bytes() - std::min(offset, send_.bytes());  // only what the send buffer took can go
  int32_t usable = (snd_una_ + wnd) - snd_nxt_;
  size_t len = std::min<size_t>(avail, mss_);
  if (usable < static_cast<int32_t>(len)) len = usable > 0 ? static_cast<size_t>(usable) : 0;
  bool fin = fin_queued_ && offset + len == out_bytes();
  if (len == 0 && !fin) return false;
  if (!(snd_nxt_ < snd_max_) && stack_.tx_hold(*this)) return false;  // new segment, no TX room: wait (tcp_stack.hh)
  // Sender SWS avoidance (RFC 9293 §3.8.6.2.1): a window-limited runt waits unless it is half the window.
  // With nothing in flight no ACK will come to reopen it, so the runt goes (the override of §3.8.6.2.1).
  // A retransmission is never held back: after an RTO rewind the data "in flight" is the very data to resend,
  // and waiting for an ACK of it would stall until the connection is aborted.
  bool retransmission = snd_nxt_ < snd_max_;
  if (retransmission && frto_ == Frto::kStep2) return false;  // RFC 5682 §3 step 2: the timeout's ACK first
  if (len > 0 && len < mss_ && len < avail && len < max_snd_wnd_ / 2 && snd_max_ != snd_una_ && !retransmission) {
    return false;
  }
  if (!retransmission && !ts_ok_ && !timing_ && len > 0) {
    timing_ = true;
    timed_seq_ = snd_nxt_;
    timed_at_us_ = stack_.clock_.now_us();
  }
  uint8_t flags = kAck | (fin ? kFin : 0) | (len > 0 && offset + len == out_bytes() ? kPsh : 0);
  send_segment(snd_nxt_, len, flags);
  rack_sent(snd_nxt_, static_cast<uint32_t>(len) + (fin ? 1 : 0));
  if (retransmission) ++stack_.stats_.retransmits;
  snd_nxt_ += static_cast<uint32_t>(len) + (fin ? 1 : 0);
  if (fin) fin_sent_ = true;
  if (snd_nxt_ > snd_max_) snd_max_ = snd_nxt_;
  if (!rtx_timer_.armed()) arm_retransmit();
  if (sack_ok_ && !retransmission) tlp_arm();  // RFC 8985 §7.2: the PTO restarts after new data
  return true;
}

// ---------------------------------------------------------------- Stream

void Tcb::consume(size_t n) {
  in_.consume(n);
  if (state_ != TcpState::kEstablished && state_ != TcpState::kFinWait1 && state_ != TcpState::kFinWait2) return;
  // Window update when the right edge can move by a useful amount (half the buffer, or two segments).
  int32_t grow = (rcv_nxt_ + rcv_space()) - rcv_adv_;
  uint32_t threshold = std::min<uint32_t>(recv_limit_ / 2, 2u * mss_);
  if (grow >= static_cast<int32_t>(threshold)) send_ack();
}

void Tcb::resume_reading() {
  paused_ = false;
  if (!in_.empty()) arm(notify_timer_, 0);
}

void Tcb::notify_readable() {
  if (paused_ || closing_ || handler_ == nullptr || in_.empty()) return;
  handler_->on_readable(*this);
}

void Tcb::close(Close how) {
  if (closing_) return;
  closing_ = true;
  bool unread = !in_.empty();
  in_.clear();
  ooo_.clear();
  ooo_bytes_ = 0;
  update_memory();
  // net::Stream: kAbort resets only a connection with unread input; otherwise the pending output (not taken
  // by the send buffer) is dropped and a FIN follows what was taken (as the kernel backend drops what it has
  // not handed to the kernel, whose close() still sends its socket buffer).
  if ((how == Close::kAbort && unread) || state_ == TcpState::kSynSent || state_ == TcpState::kSynReceived) {
    send_rst(snd_nxt_);
    terminate(0);
    return;
  }
  if (how == Close::kAbort) drop_unsent();
  if (state_ == TcpState::kEstablished) {
    enter(TcpState::kFinWait1);
  } else if (state_ == TcpState::kCloseWait) {
    enter(TcpState::kLastAck);
  } else {
    return;
  }
  fin_queued_ = true;
  arm(linger_timer_, stack_.conf_.lingering_time_ms);
  output();
}

// ---------------------------------------------------------------- endings

void Tcb::enter(TcpState s) {
  state_ = s;
  if (s == TcpState::kEstablished && ka_idle_ms_ != 0) {
    last_heard_ms_ = stack_.now_ms();
    arm(keepalive_timer_, ka_idle_ms_);
  }
}

void Tcb::enter_time_wait() {
  if (stack_.stats_.time_wait >= stack_.conf_.max_time_wait) {  // Linux tcp_max_tw_buckets: no TIME-WAIT
    ++stack_.stats_.time_wait_overflow;
    terminate(0);
    return;
  }
  enter(TcpState::kTimeWait);
  for (TcbTimer* t : {&rtx_timer_, &delack_timer_, &persist_timer_, &linger_timer_, &notify_timer_,
                      &keepalive_timer_, &release_timer_, &tlp_timer_, &rack_timer_}) {
    if (t->armed()) stack_.timers_.cancel(*t);
  }
  free_buffers();
  ++stack_.stats_.time_wait;
  arm(tw_timer_, stack_.conf_.time_wait_ms);
  notify_closed(0);
}

void Tcb::notify_closed(int error) {
  if (closed_notified_) return;
  closed_notified_ = true;
  stack_.stream_closed(*this);
  net::StreamHandler* h = handler_;
  handler_ = nullptr;
  if (h != nullptr) h->on_closed(*this, error);
}

void Tcb::terminate(int error) {
  if (state_ == TcpState::kClosed) return;
  if (state_ == TcpState::kTimeWait) --stack_.stats_.time_wait;
  enter(TcpState::kClosed);
  for (TcbTimer* t : {&rtx_timer_, &delack_timer_, &persist_timer_, &tw_timer_, &linger_timer_, &notify_timer_,
                      &keepalive_timer_, &release_timer_, &tlp_timer_, &rack_timer_}) {
    if (t->armed()) stack_.timers_.cancel(*t);
  }
  notify_closed(error);
  stack_.remove(*this);
}

}  // namespace kosoku::tcpip
