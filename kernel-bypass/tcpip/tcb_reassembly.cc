// Tcb: the out-of-order queue (RFC 9293 §3.10.7.4 "segment text": segments beyond RCV.NXT are held until
// the hole before them is filled).
//
// The queue is a sorted vector of non-overlapping ranges. A new segment is trimmed against what is held
// (its front against the range before it, its back against the first range it only partly covers; ranges
// it covers entirely are replaced), then appended to the range before it when contiguous — as Linux's
// out-of-order queue coalesces — so a flood of overlapping segments at RCV.NXT+1, +2, ... costs one range
// and no more bytes than the window. Two bounds hold whatever the peer sends: in-order + out-of-order
// payload never exceeds the receive buffer (Tcb::recv_buffer_limit(): TcpConfig::recv_buffer_bytes or the
// listener's rcvbuf=; the excess is dropped), and the queue holds at most max_ooo_segments() ranges (a new
// range beyond it is dropped; one range costs a heap block and its header).
// Drops are counted in TcpStats::ooo_dropped; the peer retransmits what it does not see SACKed. With SACK,
// a segment the queue already holds (in part) is reported as a D-SACK (Tcb::note_dsack).
#include <algorithm>

#include "kernel-bypass/tcpip/tcb.hh"
#include "kernel-bypass/tcpip/tcp_stack.hh"

namespace kosoku::tcpip {

size_t Tcb::max_ooo_segments() const {
  // One range per 512 bytes of buffer (the smallest MSS a real peer uses is 536), at least 8.
  return std::max<size_t>(8, recv_limit_ / 512);
}

void Tcb::ooo_insert(SeqNum seq, std::span<const uint8_t> data, bool fin) {
  // Octets the queue already holds are a duplicate: the next ACK reports the first such stretch as a D-SACK
  // (RFC 2883 §4), so the sender sees spurious retransmissions above RCV.NXT too.
  if (sack_ok_ && !data.empty()) note_dsack(seq, data.size());
  auto it = std::lower_bound(ooo_.begin(), ooo_.end(), seq,
                             [](const OooSegment& o, SeqNum s) { return o.seq < s; });
  SeqNum end = seq + static_cast<uint32_t>(data.size());
  if (it != ooo_.begin()) {  // the range starting before seq: trim our front against it
    OooSegment& prev = *(it - 1);
    SeqNum prev_end = prev.seq + static_cast<uint32_t>(prev.data.size());
    if (prev_end >= end) {  // nothing new
      if (fin && prev_end == end) prev.fin = true;
      return;
    }
    if (prev_end > seq) {
      data = data.subspan(prev_end - seq);
      seq = prev_end;
    }
  }
  while (it != ooo_.end() && it->seq < end) {  // ranges inside [seq, end) go; a partial one trims our back
    SeqNum o_end = it->seq + static_cast<uint32_t>(it->data.size());
    if (o_end <= end) {
      if (it->fin && o_end == end) fin = true;
      ooo_bytes_ -= it->data.size();
      it = ooo_.erase(it);
      continue;
    }
    data = data.first(it->seq - seq);
    end = it->seq;
    fin = false;
    break;
  }
  size_t held = in_.size() + ooo_bytes_;
  size_t limit = recv_limit_;
  size_t room = held >= limit ? 0 : limit - held;
  if (data.size() > room) {
    ++stack_.stats_.ooo_dropped;
    data = data.first(room);
    fin = false;
  }
  if (data.empty() && !fin) {
    update_memory();
    return;
  }
  size_t pos = static_cast<size_t>(it - ooo_.begin());
  if (pos > 0) {
    OooSegment& prev = ooo_[pos - 1];
    if (!prev.fin && prev.seq + static_cast<uint32_t>(prev.data.size()) == seq) {
      prev.data.append(reinterpret_cast<const char*>(data.data()), data.size());
      prev.fin = fin;
      ooo_bytes_ += data.size();
      update_memory();
      return;
    }
  }
  if (ooo_.size() >= max_ooo_segments()) {
    ++stack_.stats_.ooo_dropped;
    update_memory();
    return;
  }
  ooo_bytes_ += data.size();
  ooo_.insert(ooo_.begin() + static_cast<long>(pos),
              OooSegment{seq, std::string(reinterpret_cast<const char*>(data.data()), data.size()), fin});
  update_memory();
}

}  // namespace kosoku::tcpip
