// Tcb: F-RTO (RFC 5682), detection of spurious retransmission timeouts on connections without timestamps
// (those with timestamps use RFC 3522 in tcb_rtt.cc; the two never run on one connection). With SACK the
// SACK-enhanced algorithm (§3), without it the basic one (§2). TcpConfig::frto turns it off (Linux tcp_frto).
//
// Step 1 (on_retransmit_timer → frto_on_timeout): the timeout retransmitted the first unacknowledged segment
//   (the go-back's first segment, cwnd = 1 SMSS). F-RTO watches the next ACKs only when this timeout reduced
//   the window (a first timeout), no fast recovery ran (§3.1 step 1: retransmissions of a recovery already
//   underway could make it call a real timeout spurious; applied to NewReno too), and the timer did not fire
//   again inside the recovery of an earlier timeout ("recover" ≥ SND.UNA). "recover" = SND.MAX at the timeout.
//   A zero peer window that let nothing be retransmitted: no F-RTO.
// Step 2, the first ACK after it:
//   - a duplicate ACK: basic (2a) goes on with the conventional recovery; SACK (§3 step 2) only takes its
//     blocks and waits for the ACK of the retransmission (send_next sends no go-back retransmission in step
//     2, e.g. for RFC 3042 limited transmit; new data may go). An ACK that neither advances SND.UNA nor is a
//     duplicate (a window update, data) is not counted (as Linux: RFC 5682 has no case for it).
//   - SND.UNA reached "recover" (everything before the timeout arrived: ambiguous), or short of the end of the
//     retransmission (2a; also taken for SACK, where the go-back would resume on it): conventional recovery.
//   - else (2b) up to two new, never sent segments go out instead of the go-back, bounded by the peer's window
//     and the send buffer, not by cwnd (§2: the ACK allows two segments; F-RTO only picks other ones). Nothing
//     new to send (no data taken, FIN already sent, zero or too small a window, TX backpressure holding new
//     segments): the RFC's recommended action, the conventional recovery (the go-back resumes).
// Step 3, the next ACK:
//   - basic: SND.UNA advances: it acknowledges data never retransmitted (3b): spurious. A duplicate ACK (3a):
//     the timeout was real.
//   - SACK: the cumulative ACK or a SACK block reaches above "recover" (the new segments arrived, something
//     older is missing), or a duplicate ACK that newly SACKs nothing (3a): real. Octets below "recover"
//     acknowledged for the first time, cumulatively or by SACK, with nothing above it (3b): spurious.
//   - real (3a): cwnd = 3·SMSS (CongestionControl::frto_real_timeout) and the go-back resumes from SND.UNA
//     when it is below "recover".
//   - spurious (3b): RFC 4015's response through the timestamp path's undo (undo_spurious_rto: cwnd, ssthresh
//     and CUBIC's state as before the timeout, RACK's lost marks withdrawn, SND.NXT = SND.MAX), "recover" =
//     SND.UNA; counted in TcpStats::spurious_rtos and frto_spurious_rtos.
// The scoreboard is cleared at the timeout (tcb_sack.cc), so in step 3 "SACKed for the first time" means
// since step 2's ACKs, which re-report up to 3-4 ranges: a range the peer reported before the timeout and
// again only in step 3 would look new.
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

void Tcb::frto_on_timeout(bool fresh, bool fast_recovery) {
  if (!stack_.conf_.frto || ts_ok_) return;  // off, or Eifel's (RFC 3522) connection
  bool repeated = rto_recovery_ && snd_una_ < frto_recover_;  // §2/§3 step 1: already in RTO recovery
  frto_recover_ = snd_max_;
  rto_recovery_ = true;
  bool retransmitted = snd_nxt_ > snd_una_;
  frto_ = fresh && !fast_recovery && !repeated && retransmitted ? Frto::kStep2 : Frto::kOff;
  frto_rtx_end_ = snd_nxt_;
}

void Tcb::frto_on_ack(const TcpSegment& seg, const FrtoAck& a) {
  if (!(snd_una_ < frto_recover_)) rto_recovery_ = false;  // the timeout's recovery is over
  if (frto_ == Frto::kStep2) {
    if (!a.advanced) {
      if (a.dup && !sack_ok_) frto_ = Frto::kOff;  // §2 step 2a; §3 step 2 waits
      return;
    }
    if (!(snd_una_ < frto_recover_) || snd_una_ < frto_rtx_end_) {  // step 2a
      frto_ = Frto::kOff;
      return;
    }
    frto_ = frto_send_new() ? Frto::kStep3 : Frto::kOff;  // step 2b
    return;
  }
  if (frto_ != Frto::kStep3) return;
  bool spurious = false, real = false;
  if (sack_ok_) {
    bool above = snd_una_ > frto_recover_;
    for (uint8_t i = 0; i < seg.options.sack_count; ++i) above = above || seg.options.sack[i].right > frto_recover_;
    bool newly = a.advanced || sb_.sacked_bytes() > a.sacked_before;
    real = above || (a.dup && !newly);
    spurious = !above && newly;
  } else {
    real = a.dup;
    spurious = a.advanced;
  }
  if (!spurious && !real) return;  // neither new data nor a duplicate: wait for the next ACK
  frto_ = Frto::kOff;
  if (spurious) {  // step 3b
    frto_recover_ = snd_una_;
    rto_recovery_ = false;
    undo_spurious_rto();
    rack_.forget_rack_segment();  // without timestamps RACK took the retransmission's ACK for its own
    ++stack_.stats_.frto_spurious_rtos;
    return;
  }
  cc_.frto_real_timeout();  // step 3a
  if (snd_una_ < frto_recover_) {
    snd_nxt_ = snd_una_;  // go back again: retransmit what is unacknowledged, in slow start
    if (fin_sent_ && snd_nxt_ <= fin_seq()) fin_sent_ = false;
  }
}

bool Tcb::frto_send_new() {
  SeqNum go_back = snd_nxt_;
  bool fin_was_sent = fin_sent_;
  snd_nxt_ = snd_max_;
  if (fin_queued_ && snd_max_ > fin_seq()) fin_sent_ = true;  // a FIN sent before the timeout is no new data
  uint32_t peer = std::min(snd_wnd_, stack_.conf_.send_window_bytes);
  uint32_t wnd = std::min<uint32_t>(peer, (snd_max_ - snd_una_) + 2u * mss_);
  unsigned sent = 0;
  while (sent < 2 && send_next(wnd)) ++sent;
  if (sent > 0) return true;
  snd_nxt_ = go_back;
  fin_sent_ = fin_was_sent;
  return false;
}

}  // namespace kosoku::tcpip
