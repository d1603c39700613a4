// Tcb: SACK (RFC 2018) blocks as receiver, and RFC 6675 SACK-based loss recovery as sender.
//
// Sender, per ACK (sack_ack, called by process_ack after the cumulative part):
//   1. SND.UNA moved: the scoreboard drops what is now cumulatively acknowledged. If the octet at SND.UNA is
//      still marked SACKed the peer reneged (RFC 2018 §8: it discarded data it had SACKed): count it and
//      forget every SACKed bit; the retransmission timer recovers whatever is missing.
//   2. Update() with the ACK's blocks. An ACK at SND.UNA that newly SACKs octets is a duplicate (RFC 6675 §2).
//   3. Not in recovery, and DupAcks ≥ DupThresh or IsLost(SND.UNA): enter recovery (§5 step 4):
//      RecoveryPoint = HighData, ssthresh = FlightSize / 2 (cwnd follows by PRR), retransmit the first segment. Before
//      that, each of the first two duplicates may send one new segment (limited transmit, RFC 3042).
//   4. In recovery: while PRR's quota for this ACK lasts (RFC 6937, congestion.hh; without PRR: while
//      cwnd - pipe ≥ SMSS), send NextSeg(): rule 1 the first lost hole above HighRxt,
//      rule 2 new data, rule 3 any hole below the highest SACK, rule 4 one rescue retransmission of the
//      highest unSACKed segment. A cumulative ACK at RecoveryPoint ends recovery.
// An RTO ends recovery, clears the scoreboard (RFC 2018 §8; F-RTO keeps the old ranges, tcb_frto.cc) and
// sets RecoveryPoint = HighData; no new recovery starts before SND.UNA reaches it (§5.1). Blocks that arrive
// after the RTO are used again: the go-back retransmission skips octets SACKed since (send_next).
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

using namespace tcp_flag;

// ---------------------------------------------------------------- receiver

namespace {
// Calls f(SackBlock) for each range of touching/overlapping segments of the sorted out-of-order queue, in
// ascending order, until f returns false.
template <typename Segments, typename F>
void merged_ranges(const Segments& q, F f) {
  size_t i = 0;
  while (i < q.size()) {
    SeqNum left = q[i].seq;
    SeqNum right = left + static_cast<uint32_t>(q[i].data.size());
    size_t j = i + 1;
    for (; j < q.size() && q[j].seq <= right; ++j) {
      right = std::max(right, q[j].seq + static_cast<uint32_t>(q[j].data.size()));
    }
    if (left < right && !f(SackBlock{left, right})) return;
    i = j;
  }
}
}  // namespace

bool Tcb::ooo_range(SeqNum anchor, SackBlock* out) const {
  bool found = false;
  merged_ranges(ooo_, [&](const SackBlock& r) {
    if (r.left <= anchor && anchor < r.right) {
      *out = r;
      found = true;
    }
    return !found && r.left <= anchor;
  });
  return found;
}

void Tcb::sack_note_ooo(SeqNum seq) {
  SackBlock fresh;
  if (!ooo_range(seq, &fresh)) return;
  // Move to front; drop remembered octets that now fall in the same (merged) block.
  uint8_t n = 0;
  SeqNum keep[TcpOptions::kMaxSackBlocks];
  keep[n++] = seq;
  for (uint8_t i = 0; i < sack_recent_count_ && n < TcpOptions::kMaxSackBlocks; ++i) {
    SeqNum a = sack_recent_[i];
    if (fresh.left <= a && a < fresh.right) continue;
    keep[n++] = a;
  }
  std::copy(keep, keep + n, sack_recent_);
  sack_recent_count_ = n;
}

void Tcb::note_dsack(SeqNum seq, size_t len) {
  SeqNum end = seq + static_cast<uint32_t>(len);
  SackBlock dup{seq, seq};
  if (seq < rcv_nxt_) {
    // The duplicate part is what lies below RCV.NXT (a segment may also carry new octets after it).
    if (rcv_nxt_ - seq > (1 << 30)) return;  // not a sane distance below RCV.NXT
    dup.right = std::min(end, rcv_nxt_);
  } else {
    // RFC 2883 §4: the first stretch of it the out-of-order queue holds (touching queue entries count as
    // one, as in the SACK blocks); later stretches go unreported, one D-SACK block per ACK.
    merged_ranges(ooo_, [&](const SackBlock& r) {
      if (r.right <= seq) return true;  // wholly before the segment
      if (r.left < end) dup = SackBlock{std::max(seq, r.left), std::min(end, r.right)};
      return false;
    });
  }
  if (!(dup.left < dup.right)) return;
  dsack_ = dup;
  dsack_pending_ = true;
  // A duplicate counts as a received, unacknowledged segment: every caller ACKs at once (a pure duplicate,
  // out-of-order or out-of-window data), except a segment with new octets after its duplicate part; its
  // in-order path then reaches its every-second-segment rule and ACKs at once too instead of arming the
  // delayed ACK, so the D-SACK reaches the sender without delay (RFC 5681 §4.2, RFC 2883 §4).
  ++unacked_segments_;
}

void Tcb::sack_fill(TcpOptions* o) {
  if (dsack_pending_) {  // RFC 2883 §4: the duplicate range first, once
    o->sack[o->sack_count++] = dsack_;
    dsack_pending_ = false;
    // A duplicate above RCV.NXT: the queued block that holds it comes second (RFC 2883 §4 and its examples),
    // which is how the sender tells it from an ordinary block.
    SackBlock held;
    if (rcv_nxt_ <= dsack_.left && ooo_range(dsack_.left, &held)) o->sack[o->sack_count++] = held;
  }
  uint8_t kept = 0;
  for (uint8_t i = 0; i < sack_recent_count_; ++i) {
    SeqNum a = sack_recent_[i];
    SackBlock b;
    if (a < rcv_nxt_ || !ooo_range(a, &b)) continue;  // delivered since, or gone (reneged after close)
    bool dup = false;
    for (uint8_t k = 0; k < o->sack_count; ++k) dup = dup || o->sack[k] == b;
    if (dup) continue;
    sack_recent_[kept++] = a;
    if (o->sack_count < TcpOptions::kMaxSackBlocks) o->sack[o->sack_count++] = b;  // a D-SACK took a slot
  }
  sack_recent_count_ = kept;
  // Slots left (more holes than were ever remembered): the highest ranges of the queue, from the top.
  if (o->sack_count < TcpOptions::kMaxSackBlocks) {
    SackBlock top[TcpOptions::kMaxSackBlocks];
    size_t n = 0;  // ring of the last ranges of the queue
    merged_ranges(ooo_, [&](const SackBlock& r) {
      if (rcv_nxt_ <= r.left) top[n++ % TcpOptions::kMaxSackBlocks] = r;
      return true;
    });
    size_t have = std::min(n, TcpOptions::kMaxSackBlocks);
    for (size_t k = 0; k < have && o->sack_count < TcpOptions::kMaxSackBlocks; ++k) {
      const SackBlock& b = top[(n - 1 - k) % TcpOptions::kMaxSackBlocks];
      bool dup = false;
      for (uint8_t m = 0; m < o->sack_count; ++m) dup = dup || o->sack[m] == b;
      if (!dup) o->sack[o->sack_count++] = b;
    }
  }
  if (o->sack_count > 0) ++stack_.stats_.sack_blocks_out;
}

// ---------------------------------------------------------------- sender

uint32_t Tcb::sack_pipe() const {
  return rack_on() ? rack_.pipe() : sb_.pipe(snd_una_, snd_max_, high_rxt_, mss_);
}

void Tcb::sack_ack(const TcpSegment& seg, bool advanced, uint32_t acked, bool dup_candidate) {
  // RFC 6937 DeliveredData: SND.UNA's advance plus the change in SACKed octets (negative when the cumulative
  // ACK swallowed SACKed ranges). Computed only when recovery runs or may start on this ACK.
  bool prr_watch = cc_.prr_active() || seg.options.sack_count > 0;
  uint32_t sacked_before = prr_watch ? sb_.sacked_bytes() : 0;
  if (advanced) {
    sb_.advance(snd_una_);
    if (high_rxt_ < snd_una_) high_rxt_ = snd_una_;
    if (sb_.sacked(snd_una_)) {  // RFC 2018 §8: the peer dropped data it had SACKed
      ++stack_.stats_.sack_reneging;
      sb_.clear();
      rack_.forget_sacks();
    }
  }
  uint32_t newly = sb_.update(snd_una_, snd_max_, {seg.options.sack, seg.options.sack_count});
  // RFC 2883 §4: a D-SACK is the first block, below the cumulative ACK or inside the second block.
  const SackBlock* b = seg.options.sack;
  bool dsack = seg.options.sack_count > 0 &&
               (b[0].left < seg.header.ack ||
                (seg.options.sack_count > 1 && b[1].left <= b[0].left && b[0].right <= b[1].right));
  if (dsack) {
    ++stack_.stats_.dsacks_in;
    dsack_undo(b[0]);
  }
  if (rack_on()) rack_ack(seg, dsack);
  if (advanced) {
    if (cc_.in_recovery()) {
      bool delayed = eifel_delayed(seg, eifel_ts_);
      if (!delayed) eifel_ok_ = false;  // a retransmission filled a hole: some loss was real
      if (cc_.on_sack_recovery_ack(snd_una_)) {
        rack_.on_recovery_exit();
        // RFC 3522 judges one retransmission: with several, a late original of one hole can end recovery
        // while another hole was a real loss, so only a recovery with a single retransmission is undone here.
        if (eifel_ok_ && delayed && undo_retrans_ == 1) {  // the original arrived: its retransmission was spurious
          cc_.undo_reduction();
          undo_retrans_ = -1;
          ++stack_.stats_.eifel_undos;
        }
      }
    } else {
      cc_.on_ack(snd_una_, acked, snd_max_ - snd_una_, cwnd_limited_round(), stack_.clock_.now_us(), cc_rtt_us());
    }
  } else if (dup_candidate && newly > 0) {
    ++stack_.stats_.dup_acks_in;
    cc_.count_dupack();
  }
  uint32_t delivered = acked;
  if (prr_watch) {
    uint32_t sacked_after = sb_.sacked_bytes();
    int64_t d = static_cast<int64_t>(acked) + sacked_after - sacked_before;
    delivered = d > 0 ? static_cast<uint32_t>(d) : 0;
  }
  if (cc_.prr_active()) cc_.prr_ack(delivered, sack_pipe());
  if (sack_maybe_enter_recovery(delivered)) {
  } else if (!advanced && dup_candidate && newly > 0 && !cc_.in_recovery() && cc_.dupacks() < 3) {
    // RFC 3042 limited transmit (RFC 6675 §5 step 2): one new segment per duplicate ACK, keeping at most
    // cwnd + 2·SMSS outstanding, so that small windows still produce DupThresh duplicates.
    send_next(std::min({snd_wnd_, stack_.conf_.send_window_bytes, cc_.cwnd() + 2 * mss_}));
  }
  update_memory();
}

bool Tcb::sack_maybe_enter_recovery(uint32_t delivered) {
  if (cc_.in_recovery() || !(snd_max_ > snd_una_) || !cc_.may_enter_sack_recovery(snd_una_)) return false;
  bool lost = rack_on() ? rack_.any_lost()
                        : cc_.dupacks() >= SackScoreboard::kDupThresh || sb_.lost_boundary(snd_una_, mss_) > snd_una_;
  if (!lost && !tlp_shows_loss()) return false;
  cc_.enter_sack_recovery(snd_max_ - snd_una_, snd_max_, sack_pipe());
  cc_.prr_ack(delivered, sack_pipe());
  undo_retrans_ = 0;
  eifel_ts_ = ts_now();  // the TSval the first retransmission (just below) carries
  eifel_ok_ = ts_ok_;
  undo_low_ = snd_una_;
  undo_high_ = snd_max_;
  ++stack_.stats_.fast_retransmits;
  ++stack_.stats_.sack_recoveries;
  snd_nxt_ = snd_max_;
  high_rxt_ = snd_una_;
  rescue_done_ = false;
  SackBlock hole{snd_una_, snd_una_ + mss_};
  if (rack_on() && rack_.first_lost(snd_una_, &hole)) {
    // RACK's first mark (the tail loss probe's SACK may show holes RACK has not marked yet: SND.UNA then)
  } else if (!sb_.empty()) {
    sb_.first_hole(snd_una_, sb_.highest_sacked(), &hole);
  }
  uint32_t len = std::min<uint32_t>(mss_, static_cast<uint32_t>(hole.right - hole.left));
  sack_retransmit(hole.left, len);  // step (4.3): the first segment presumed lost
  high_rxt_ = std::max(high_rxt_, hole.left + len);
  arm_retransmit();
  return true;
}

bool Tcb::sack_retransmit(SeqNum seq, uint32_t len) {
  if (seq < data_seq_) return false;
  size_t off = static_cast<size_t>(seq - data_seq_);
  size_t data = off < send_.bytes() ? std::min<size_t>(len, send_.bytes() - off) : 0;
  bool fin = fin_sent_ && seq + static_cast<uint32_t>(data) == fin_seq() && seq + len > fin_seq();
  if (data == 0 && !fin) return false;
  send_segment(seq, data, kAck | (fin ? kFin : 0));
  rack_sent(seq, static_cast<uint32_t>(data) + (fin ? 1 : 0));
  ++stack_.stats_.retransmits;
  if (undo_retrans_ >= 0 && cc_.in_recovery()) ++undo_retrans_;
  timing_ = false;  // Karn
  if (!rtx_timer_.armed()) arm_retransmit();
  return true;
}

void Tcb::sack_send() {
  uint32_t wnd = std::min(snd_wnd_, stack_.conf_.send_window_bytes);
  bool rack = rack_on();
  for (unsigned guard = 0; guard < 4096; ++guard) {
    if (cc_.prr_active() ? cc_.prr_quota() <= 0 : sack_pipe() + mss_ > cc_.cwnd()) break;
    SeqNum from = std::max(high_rxt_, snd_una_);
    SackBlock hole;
    // Rule 1: the first lost hole: RACK's marks (lost retransmissions included), or IsLost() above HighRxt.
    bool rule1 = rack ? rack_.first_lost(snd_una_, &hole)
                      : sb_.first_hole(from, sb_.lost_boundary(snd_una_, mss_), &hole);
    if (!rule1 && snd_nxt_ == snd_max_ && send_next(wnd)) continue;  // rule 2: new data
    // Rule 3 (a hole not yet lost below the highest SACK) only without RACK: RACK waits out reo_wnd there.
    if (rule1 || (!rack && !sb_.empty() && sb_.first_hole(from, sb_.highest_sacked(), &hole))) {
      uint32_t len = std::min<uint32_t>(mss_, static_cast<uint32_t>(hole.right - hole.left));
      if (!sack_retransmit(hole.left, len)) break;
      high_rxt_ = std::max(high_rxt_, hole.left + len);
      continue;
    }
    if (!rescue_done_) {  // rule 4: one rescue retransmission per recovery; HighRxt is left alone
      rescue_done_ = true;
      SeqNum end = sb_.highest_unsacked_end(snd_una_, snd_max_);
      if (snd_una_ < end) {
        SeqNum start = std::max(snd_una_, end - mss_);
        sack_retransmit(start, static_cast<uint32_t>(end - start));
        continue;
      }
    }
    break;
  }
}

bool Tcb::eifel_delayed(const TcpSegment& seg, uint32_t first_rtx_ts) const {
  const TcpOptions& o = seg.options;
  return ts_ok_ && o.has_timestamps && o.ts_ecr != 0 && static_cast<int32_t>(o.ts_ecr - first_rtx_ts) < 0;
}

void Tcb::dsack_undo(const SackBlock& d) {
  if (undo_retrans_ <= 0 || d.left < undo_low_ || undo_high_ < d.right) return;
  // Above SND.UNA the record says whether the range was retransmitted: a D-SACK of data sent once is a
  // duplicate the network made, which says nothing about this recovery's retransmissions (Linux checks
  // TCPCB_RETRANS the same way). Below SND.UNA the record is gone; that D-SACK counts, as in Linux.
  if (snd_una_ < d.right && !(rack_on() && rack_.retransmitted(d.left, d.right))) return;
  uint32_t segments = (static_cast<uint32_t>(d.right - d.left) + mss_ - 1) / mss_;
  undo_retrans_ -= static_cast<int>(std::max<uint32_t>(segments, 1));
  if (undo_retrans_ > 0) return;
  cc_.undo_reduction();
  undo_retrans_ = -1;
  ++stack_.stats_.dsack_undos;
}

void Tcb::sack_on_timeout() {
  undo_retrans_ = -1;  // D-SACKs undo no RTO; timestamps may (RFC 3522, Tcb::undo_spurious_rto)
  frto_sacked_.swap(sb_);  // F-RTO (tcb_frto.cc) judges the timeout against what was SACKed before it
  sb_.clear();  // RFC 2018 §8 / RFC 6675 §5.1
  rack_.on_rto(true);  // RFC 8985 §6.3: everything outstanding is lost; the go-back resends it
  high_rxt_ = snd_una_;
  rescue_done_ = false;
}

}  // namespace kosoku::tcpip
