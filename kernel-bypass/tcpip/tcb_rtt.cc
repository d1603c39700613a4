// Tcb: round-trip time (RFC 6298, in µs) and the undo of a spurious retransmission timeout (RFC 3522 / RFC 4015).
//   - One sample per ACK of new data (rtt_on_ack): from RACK's transmission record when it has an unambiguous
//     one (the oldest newly acknowledged segment sent once and not SACKed before, Karn's rule as Linux's
//     first_ackt), else the timestamp echo (RFC 7323 §4, ms), else the one timed segment (no timestamps, no SACK).
//   - SRTT/RTTVAR in µs (a ms estimator rounds a sub-millisecond path to 0); the RTO in ms for the timer wheel,
//     RTO = SRTT + max(G, 4·RTTVAR), G = 1 ms, clamped to [rto_min, rto_max].
//   - A first timeout that reduced the window records the TSval its retransmission carries; if the first ACK
//     of new data after it echoes an older one, the original was delivered and undo_spurious_rto() takes the
//     reduction back (RFC 4015 §2: ssthresh restored, cwnd = FlightSize + min(bytes_acked, IW)) and ends
//     the go-back (on_retransmit_timer and process_ack in tcb.cc call in here).
//     Without timestamps F-RTO (RFC 5682, tcb_frto.cc) decides instead and undoes through the same function.
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

void Tcb::rtt_on_ack(const TcpSegment& seg, SeqNum ack) {
  uint64_t now_us = stack_.clock_.now_us();
  uint64_t xmit_us = 0;
  bool timed = timing_ && ack > timed_seq_;
  if (timed) timing_ = false;
  if (rack_on() && rack_.first_sent_once_below(ack, &xmit_us)) {
    rtt_sample(now_us > xmit_us ? now_us - xmit_us : 0);
  } else if (ts_ok_ && seg.options.has_timestamps && seg.options.ts_ecr != 0) {
    rtt_sample(std::max<uint64_t>(ts_now() - seg.options.ts_ecr, 1) * 1000);
  } else if (timed) {
    rtt_sample(now_us > timed_at_us_ ? now_us - timed_at_us_ : 0);
  }
}

void Tcb::rtt_sample(uint64_t r) {
  if (r > 60'000'000) return;  // a wild timestamp echo
  if (!have_rtt_) {
    srtt_us_ = r;
    rttvar_us_ = r / 2;
    have_rtt_ = true;
  } else {
    uint64_t diff = srtt_us_ > r ? srtt_us_ - r : r - srtt_us_;
    rttvar_us_ = (3 * rttvar_us_ + diff) / 4;
    srtt_us_ = (7 * srtt_us_ + r) / 8;
  }
  const TcpConfig& c = stack_.conf_;
  uint64_t rto_us = srtt_us_ + std::max<uint64_t>(1000, 4 * rttvar_us_);
  rto_ms_ = std::clamp<uint64_t>((rto_us + 999) / 1000, c.rto_min_ms, c.rto_max_ms);
}

void Tcb::undo_spurious_rto(uint32_t flight, uint32_t bytes_acked) {
  cc_.undo_timeout(flight, bytes_acked);
  if (rack_on()) rack_.undo_rto();
  if (snd_nxt_ < snd_max_) {  // the go-back stops: the originals were in flight, not lost
    snd_nxt_ = snd_max_;
    if (fin_queued_ && snd_max_ > fin_seq()) fin_sent_ = true;  // a FIN sent before the timeout counts again
  }
  ++stack_.stats_.spurious_rtos;
}

}  // namespace kosoku::tcpip
