// Tcb: Tail Loss Probe (RFC 8985 §7), with SACK only.
//
// A tail loss (the last segments of a flight, or the whole flight) produces no duplicate ACKs, so RFC 6675
// cannot see it and only the RTO (≥ rto_min_ms, 200 ms) would recover it. TLP sends one probe after a probe
// timeout PTO ≈ 2·SRTT instead; its ACK, SACKing the probe, shows the holes below as lost, and RFC 6675
// recovery repairs them (tcb_sack.cc, entry condition `tlp_shows_loss()`).
//   - §7.2 PTO = 2·SRTT (1 s before any sample), + WCDelAckT = 200 ms when one segment is in flight (the peer
//     may delay that ACK), at least kTlpMinMs, and never after the RTO (then 1 ms before it).
//   - Re-armed after each new data segment sent and by each ACK that advances SND.UNA; cancelled
//     in recovery (fast or RTO: until SND.UNA reaches RecoveryPoint) and once nothing is outstanding.
//   - §7.3 the probe: new data when the peer's window and the send buffer allow (cwnd is not checked) — two
//     segments when there are, so the peer ACKs at once (below) — else the highest-sequence unacknowledged
//     segment again. One probe per episode: the next one only after
//     SND.UNA passes the probe's data end. The RTO is restarted after the probe.
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

using namespace tcp_flag;

namespace {
constexpr uint64_t kWcDelAckMs = 200;  // RFC 8985 §7.2 WCDelAckT
constexpr uint64_t kTlpMinMs = 2;     // floor on the PTO: two 1 ms timer ticks, as Linux's 2·SRTT + 2 jiffies
                                       // (a 10 ms floor cost tap links with 50 µs RTTs most of their time)
constexpr uint64_t kNoRttPtoMs = 1000; // §7.2: PTO = 1 s without an RTT sample
}  // namespace

bool Tcb::tlp_allowed() const {
  bool open = state_ == TcpState::kEstablished || state_ == TcpState::kCloseWait ||
              state_ == TcpState::kFinWait1 || state_ == TcpState::kClosing || state_ == TcpState::kLastAck;
  // Not in recovery: fast (RFC 6675) or after an RTO (until SND.UNA reaches RecoveryPoint, with no go-back).
  return open && sack_ok_ && stack_.conf_.tail_loss_probe && !tlp_sent_ && snd_max_ > snd_una_ &&
         snd_nxt_ == snd_max_ && cc_.may_enter_sack_recovery(snd_una_);
}

void Tcb::tlp_arm() {
  if (tlp_sent_ && snd_una_ >= tlp_high_) tlp_sent_ = false;  // the previous episode is over
  bool eligible = tlp_allowed();
  uint64_t pto = have_rtt_ ? (2 * srtt_us_ + 999) / 1000 : kNoRttPtoMs;
  if (snd_max_ - snd_una_ <= mss_) pto += kWcDelAckMs;
  pto = std::max(pto, kTlpMinMs);
  uint64_t deadline = stack_.now_ms() + pto;
  // §7.2: the PTO never runs past the RTO. The two are separate timers here, so a capped probe goes 1 ms
  // before the RTO would (it then restarts the RTO); with no such room the RTO stays in charge.
  if (rtx_timer_.armed() && deadline >= rtx_timer_.deadline_ms()) {
    uint64_t rto_at = rtx_timer_.deadline_ms();
    if (rto_at > stack_.now_ms() + 1) {
      deadline = rto_at - 1;
    } else {
      eligible = false;
    }
  }
  if (!eligible) {
    if (tlp_timer_.armed()) stack_.timers_.cancel(tlp_timer_);
    return;
  }
  stack_.timers_.arm(tlp_timer_, deadline);
}

void Tcb::on_tlp_timer() {
  if (!tlp_allowed()) return;
  // §7.3: new data if the receive window and the send buffer allow (cwnd is not checked), else the
  // highest-sequence segment not acknowledged (SACKed data is skipped).
  uint32_t wnd = std::min(snd_wnd_, stack_.conf_.send_window_bytes);
  bool sent = send_next(wnd);
  // A second new segment when there is one: a lone new segment meets the peer's delayed ACK (Linux: 40 ms)
  // whenever the probe went because the peer's last ACK was lost rather than the data (it had acknowledged
  // everything before); two full segments draw an immediate ACK (RFC 5681 §4.2, every second segment). Linux's
  // probe is one skb, often several segments with TSO.
  if (sent) send_next(wnd);
  if (!sent) {
    SeqNum end = sb_.highest_unsacked_end(snd_una_, snd_max_);
    if (!(snd_una_ < end)) return;
    SeqNum start = std::max(snd_una_, end - mss_);
    sack_retransmit(start, static_cast<uint32_t>(end - start));
  }
  ++stack_.stats_.tlp_probes;
  tlp_sent_ = true;
  if (tlp_timer_.armed()) stack_.timers_.cancel(tlp_timer_);  // send_next re-armed it
  tlp_high_ = fin_sent_ ? std::min(snd_max_, fin_seq()) : snd_max_;
  arm_retransmit();  // §7.3: the RTO restarts after the probe
}

bool Tcb::tlp_shows_loss() const {
  return tlp_sent_ && !sb_.empty() && sb_.highest_sacked() >= tlp_high_ && snd_una_ < tlp_high_;
}

}  // namespace kosoku::tcpip
