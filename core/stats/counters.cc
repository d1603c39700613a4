#include "core/stats/counters.hh"

#include <bit>

namespace kosoku::stats {

// Bucket of a sample of `us` microseconds: 0 for < 1 µs, else bit_width(us) (us in [2^(i-1), 2^i)), capped at
// the last bucket. Sub-microsecond parts are dropped from sum_us.
void LatencyHistogram::record_ns(uint64_t ns) {
  uint64_t us = ns / 1000;
  int b = us == 0 ? 0 : static_cast<int>(std::bit_width(us));
  if (b >= kBuckets) b = kBuckets - 1;
  ++buckets[b];
  ++count;
  sum_us += us;
}

// The smallest bucket whose cumulative count reaches rank = ceil(q * count) (at least 1); its upper bound is
// 2^i µs (1 µs for bucket 0). The last bucket has no upper bound: 2^(kBuckets-1) µs is returned for it.
uint64_t LatencyHistogram::quantile_us(double q) const {
  if (count == 0) return 0;
  if (q < 0) q = 0;
  if (q > 1) q = 1;
  double r = q * static_cast<double>(count);
  uint64_t rank = static_cast<uint64_t>(r);
  if (static_cast<double>(rank) < r) ++rank;
  if (rank == 0) rank = 1;
  if (rank > count) rank = count;
  uint64_t cum = 0;
  for (int i = 0; i < kBuckets; ++i) {
    cum += buckets[i];
    if (cum >= rank) return uint64_t{1} << i;
  }
  return uint64_t{1} << (kBuckets - 1);  // buckets do not add up to count (torn read from another thread)
}

}  // namespace kosoku::stats
