#include "kernel-bypass/tcpip/rack.hh"

#include <algorithm>

namespace kosoku::tcpip {

namespace {
uint32_t len(const Rack::Entry& e) { return static_cast<uint32_t>(e.end - e.start); }
bool in_flight(const Rack::Entry& e) { return !e.sacked && !e.lost; }
}  // namespace

size_t Rack::index_above(SeqNum seq) const {
  auto it = std::upper_bound(entries_.begin() + static_cast<long>(head_), entries_.end(), seq,
                             [](SeqNum s, const Entry& e) { return s < e.end; });
  return static_cast<size_t>(it - entries_.begin());
}

void Rack::pop_front() {
  if (++head_ == entries_.size()) {
    entries_.clear();  // capacity kept for the next flight (freed by release())
    head_ = 0;
  } else if (head_ >= 64 && 2 * head_ >= entries_.size()) {
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<long>(head_));
    head_ = 0;
  }
}

size_t Rack::split_at(SeqNum seq) {
  size_t i = index_above(seq);
  if (i == entries_.size() || !(entries_[i].start < seq)) return i;
  Entry upper = entries_[i];
  upper.start = seq;
  entries_[i].end = seq;
  entries_.insert(entries_.begin() + static_cast<long>(i) + 1, upper);
  if (upper.lost) ++lost_entries_;
  if (upper.sacked) ++sacked_entries_;
  return i + 1;
}

void Rack::set_lost(Entry& e) {
  e.lost = true;
  ++lost_entries_;
  pipe_ -= len(e);
  if (e.start < lost_low_) lost_low_ = e.start;
}

void Rack::set_sacked(Entry& e, uint64_t now_us) {
  if (e.lost) {
    --lost_entries_;
    e.lost = false;
  } else {
    pipe_ -= len(e);
  }
  e.sacked = true;
  ++sacked_entries_;
  delivered(e, now_us);
}

void Rack::on_transmit(SeqNum start, SeqNum end, uint64_t now_us) {
  if (!(start < end)) return;
  if (empty() || !(start < entries_.back().end)) {
    if (empty()) lost_low_ = start;
    entries_.push_back(Entry{start, end, now_us, next_order_++});
    pipe_ += len(entries_.back());
    return;
  }
  if (start < front().start) start = front().start;
  SeqNum top = entries_.back().end;
  SeqNum stop = std::min(end, top);
  if (start < stop) {
    size_t i = split_at(start);
    size_t j = split_at(stop);
    for (size_t k = i; k < j; ++k) {
      Entry& e = entries_[k];
      if (e.sacked) continue;  // not chosen for retransmission (a go-back skips SACKed ranges)
      if (e.lost) {
        e.lost = false;
        --lost_entries_;
        pipe_ += len(e);
      }
      e.xmit_us = now_us;
      e.order = next_order_;
      e.retransmitted = true;
    }
  }
  if (top < end) {  // a go-back segment that runs past the highest data sent
    entries_.push_back(Entry{top, end, now_us, next_order_});
    pipe_ += len(entries_.back());
  }
  ++next_order_;
}

void Rack::delivered(const Entry& e, uint64_t now_us) {
  uint64_t rtt = now_us > e.xmit_us ? now_us - e.xmit_us : 0;
  // §6.2 step 2: a retransmitted segment says nothing about its retransmission's time when the ACK's TSecr
  // predates that retransmission (condition 1: an earlier transmission was acknowledged, e.g. after a spurious
  // timeout) or when its RTT is below min_RTT (condition 2).
  if (e.retransmitted &&
      (rtt < min_rtt_us_ ||
       (echo_ms_ && static_cast<int32_t>(*echo_ms_ - static_cast<uint32_t>(e.xmit_us / 1000)) < 0))) {
    return;
  }
  if (!e.retransmitted) min_rtt_us_ = std::min(min_rtt_us_, rtt);
  if (!have_rack_ || sent_after(e.order, order_)) {
    xmit_us_ = e.xmit_us;
    order_ = e.order;
    rtt_us_ = rtt;
    have_rack_ = true;
  }
  // §6.2 step 3: a never-retransmitted segment delivered below the highest delivered one was reordered.
  if (!have_fack_ || fack_ < e.end) {
    fack_ = e.end;
    have_fack_ = true;
  } else if (!e.retransmitted && e.end < fack_) {
    reordering_seen_ = true;
  }
}

void Rack::on_ack(SeqNum una, SeqNum snd_max, std::span<const SackBlock> blocks, const SackScoreboard& sb,
                  bool dsack, uint64_t now_us, std::optional<uint32_t> echo_ms) {
  echo_ms_ = echo_ms;
  // Cumulatively acknowledged entries (those SACKed before were counted then).
  while (!empty() && !(una < front().end)) {
    Entry& e = front();
    if (e.lost) --lost_entries_;
    if (e.sacked) --sacked_entries_;
    if (in_flight(e)) pipe_ -= len(e);
    if (!e.sacked) delivered(e, now_us);
    pop_front();
  }
  if (!empty() && front().start < una) {  // the peer acknowledged part of a segment
    Entry& e = front();
    if (in_flight(e)) pipe_ -= static_cast<uint32_t>(una - e.start);
    e.start = una;
  }
  if (lost_low_ < una) lost_low_ = una;
  // Entries the ACK's blocks cover, wholly SACKed now (the scoreboard has the union with earlier blocks).
  for (const SackBlock& b : blocks) {
    for (size_t i = index_above(b.left); i < entries_.size() && entries_[i].start < b.right; ++i) {
      Entry& e = entries_[i];
      if (e.sacked || !sb.sacked(e.start) || sb.sacked_end(e.start) < e.end) continue;
      set_sacked(e, now_us);
    }
  }
  // §6.2 step 4: D-SACK rounds widen reo_wnd.
  if (dsack_round_on_ && !(una < dsack_round_)) dsack_round_on_ = false;
  if (!dsack_round_on_ && dsack) {
    dsack_round_on_ = true;
    dsack_round_ = snd_max;
    reo_wnd_mult_ = std::min(reo_wnd_mult_ + 1, 64u);
    reo_wnd_persist_ = 16;
    reordering_seen_ = true;  // a D-SACK shows a retransmission was not needed: reordering or a late ACK
  }
}

void Rack::on_recovery_exit() {
  if (reo_wnd_persist_ > 0 && --reo_wnd_persist_ == 0) reo_wnd_mult_ = 1;
}

uint64_t Rack::reo_wnd_us(bool in_recovery, uint64_t srtt_us) const {
  if (!reordering_seen_ && (in_recovery || sacked_entries_ >= SackScoreboard::kDupThresh)) return 0;
  uint64_t base = min_rtt_us_ != UINT64_MAX ? min_rtt_us_ : srtt_us;
  return std::min<uint64_t>(reo_wnd_mult_ * base / 4, srtt_us);
}

Rack::AckResult Rack::detect_loss(uint64_t now_us, bool in_recovery, uint64_t srtt_us) {
  AckResult r;
  if (!have_rack_) return r;
  uint64_t wait = rtt_us_ + reo_wnd_us(in_recovery, srtt_us);
  for (size_t i = head_; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    // Entries are in sequence order; a first transmission sent after the RACK segment is followed only by
    // segments first sent later still, so nothing beyond it can be lost yet.
    if (!sent_after(order_, e.order)) {
      if (!e.retransmitted) break;
      continue;
    }
    if (e.sacked || e.lost) continue;
    uint64_t elapsed = now_us > e.xmit_us ? now_us - e.xmit_us : 0;
    if (elapsed >= wait) {
      set_lost(e);
      ++r.newly_lost;
      if (e.retransmitted) ++r.lost_retransmissions;
    } else {
      r.timer_us = std::max(r.timer_us, wait - elapsed);
    }
  }
  return r;
}

void Rack::on_rto(bool forget_sacks) {
  for (size_t i = head_; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.sacked && forget_sacks) {
      e.sacked = false;
      --sacked_entries_;
      pipe_ += len(e);
    }
    if (!e.sacked && !e.lost) set_lost(e);
  }
}

void Rack::undo_rto() {
  for (size_t i = head_; i < entries_.size() && lost_entries_ > 0; ++i) {
    Entry& e = entries_[i];
    if (!e.lost) continue;
    e.lost = false;
    --lost_entries_;
    pipe_ += len(e);
  }
}

void Rack::forget_sacks() {
  for (size_t i = head_; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (!e.sacked) continue;
    e.sacked = false;
    --sacked_entries_;
    pipe_ += len(e);
  }
}

bool Rack::first_sent_once_below(SeqNum ack, uint64_t* xmit_us) const {
  for (size_t i = head_; i < entries_.size() && entries_[i].start < ack; ++i) {
    const Entry& e = entries_[i];
    if (e.retransmitted || e.sacked) continue;
    *xmit_us = e.xmit_us;
    return true;
  }
  return false;
}

bool Rack::retransmitted(SeqNum left, SeqNum right) const {
  for (size_t i = index_above(left); i < entries_.size() && entries_[i].start < right; ++i) {
    if (entries_[i].retransmitted) return true;
  }
  return false;
}

bool Rack::first_lost(SeqNum from, SackBlock* out) {
  if (lost_entries_ == 0) return false;
  bool from_low = !(lost_low_ < from);
  SeqNum begin = from_low ? lost_low_ : from;
  for (size_t i = index_above(begin); i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.lost) {
      if (from_low) lost_low_ = e.start;  // nothing below it is lost
      *out = SackBlock{std::max(e.start, begin), e.end};
      return true;
    }
  }
  if (from_low && !empty()) lost_low_ = entries_.back().end;
  return false;
}

void Rack::release() {
  std::vector<Entry>().swap(entries_);
  head_ = 0;
  lost_entries_ = sacked_entries_ = 0;
  pipe_ = 0;
}

}  // namespace kosoku::tcpip
