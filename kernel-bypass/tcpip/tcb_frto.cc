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
// Step 3, the next ACK. "Originals" are octets in [frto_rtx_high_, recover): below "recover" and above the
//   highest octet retransmitted since the timeout (the go-back's, RACK's or SACK recovery's, a probe's:
//   send_segment → frto_sent), so never retransmitted since it (Linux: not TCPCB_EVER_RETRANS, below
//   high_seq → FLAG_ORIG_SACK_ACKED; RFC 4138 Appendix B, the SACK variant RFC 5682 §3 took over, asks for
//   the ACK of a segment below RecoveryPoint that was not retransmitted). An ACK "newly acknowledges an
//   original" when the originals acknowledged cumulatively or by SACK grew with it (frto_originals; a
//   cumulative ACK of octets SACKed before adds none).
//   - spurious (3b): the ACK newly acknowledges an original, unless (SACK) a block reaches above "recover"
//     while SND.UNA is still below it (the new segments arrived, something older is missing: real, as the
//     RFC). A cumulative ACK at or past "recover" with an original among its newly acknowledged octets is
//     spurious too — the stretch ACK after a delay spike, every original arrived and only the go-back's
//     first segment was resent (Linux tcp_process_loss and RFC 5682 §2's basic rule undo there; aa3cd6c
//     called it real with SACK).
//   - real (3a): a duplicate ACK (one that newly SACKs only retransmitted octets included), the SACK case
//     above, or SND.UNA at/past "recover" with no original newly acknowledged (all of it was resent): cwnd =
//     3·SMSS (CongestionControl::frto_real_timeout) and the go-back resumes from SND.UNA below "recover".
//   - neither (a window update, or an ACK that advances over retransmitted octets only): wait for the next.
//   Basic mode uses the same rule without SACK blocks: SND.UNA passing frto_rtx_high_ is spurious, a
//   duplicate ACK real (the go-back stopped at step 2b, so that is RFC 5682 §2's "advances SND.UNA").
//   - the spurious response: undo_spurious_rto (RFC 4015 §2: ssthresh back, cwnd = FlightSize +
//     min(bytes_acked, IW), CUBIC's state as before the timeout, RACK's lost marks withdrawn, SND.NXT =
//     SND.MAX), "recover" = SND.UNA, the tail loss probe re-armed (this ACK's tlp_arm ran while the timeout's
//     recovery still forbade it); counted in TcpStats::spurious_rtos and frto_spurious_rtos.
// The scoreboard is cleared at the timeout for the go-back (RFC 2018 §8 / RFC 6675 §5.1, tcb_sack.cc), so a
// range the peer SACKed before it and re-reports only in step 3 (a SACK option carries 3-4 blocks: with more
// holes the older ranges come back now and then, e.g. after a D-SACK) would look newly SACKed.
// sack_on_timeout therefore moves the ranges into frto_sacked_ before clearing, and frto_originals leaves
// those octets out (Linux keeps its SACKed marks across the timeout unless the peer reneged, and
// FLAG_ORIG_SACK_ACKED counts only octets newly SACKed or acknowledged): an octet known to have arrived before
// the timeout says nothing about it. A peer that reneged on such a range can return it only through a
// retransmission, which frto_rtx_high_ already excludes. The copy is freed when F-RTO decides or does not run.
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

void Tcb::frto_on_timeout(bool fresh, bool fast_recovery) {
  if (!stack_.conf_.frto || ts_ok_) {  // off, or Eifel's (RFC 3522) connection
    frto_sacked_ = SackScoreboard{};
    return;
  }
  bool repeated = rto_recovery_ && snd_una_ < frto_recover_;  // §2/§3 step 1: already in RTO recovery
  frto_recover_ = snd_max_;
  rto_recovery_ = true;
  bool retransmitted = snd_nxt_ > snd_una_;
  frto_ = fresh && !fast_recovery && !repeated && retransmitted ? Frto::kStep2 : Frto::kOff;
  if (frto_ == Frto::kOff) frto_sacked_ = SackScoreboard{};  // sack_on_timeout's copy: not needed
  frto_rtx_end_ = snd_nxt_;
  frto_rtx_high_ = retransmitted ? snd_nxt_ : snd_una_;  // the go-back's segment; later ones in frto_sent
}

Tcb::FrtoAck Tcb::frto_ack_before(bool advanced, bool dup) const {
  FrtoAck a{advanced, dup, snd_una_, frto_rtx_high_, 0};
  if (frto_ == Frto::kStep3) a.originals_before = frto_originals(frto_rtx_high_);
  return a;
}

uint32_t Tcb::frto_acked(SeqNum lo, SeqNum hi) const {
  if (!(lo < hi)) return 0;
  uint32_t n = 0;
  if (lo < snd_una_) {  // acknowledged cumulatively
    SeqNum top = std::min(snd_una_, hi);
    n = top - lo;
    lo = top;
  }
  return sack_ok_ ? n + sb_.sacked_in(lo, hi) : n;  // SACKed above SND.UNA
}

uint32_t Tcb::frto_originals(SeqNum rtx_high) const {
  SeqNum lo = rtx_high, hi = frto_recover_;
  uint32_t n = frto_acked(lo, hi);
  // Less what the peer had SACKed before the timeout: acknowledged again now, cumulatively or in a block
  // re-reported after the scoreboard was cleared, it was no news (the ranges are disjoint: no underflow).
  for (const SackBlock& r : frto_sacked_.blocks()) n -= frto_acked(std::max(r.left, lo), std::min(r.right, hi));
  return n;
}

void Tcb::frto_on_ack(const TcpSegment& seg, const FrtoAck& a) {
  if (!(snd_una_ < frto_recover_)) rto_recovery_ = false;  // the timeout's recovery is over
  if (frto_ == Frto::kStep2) {
    if (!a.advanced) {
      if (a.dup && !sack_ok_) frto_ = Frto::kOff;  // §2 step 2a; §3 step 2 waits
    } else if (!(snd_una_ < frto_recover_) || snd_una_ < frto_rtx_end_) {  // step 2a
      frto_ = Frto::kOff;
    } else {
      frto_ = frto_send_new() ? Frto::kStep3 : Frto::kOff;  // step 2b
    }
    if (frto_ == Frto::kOff) frto_sacked_ = SackScoreboard{};
    return;
  }
  if (frto_ != Frto::kStep3) return;
  bool below = snd_una_ < frto_recover_;
  bool sack_above = false;
  for (uint8_t i = 0; sack_ok_ && i < seg.options.sack_count; ++i) {
    sack_above = sack_above || seg.options.sack[i].right > frto_recover_;
  }
  bool older_missing = below && sack_above;
  bool spurious = frto_originals(a.rtx_high) > a.originals_before && !older_missing;
  bool real = !spurious && (older_missing || a.dup || !below);
  if (!spurious && !real) return;  // no original newly acknowledged, no duplicate: wait for the next ACK
  frto_ = Frto::kOff;
  frto_sacked_ = SackScoreboard{};
  if (spurious) {  // step 3b
    frto_recover_ = snd_una_;
    rto_recovery_ = false;
    undo_spurious_rto(snd_max_ - snd_una_, snd_una_ - a.una);
    rack_.forget_rack_segment();  // without timestamps RACK took the retransmission's ACK for its own
    tlp_arm();                    // cancelled earlier in this ACK (the timeout's recovery ran): PTO again
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
