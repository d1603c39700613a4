// Latency histogram of the load generator: log-linear buckets (HdrHistogram's layout with 64 sub-buckets per
// power of two, so any recorded value is reported within 1/64 ≈ 1.6 % of its true value). Values are
// nanoseconds; record() is O(1), no allocation after construction. One instance per run, single thread.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

namespace kosoku::loadgen {

class LatencyHistogram {
 public:
  /// Adds one sample of `ns` nanoseconds (values ≥ 2^40 ns, ~18 min, go into the last bucket).
  void record(uint64_t ns) {
    ++counts_[index(ns)];
    ++total_;
    sum_ns_ += ns;
    if (ns > max_ns_) max_ns_ = ns;
  }
  /// The smallest recorded value v such that at least `q` (0..1) of the samples are ≤ v, as the upper edge
  /// of its bucket, in ns. 0 when empty.
  uint64_t quantile(double q) const {
    if (total_ == 0) return 0;
    uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total_) + 0.5);
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        uint64_t edge = upper_edge(i);
        return edge < max_ns_ ? edge : max_ns_;
      }
    }
    return max_ns_;
  }
  uint64_t count() const { return total_; }
  uint64_t max_ns() const { return max_ns_; }
  double mean_ns() const { return total_ == 0 ? 0.0 : static_cast<double>(sum_ns_) / static_cast<double>(total_); }
  void reset() { *this = LatencyHistogram(); }

 private:
  static constexpr unsigned kSubBits = 6;  // 64 sub-buckets per power of two
  static constexpr unsigned kMaxBits = 40;
  static constexpr size_t kBuckets = (kMaxBits - kSubBits + 1) << kSubBits;

  static size_t index(uint64_t v) {
    if (v < (1u << kSubBits)) return static_cast<size_t>(v);
    unsigned msb = 63 - static_cast<unsigned>(std::countl_zero(v));
    if (msb >= kMaxBits) return kBuckets - 1;
    unsigned shift = msb - kSubBits;
    // Block (shift + 1) holds values [2^msb, 2^(msb+1)) in 64 steps of 2^shift.
    return (static_cast<size_t>(shift + 1) << kSubBits) + static_cast<size_t>((v >> shift) & ((1u << kSubBits) - 1));
  }
  static uint64_t upper_edge(size_t i) {
    if (i < (1u << kSubBits)) return i;
    unsigned shift = static_cast<unsigned>(i >> kSubBits) - 1;
    uint64_t sub = i & ((1u << kSubBits) - 1);
    return (((uint64_t{1} << kSubBits) | sub) << shift) + ((uint64_t{1} << shift) - 1);
  }

  std::array<uint64_t, kBuckets> counts_{};
  uint64_t total_ = 0;
  uint64_t sum_ns_ = 0;
  uint64_t max_ns_ = 0;
};

}  // namespace kosoku::loadgen
