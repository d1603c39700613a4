// The sender's SACK scoreboard (RFC 6675 §3/§4): which octets between SND.UNA (HighACK) and SND.MAX
// (HighData + 1) the peer has reported in SACK blocks (RFC 2018), and the queries RFC 6675's loss recovery
// needs: IsLost(), the pipe estimate (SetPipe) and the holes NextSeg() retransmits. Pure arithmetic over a
// sorted list of disjoint, non-adjacent ranges; no timers, no I/O. The list starts empty and allocates only
// when the first SACK block arrives; it never holds more than kMaxRanges ranges (further blocks are ignored,
// which only makes the sender more conservative). RFC 6675 counts octets; here a run of sacked octets
// counts as ceil(len / SMSS) "segments" for the DupThresh test, as senders that track segments do.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernel-bypass/tcpip/tcp_segment.hh"

namespace kosoku::tcpip {

class SackScoreboard {
 public:
  static constexpr unsigned kDupThresh = 3;    // RFC 6675 §2 DupThresh
  static constexpr size_t kMaxRanges = 64;     // bound on the ranges kept (memory per connection)

  bool empty() const { return ranges_.empty(); }
  size_t ranges() const { return ranges_.size(); }
  /// Bytes of heap memory the scoreboard holds (capacity of its range list).
  size_t heap_bytes() const { return ranges_.capacity() * sizeof(SackBlock); }
  /// Forgets every SACKed bit (RFC 2018 §8 / RFC 6675 §5.1: after an RTO the receiver may have reneged).
  void clear() { ranges_.clear(); }
  /// Exchanges the ranges (and their storage) with `other`.
  void swap(SackScoreboard& other) { ranges_.swap(other.ranges_); }
  /// The SACKed ranges, ascending, disjoint and non-adjacent.
  std::span<const SackBlock> blocks() const { return ranges_; }

  /// Records the SACK blocks of one ACK (RFC 6675 Update()). Blocks outside (snd_una, snd_max], empty or
  /// inverted blocks and blocks reaching below snd_una (D-SACK, RFC 2883) are ignored. Returns the number of
  /// octets newly SACKed by this ACK (RFC 6675 §2: > 0 makes it a duplicate ACK).
  uint32_t update(SeqNum snd_una, SeqNum snd_max, std::span<const SackBlock> blocks);
  /// The cumulative ACK moved to snd_una: drops the ranges (or parts) below it.
  void advance(SeqNum snd_una);

  /// True if the octet `seq` is SACKed.
  bool sacked(SeqNum seq) const;
  /// The end of the SACKed range containing `seq`, or `seq` itself when it is not SACKed.
  SeqNum sacked_end(SeqNum seq) const;
  /// The right edge of the highest SACKed range; only meaningful when !empty().
  SeqNum highest_sacked() const { return ranges_.back().right; }
  /// Total SACKed octets.
  uint32_t sacked_bytes() const;
  /// SACKed octets in [lo, hi) (0 when hi ≤ lo).
  uint32_t sacked_in(SeqNum lo, SeqNum hi) const;

  /// RFC 6675 IsLost() for every octet at once: unSACKed octets below the returned sequence number are
  /// lost (DupThresh SACKed segments, or more than (DupThresh - 1) * SMSS SACKed octets, lie above them);
  /// octets at or above it are not. Returns snd_una when nothing is lost.
  SeqNum lost_boundary(SeqNum snd_una, uint32_t smss) const;
  bool is_lost(SeqNum seq, SeqNum snd_una, uint32_t smss) const {
    return seq < lost_boundary(snd_una, smss) && !sacked(seq);
  }

  /// RFC 6675 SetPipe(): octets in [snd_una, snd_max) that are not SACKed count once if not lost, and once
  /// more if below high_rxt (retransmitted). Octets.
  uint32_t pipe(SeqNum snd_una, SeqNum snd_max, SeqNum high_rxt, uint32_t smss) const;

  /// The first unSACKed range starting at or after `from` (from ≥ snd_una) and ending at or before `limit`
  /// (clipped to it). Returns false when there is none. NextSeg() rule 1 uses limit = lost_boundary(),
  /// rule 3 limit = highest_sacked().
  bool first_hole(SeqNum from, SeqNum limit, SackBlock* out) const;

  /// The end of the highest unSACKed octet below snd_max (RFC 6675 NextSeg() rule 4, the rescue
  /// retransmission), or snd_una when everything outstanding is SACKed.
  SeqNum highest_unsacked_end(SeqNum snd_una, SeqNum snd_max) const;

 private:
  std::vector<SackBlock> ranges_;  // sorted, disjoint, non-adjacent, all within (snd_una, snd_max]
};

}  // namespace kosoku::tcpip
