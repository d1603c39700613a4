#include "core/cache/cache_stats.hh"

#include <string>
#include <utility>

#include "core/cache/cache_paths.hh"

namespace kosoku::cache {

namespace {

using stats::ExtraMetric;

ExtraMetric metric(std::string name, std::string help, ExtraMetric::Type type,
                   std::vector<std::pair<std::string, std::string>> labels, double value) {
  ExtraMetric m;
  m.name = std::move(name);
  m.help = std::move(help);
  m.type = type;
  m.labels = std::move(labels);
  m.value = value;
  return m;
}

}  // namespace

stats::ExtraSection stats_section(const CacheRegistry& reg) {
  stats::ExtraSection s;
  s.name = "proxy_cache";
  constexpr auto kGauge = ExtraMetric::Type::kGauge;
  constexpr auto kCounter = ExtraMetric::Type::kCounter;
  for (const auto& p : reg.paths()) {
    CachePath& path = *p;
    std::vector<std::pair<std::string, std::string>> zone = {{"zone", path.conf().zone}};
    s.metrics.push_back(metric("cache_entries", "entries in the keys zone (files, Vary primaries, placeholders)",
                               kGauge, zone, static_cast<double>(path.zone().entries())));
    s.metrics.push_back(metric("cache_bytes", "bytes of cache files on disk", kGauge, zone,
                               static_cast<double>(path.zone().bytes())));
    s.metrics.push_back(metric("cache_max_size_bytes", "max_size of the cache path (0: unlimited)", kGauge, zone,
                               static_cast<double>(path.conf().max_size)));
    s.metrics.push_back(metric("cache_loaded", "1 once the cache loader has read the directory", kGauge, zone,
                               path.loaded() ? 1 : 0));
    s.metrics.push_back(metric("cache_tags", "distinct cache tags in the zone's tag index", kGauge, zone,
                               static_cast<double>(path.zone().tags().tags())));
    s.metrics.push_back(metric("cache_tagged_entries", "(tag, entry) pairs in the zone's tag index", kGauge, zone,
                               static_cast<double>(path.zone().tags().pairs())));
    s.metrics.push_back(metric("cache_tag_index_bytes", "bytes of tags and entry references in the tag index",
                               kGauge, zone, static_cast<double>(path.zone().tags().bytes())));
    s.metrics.push_back(metric("cache_tag_index_refused_total",
                               "entries whose tags were not indexed: the tag index was at its budget", kCounter, zone,
                               static_cast<double>(path.zone().tags().refused())));
    const CachePath::PurgeCounters& pc = path.purge_counters();
    constexpr auto kRelaxed = std::memory_order_relaxed;
    const std::pair<const char*, uint64_t> kinds[] = {{"exact", pc.exact.load(kRelaxed)},
                                                      {"prefix", pc.prefix.load(kRelaxed)},
                                                      {"all", pc.all.load(kRelaxed)},
                                                      {"tag", pc.tags.load(kRelaxed)}};
    for (const auto& [kind, v] : kinds) {
      auto labels = zone;
      labels.emplace_back("kind", kind);
      s.metrics.push_back(metric("cache_zone_purges_total", "purges of the zone by kind (soft ones too)", kCounter,
                                 std::move(labels), static_cast<double>(v)));
    }
    s.metrics.push_back(metric("cache_soft_purges_total", "soft purges of the zone", kCounter, zone,
                               static_cast<double>(pc.soft.load(kRelaxed))));
    s.metrics.push_back(metric("cache_purged_entries_total", "entries purges removed", kCounter, zone,
                               static_cast<double>(pc.entries.load(kRelaxed))));
    s.metrics.push_back(metric("cache_purged_bytes_total", "file bytes purges removed", kCounter, zone,
                               static_cast<double>(pc.bytes.load(kRelaxed))));
    s.metrics.push_back(metric("cache_soft_purged_entries_total", "entries soft purges marked stale", kCounter,
                               zone, static_cast<double>(pc.soft_entries.load(kRelaxed))));
    s.metrics.push_back(metric("cache_purge_unlink_failures_total",
                               "purges whose files could not all be unlinked (the next start removes them)", kCounter,
                               zone, static_cast<double>(pc.unlink_failures.load(kRelaxed))));
    s.metrics.push_back(metric("cache_soft_purged_stale_total",
                               "responses served stale from a soft-purged entry", kCounter, zone,
                               static_cast<double>(pc.soft_served_stale.load(kRelaxed))));
  }
  const std::vector<CacheCounters>& all = reg.all_counters();
  for (size_t core = 0; core < all.size(); ++core) {
    const CacheCounters& c = all[core];
    const std::string k = std::to_string(core);
    const std::pair<const char*, uint64_t> statuses[] = {
        {"HIT", c.hits},     {"MISS", c.misses},         {"EXPIRED", c.expired},     {"STALE", c.stale},
        {"UPDATING", c.updating}, {"REVALIDATED", c.revalidated}, {"BYPASS", c.bypass}};
    for (const auto& [name, v] : statuses) {
      s.metrics.push_back(metric("cache_responses_total", "responses by $upstream_cache_status", kCounter,
                                 {{"core", k}, {"status", name}}, static_cast<double>(v)));
    }
    s.metrics.push_back(metric("cache_lock_waits_total", "requests that waited for proxy_cache_lock", kCounter,
                               {{"core", k}}, static_cast<double>(c.lock_waits)));
    s.metrics.push_back(metric("cache_lock_timeouts_total", "proxy_cache_lock_timeout expiries", kCounter,
                               {{"core", k}}, static_cast<double>(c.lock_timeouts)));
    s.metrics.push_back(metric("cache_purges_total", "purge requests", kCounter, {{"core", k}},
                               static_cast<double>(c.purges)));
    s.metrics.push_back(metric("cache_background_updates_total", "proxy_cache_background_update fetches",
                               kCounter, {{"core", k}}, static_cast<double>(c.background)));
    s.metrics.push_back(metric("cache_hot_hits_total", "hits served from the per-core in-memory copy", kCounter,
                               {{"core", k}}, static_cast<double>(c.hot_hits)));
  }
  return s;
}

void register_stats(CacheRegistry* reg) {
  if (reg == nullptr) return;
  stats::register_extra_source([reg](stats::Snapshot& s) { s.extra.push_back(stats_section(*reg)); });
}

}  // namespace kosoku::cache
