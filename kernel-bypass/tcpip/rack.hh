// RACK (RFC 8985 §6): time-based loss detection for one connection's sender.
//
// A segment is lost when a segment sent after it has been delivered (cumulatively ACKed or SACKed) and more
// than RACK.rtt + RACK.reo_wnd has passed since it was sent. Because the test is on transmission times, not
// sequence numbers, it also finds a lost retransmission (RFC 6675's DupThresh rule never marks a hole twice:
// only the RTO repairs that), needs a single SACKed segment instead of DupThresh of them (small windows), and
// tolerates reordering up to reo_wnd (min_RTT / 4, grown on D-SACKs, §6.2 step 4).
//
// The record: one entry per transmitted segment in sequence order, [start, end) with its last transmission
// time (µs) and transmission counter, whether it was ever retransmitted, whether it is marked lost (and not
// retransmitted since), and whether it is wholly SACKed. New data appends (O(1)); a retransmission updates
// the entries it covers, splitting an entry when its edges differ; a cumulative ACK drops entries from the
// front. 24 bytes per segment in flight, allocated with the first segment sent and freed by release(). Pure
// arithmetic: no timers, no I/O (the TCB arms the reordering timer with the delay detect_loss() returns).
//
// Pipe (RFC 6675 SetPipe with RACK's marks, as Linux's packets_out - sacked_out - lost_out + retrans_out):
// octets of entries neither SACKed nor marked lost; a retransmitted entry counts once (its original is
// presumed gone).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>
#include <span>

#include "kernel-bypass/tcpip/sack_scoreboard.hh"
#include "kernel-bypass/tcpip/tcp_segment.hh"

namespace kosoku::tcpip {

class Rack {
 public:
  struct Entry {
    SeqNum start, end;  // sequence space [start, end); a FIN counts as one octet
    uint64_t xmit_us;   // last transmission, µs
    uint32_t order;     // transmission counter at the last transmission (exact send order)
    bool retransmitted = false;
    bool lost = false;    // marked lost, not retransmitted since
    bool sacked = false;  // wholly SACKed
  };
  /// What one ACK did, for the RFC 8985 §6.2 steps and the caller's counters.
  struct AckResult {
    unsigned newly_lost = 0;             // entries marked lost by this call
    unsigned lost_retransmissions = 0;   // ... of which had been retransmitted already
    uint64_t timer_us = 0;               // > 0: run detect_loss() again after this many µs (reordering timer)
  };

  /// A segment [start, end) went out at now_us: new data (start at the end of the record) is appended; a
  /// retransmission refreshes the entries it covers (xmit time, retransmitted, not lost). Ranges below the
  /// record's first entry (already acknowledged) are ignored.
  void on_transmit(SeqNum start, SeqNum end, uint64_t now_us);

  /// §6.2 steps 1–4 for one ACK: SND.UNA is now `una`, `blocks` are the ACK's SACK blocks and `sb` the
  /// scoreboard after them. Entries newly delivered (below una, or now wholly SACKed) update RACK.xmit_ts /
  /// end_seq / rtt, min_RTT and RACK.fack, and reveal reordering (a never-retransmitted segment delivered
  /// below fack). `dsack`: the ACK carried a D-SACK block (RFC 2883), which widens reo_wnd for 16
  /// recoveries; `snd_max`: the highest sequence sent + 1 (the D-SACK round ends when una passes it).
  /// `echo_ms`: the ACK's timestamp echo as a time of the sender's ms clock (TSecr - the TSval offset, low 32
  /// bits; none without timestamps), for step 2's first condition.
  void on_ack(SeqNum una, SeqNum snd_max, std::span<const SackBlock> blocks, const SackScoreboard& sb,
              bool dsack, uint64_t now_us, std::optional<uint32_t> echo_ms = std::nullopt);

  /// §6.2 step 5: marks lost each entry not delivered, not already marked, sent before the RACK segment and
  /// more than RACK.rtt + reo_wnd ago. `in_recovery`: fast recovery or an RTO's go-back runs (reo_wnd is 0
  /// then unless reordering was seen); srtt_us caps reo_wnd.
  AckResult detect_loss(uint64_t now_us, bool in_recovery, uint64_t srtt_us);

  /// RTO (§6.3 with RFC 6675 §5.1): every entry not SACKed is lost; with `forget_sacks` (the scoreboard was
  /// cleared, RFC 2018 §8) SACKed entries are forgotten too and marked lost.
  void on_rto(bool forget_sacks);
  /// The RTO was spurious (RFC 3522, Tcb): entries still marked lost are in flight again (not lost), so the
  /// go-back does not resend them; a later ACK's detection marks again what is really missing.
  void undo_rto();
  /// F-RTO (RFC 5682) found the timeout spurious on a connection without timestamps: the RACK segment (the
  /// most recently sent one delivered) may be the timeout's retransmission whose ACK was for the original
  /// (§6.2 step 2 cannot tell without a TSecr), which would mark the whole flight lost again. It is
  /// forgotten; the next delivery of a segment sets it again, and until then nothing is marked.
  void forget_rack_segment() { have_rack_ = false; }
  /// The peer reneged (RFC 2018 §8): SACK marks are forgotten; the RTO repairs what is missing.
  void forget_sacks();
  /// A loss recovery ended (fast or RTO): counts down the D-SACK persistence of reo_wnd (§6.2 step 4).
  void on_recovery_exit();

  /// The first entry marked lost at or above `from`, as a range (false: none).
  bool first_lost(SeqNum from, SackBlock* out);
  bool any_lost() const { return lost_entries_ > 0; }
  /// Whether any part of [left, right) still in the record was retransmitted (a D-SACK for data never
  /// retransmitted reports a duplicate the network made, not a spurious retransmission).
  bool retransmitted(SeqNum left, SeqNum right) const;
  /// For an ACK of new data up to `ack` (before on_ack): the send time (µs) of the oldest entry below ack
  /// that was sent once and not SACKed earlier — an unambiguous RTT sample (RFC 6298 §3, Karn). False: none.
  bool first_sent_once_below(SeqNum ack, uint64_t* xmit_us) const;
  /// Octets in flight: entries neither SACKed nor marked lost (kept up to date, O(1)).
  uint32_t pipe() const { return pipe_; }
  /// RACK.reo_wnd (§6.2 step 4), µs: 0 in recovery or with DupThresh segments SACKed while no reordering
  /// was seen; otherwise min(reo_wnd_mult · min_RTT / 4, SRTT).
  uint64_t reo_wnd_us(bool in_recovery, uint64_t srtt_us) const;

  bool reordering_seen() const { return reordering_seen_; }
  uint64_t min_rtt_us() const { return min_rtt_us_; }
  uint64_t rtt_us() const { return rtt_us_; }
  unsigned reo_wnd_mult() const { return reo_wnd_mult_; }
  size_t size() const { return entries_.size() - head_; }
  bool empty() const { return size() == 0; }
  const Entry& entry(size_t i) const { return entries_[head_ + i]; }
  /// Heap bytes the record holds.
  size_t heap_bytes() const { return entries_.capacity() * sizeof(Entry); }
  /// Forgets every entry and frees the memory (TIME-WAIT, idle release with nothing outstanding).
  void release();

 private:
  /// Splits the entry holding `seq` so that an entry starts at seq; returns its index (size() if none).
  size_t split_at(SeqNum seq);
  /// RACK_sent_after(): RFC 8985 orders transmissions by (xmit_ts, end_seq), which misorders a retransmission
  /// and new data sent within one clock tick; a per-connection transmission counter is exact.
  static bool sent_after(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) > 0; }
  void delivered(const Entry& e, uint64_t now_us);

  /// Index of the first entry whose end is > seq (the entry holding seq, or the next one).
  size_t index_above(SeqNum seq) const;
  void set_lost(Entry& e);
  void set_sacked(Entry& e, uint64_t now_us);

  Entry& front() { return entries_[head_]; }
  void pop_front();

  std::vector<Entry> entries_;  // live entries are [head_, size()): the front is dropped lazily
  size_t head_ = 0;
  unsigned lost_entries_ = 0;
  unsigned sacked_entries_ = 0;
  uint32_t pipe_ = 0;
  SeqNum lost_low_;  // no entry below it is marked lost (first_lost's starting point)
  // RACK state (§6.1).
  uint64_t xmit_us_ = 0;  // RACK.xmit_ts: send time of the most recently sent segment delivered
  uint32_t order_ = 0;    // its transmission counter (stands for RACK.end_seq in the ordering)
  uint32_t next_order_ = 0;
  bool have_rack_ = false;
  uint64_t rtt_us_ = 0;   // RACK.rtt
  std::optional<uint32_t> echo_ms_;  // the current ACK's timestamp echo (on_ack), ms clock
  uint64_t min_rtt_us_ = UINT64_MAX;
  SeqNum fack_;           // RACK.fack: highest end delivered
  bool have_fack_ = false;
  bool reordering_seen_ = false;
  unsigned reo_wnd_mult_ = 1;
  int reo_wnd_persist_ = 0;
  SeqNum dsack_round_;
  bool dsack_round_on_ = false;
};

}  // namespace kosoku::tcpip
