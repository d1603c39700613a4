#include "kernel-bypass/tcpip/sack_scoreboard.hh"

#include <algorithm>

namespace kosoku::tcpip {

namespace {
constexpr uint32_t kMaxWindow = 1u << 30;  // RFC 7323 §2.3: windows stay below 2^30

// First range whose right edge is > seq (the range containing seq, or the next one above it).
template <typename It>
It range_at_or_above(It begin, It end, SeqNum seq) {
  return std::upper_bound(begin, end, seq, [](SeqNum s, const SackBlock& r) { return s < r.right; });
}
}  // namespace

uint32_t SackScoreboard::sacked_bytes() const {
  uint32_t n = 0;
  for (const SackBlock& r : ranges_) n += static_cast<uint32_t>(r.right - r.left);
  return n;
}

uint32_t SackScoreboard::sacked_in(SeqNum lo, SeqNum hi) const {
  uint32_t n = 0;
  for (auto it = range_at_or_above(ranges_.begin(), ranges_.end(), lo); it != ranges_.end() && it->left < hi; ++it) {
    SeqNum a = std::max(it->left, lo), b = std::min(it->right, hi);
    if (a < b) n += static_cast<uint32_t>(b - a);
  }
  return n;
}

uint32_t SackScoreboard::update(SeqNum snd_una, SeqNum snd_max, std::span<const SackBlock> blocks) {
  if (blocks.empty()) return 0;
  if (ranges_.capacity() == 0) ranges_.reserve(8);  // before any iterator into it is taken
  uint32_t before = sacked_bytes();
  uint32_t span = snd_max.v - snd_una.v;
  if (span > kMaxWindow) return 0;  // not a window this scoreboard can order (modulo 2^31)
  for (const SackBlock& b : blocks) {
    // Offsets from SND.UNA (unsigned: valid however far apart the raw values are): SND.UNA ≤ left < right
    // ≤ SND.MAX.
    uint32_t lo = b.left.v - snd_una.v, hi = b.right.v - snd_una.v;
    if (!(lo < hi) || hi > span) continue;
    // First range that overlaps or touches b (its right edge ≥ b.left).
    auto it = std::lower_bound(ranges_.begin(), ranges_.end(), b.left,
                               [](const SackBlock& r, SeqNum s) { return r.right < s; });
    if (it == ranges_.end() || b.right < it->left) {
      if (ranges_.size() >= kMaxRanges) continue;
      ranges_.insert(it, b);
      continue;
    }
    SeqNum left = std::min(it->left, b.left);
    SeqNum right = std::max(it->right, b.right);
    auto j = it + 1;
    while (j != ranges_.end() && j->left <= right) {
      right = std::max(right, j->right);
      ++j;
    }
    *it = SackBlock{left, right};
    ranges_.erase(it + 1, j);
  }
  uint32_t after = sacked_bytes();
  return after > before ? after - before : 0;
}

void SackScoreboard::advance(SeqNum snd_una) {
  auto it = range_at_or_above(ranges_.begin(), ranges_.end(), snd_una);
  ranges_.erase(ranges_.begin(), it);
  if (!ranges_.empty() && ranges_.front().left < snd_una) ranges_.front().left = snd_una;
}

bool SackScoreboard::sacked(SeqNum seq) const {
  auto it = range_at_or_above(ranges_.begin(), ranges_.end(), seq);
  return it != ranges_.end() && it->left <= seq;
}

SeqNum SackScoreboard::sacked_end(SeqNum seq) const {
  auto it = range_at_or_above(ranges_.begin(), ranges_.end(), seq);
  return it != ranges_.end() && it->left <= seq ? it->right : seq;
}

SeqNum SackScoreboard::lost_boundary(SeqNum snd_una, uint32_t smss) const {
  if (smss == 0) smss = 1;
  uint32_t segments = 0;
  uint64_t bytes = 0;
  for (auto it = ranges_.rbegin(); it != ranges_.rend(); ++it) {
    uint32_t len = static_cast<uint32_t>(it->right - it->left);
    segments += (len + smss - 1) / smss;
    bytes += len;
    if (segments >= kDupThresh || bytes > static_cast<uint64_t>(kDupThresh - 1) * smss) {
      return std::max(it->left, snd_una);
    }
  }
  return snd_una;
}

uint32_t SackScoreboard::pipe(SeqNum snd_una, SeqNum snd_max, SeqNum high_rxt, uint32_t smss) const {
  SeqNum lost = lost_boundary(snd_una, smss);
  uint32_t pipe = 0;
  auto hole = [&](SeqNum a, SeqNum b) {
    if (!(a < b)) return;
    SeqNum not_lost = std::max(a, lost);
    if (not_lost < b) pipe += static_cast<uint32_t>(b - not_lost);
    SeqNum rxt_end = std::min(b, high_rxt);
    if (a < rxt_end) pipe += static_cast<uint32_t>(rxt_end - a);
  };
  SeqNum cur = snd_una;
  for (const SackBlock& r : ranges_) {
    hole(cur, r.left);
    cur = r.right;
  }
  hole(cur, snd_max);
  return pipe;
}

bool SackScoreboard::first_hole(SeqNum from, SeqNum limit, SackBlock* out) const {
  // Holes are the gaps below each range; the first candidate gap is the one below the range above `from`.
  auto it = range_at_or_above(ranges_.begin(), ranges_.end(), from);
  if (it != ranges_.end() && it->left <= from) {  // `from` is SACKed: start at the end of its range
    from = it->right;
    ++it;
  }
  if (it == ranges_.end()) return false;
  SeqNum end = std::min(it->left, limit);
  if (!(from < end)) return false;
  *out = SackBlock{from, end};
  return true;
}

SeqNum SackScoreboard::highest_unsacked_end(SeqNum snd_una, SeqNum snd_max) const {
  if (ranges_.empty() || ranges_.back().right < snd_max) return snd_max;
  return std::max(ranges_.back().left, snd_una);
}

}  // namespace kosoku::tcpip
