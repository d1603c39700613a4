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
