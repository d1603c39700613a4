// The proxy cache's section of the stats renderers (stats/export.hh: the `status` location, the serial
// console, Prometheus): per zone — entries, bytes on disk, max_size, keys kept for purge, loaded — and per core
// — responses by $upstream_cache_status, lock waits and timeouts, purges, background updates, hits served from
// the per-core hot copy. Names (Prometheus: kosoku_ prefix):
//   cache_entries{zone}  cache_bytes{zone}  cache_max_size_bytes{zone}  cache_loaded{zone}
//   cache_responses_total{core,status}  cache_lock_waits_total{core}  cache_lock_timeouts_total{core}
//   cache_purges_total{core}  cache_background_updates_total{core}  cache_hot_hits_total{core}
//   cache_tags{zone}  cache_tagged_entries{zone}  cache_tag_index_bytes{zone}  cache_zone_purges_total{zone,kind}
//   cache_soft_purges_total{zone}  cache_purged_entries_total{zone}  cache_purged_bytes_total{zone}
//   cache_soft_purged_entries_total{zone}  cache_soft_purged_stale_total{zone}
//   cache_purge_unlink_failures_total{zone}
#pragma once

#include "core/stats/export.hh"

namespace kosoku::cache {

class CacheRegistry;

/// The section for `reg` (read-only: zone gauges and every core's counters).
stats::ExtraSection stats_section(const CacheRegistry& reg);
/// Registers stats_section(*reg) as an extra source (once, at start, before the loops run).
void register_stats(CacheRegistry* reg);

}  // namespace kosoku::cache
