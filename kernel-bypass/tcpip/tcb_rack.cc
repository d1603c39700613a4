// Tcb: RACK loss detection (RFC 8985 §6), with SACK: the glue between the transmission record (rack.hh) and
// RFC 6675 recovery (tcb_sack.cc).
//   - Every segment sent (new data, go-back, NextSeg() retransmissions, probes) is recorded with its time.
//   - Each ACK: the record learns what was delivered (cumulative and SACK), then marks as lost what was sent
//     before the most recently sent delivered segment and more than RACK.rtt + reo_wnd ago. A segment still
//     inside reo_wnd arms the reordering timer for the rest.
//   - Fast recovery starts on RACK's first mark; in recovery NextSeg() rule 1 takes RACK's marks, so a lost
//     retransmission is sent again after about one RTT instead of an RTO; outside fast recovery (an RTO's
//     go-back) marked retransmissions below SND.NXT are resent first.
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

bool Tcb::rack_on() const { return sack_ok_ && stack_.conf_.rack; }

void Tcb::rack_sent(SeqNum seq, uint32_t len) {
  if (!rack_on() || len == 0) return;
  rack_.on_transmit(seq, seq + len, stack_.clock_.now_us());
}

void Tcb::rack_ack(const TcpSegment& seg, bool dsack) {
  std::span<const SackBlock> blocks{seg.options.sack, seg.options.sack_count};
  std::optional<uint32_t> echo;
  if (ts_ok_ && seg.options.has_timestamps && seg.options.ts_ecr != 0) echo = seg.options.ts_ecr - ts_offset_;
  rack_.on_ack(snd_una_, snd_max_, blocks, sb_, dsack, stack_.clock_.now_us(), echo);
  rack_detect();
}

void Tcb::rack_detect() {
  bool recovering = cc_.in_recovery() || !cc_.may_enter_sack_recovery(snd_una_);
  Rack::AckResult r = rack_.detect_loss(stack_.clock_.now_us(), recovering, srtt_us());
  stack_.stats_.rack_lost += r.newly_lost;
  stack_.stats_.lost_retransmits += r.lost_retransmissions;
  if (r.timer_us > 0) {
    arm(rack_timer_, std::max<uint64_t>(1, (r.timer_us + 999) / 1000));
  } else if (rack_timer_.armed()) {
    stack_.timers_.cancel(rack_timer_);
  }
}

void Tcb::on_rack_timer() {
  if (!rack_on() || state_ == TcpState::kClosed || state_ == TcpState::kTimeWait || snd_una_ == snd_max_) return;
  rack_detect();
  if (!rack_.any_lost()) return;
  if (sack_maybe_enter_recovery()) return;
  // In PRR recovery the quota was set by the last ACK: the marks just lowered the pipe, so recompute it
  // (no octets delivered; below ssthresh the reduction bound lets one SMSS go) rather than wait for an ACK.
  if (cc_.prr_active()) cc_.prr_ack(0, sack_pipe());
  output();
}

void Tcb::rack_retransmit_lost() {
  SackBlock hole;
  for (unsigned guard = 0; guard < 4096 && rack_.pipe() + mss_ <= cc_.cwnd(); ++guard) {
    if (!rack_.first_lost(snd_una_, &hole) || !(hole.left < snd_nxt_)) return;
    SeqNum end = std::min(hole.right, snd_nxt_);
    if (!sack_retransmit(hole.left, std::min<uint32_t>(mss_, static_cast<uint32_t>(end - hole.left)))) return;
  }
}

}  // namespace kosoku::tcpip
