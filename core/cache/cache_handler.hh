// The proxy cache on one core (nginx's ngx_http_upstream cache path + ngx_http_file_cache): the content
// handler of the proxy_pass locations with proxy_cache or proxy_cache_purge (registered ahead of the proxy's), and
// of `proxy_cache_purge ZONE KEY` locations. A request it does not cache (method, an empty zone) goes to
// ProxyModule::forward as it is.
//
// Per request with `proxy_cache` on (CacheState, cache_state.hh; each next step is decide_cache()'s, the pure
// decision of decision.hh, which the steps below follow):
//   1. the zone (literal, or `proxy_cache $var`: split_clients), the key (proxy_cache_key), proxy_cache_bypass;
//      PURGE-style requests (proxy_cache_purge on|METHOD) are answered here and never forwarded;
//   2. lookup in the keys zone (no lock: cache_zone.hh) — the Vary primary leads to the variant of this
//      request (its secondary key, RFC 9111 §4.1);
//   3. HIT (fresh): the entry is opened and served from disk with `Age`, answering the client's conditional
//      requests (If-None-Match with weak comparison and lists, If-Modified-Since) and ranges itself (the 304
//      carries the 200's ETag, Vary, Cache-Control...; range offsets are clamped to the stored body);
//   4. MISS: proxy_cache_min_uses counts uses; proxy_cache_lock lets one request fetch while the others wait
//      to be woken by the fill's commit (WakeHub: no polling), up to proxy_cache_lock_timeout, after which they
//      go to the origin uncached (nginx); the response is passed to the client and, if storable
//      (freshness.hh, proxy_no_cache), teed into a StoreWriter that commits only a complete body;
//   5. EXPIRED: the stale entry is revalidated (proxy_cache_revalidate: If-None-Match / If-Modified-Since from
//      the stored validators) — a 304 gives REVALIDATED (the stored head merged with the 304's fields, §4.3.4,
//      rewritten to disk) — or refetched; with `proxy_cache_use_stale updating` requests arriving meanwhile get
//      the stale copy (UPDATING), and with proxy_cache_background_update the request that found it expired
//      does too (STALE) while a detached fetch refreshes it;
//   6. STALE on origin errors (use_stale error/timeout/http_5xx...), never for must-revalidate,
//      proxy-revalidate, s-maxage or no-cache responses (§4.2.4).
// $upstream_cache_status (set_cache_status) is set on every cached-location response.
//
// The origin is reached through a CacheFetch (cache_fetch.hh): the proxy's UpstreamFetch (upstreams, retries,
// timeouts, framing) with the cache as its sink, so nothing impersonates a client.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/cache/cache_key.hh"
#include "core/cache/cache_paths.hh"
#include "core/cache/decision.hh"
#include "core/cache/hot_cache.hh"
#include "core/http/connection.hh"
#include "core/proxy/proxy_handler.hh"

namespace kosoku::cache {

/// Records `status` as the request's $upstream_cache_status (the cache module's RequestCtx; cache_module.cc).
void set_cache_status(http::Exchange& ex, CacheStatus status);

class CacheState;
struct EntryMeta;
class CacheMaintainer;
class BackgroundFill;
class CacheFetch;

class CacheModule final : public reactor::Poller, public http::ContentHandler, public http::ModuleCore {
 public:
  /// The cache module's per-core part (cache_module.cc): the content handler of the locations it serves
  /// (serves(): before the proxy in the module registry), a poller on the loop; attaches the core to the
  /// registry's WakeHub and starts the loader/manager of the cache paths this core runs (path i on core
  /// i % worker_processes). `reg` null: a module that only lets every request through (no proxy_cache_path in
  /// the configuration).
  CacheModule(http::HttpServer& server, CacheRegistry* reg);
  ~CacheModule() override;
  CacheModule(const CacheModule&) = delete;
  CacheModule& operator=(const CacheModule&) = delete;

  /// The locations whose requests come here: `proxy_cache_purge ZONE KEY` ones, and proxy_pass ones with
  /// proxy_cache or a method purge.
  static bool serves(const config::LocationConf& loc) {
    const CacheLocConf& cache = loc.module<CacheLocConf>();
    if (cache.purge.mode == PurgeConf::Mode::kZoneKey) return true;
    return loc.module<proxy::ProxyLocationConf>().pass && (cache.enabled || cache.purge.mode != PurgeConf::Mode::kOff);
  }

  // reactor::Poller: lock wake-ups from other cores, retired fetches.
  bool poll() override;
  // http::ContentHandler: purges, cached requests; the rest goes to the proxy.
  void handle(http::Exchange& ex) override;
  http::ContentHandler* content_handler() override { return this; }

  // ---- for CacheState and friends
  /// The same core's proxy module (found on first use: the proxy's per-core part starts after this one).
  proxy::ProxyModule& proxy();
  reactor::Reactor& reactor() { return reactor_; }
  CacheRegistry* registry() { return reg_; }
  int core() const { return core_; }
  /// The DiskQueue of `path` on this core.
  disk::DiskQueue& queue_for(const CachePath& path, const http::Exchange& ex) const;
  disk::DiskQueue& queue_for(const CachePath& path) const;
  /// Waiters for the lock of `h` on this core (woken by poll()).
  void wait(const Hash128& h, CacheState* s);
  void unwait(const Hash128& h, CacheState* s);
  /// Takes a fetch the cache no longer follows; it is deleted once nothing of it is in flight.
  void retire(std::unique_ptr<CacheFetch> fx);
  /// Starts a background update of an expired entry (proxy_cache_background_update); the fill owns the lock.
  /// `stale`/`stale_fd` (owned; -1: none): the expired entry, revalidated with its validators when `revalidate`
  /// (proxy_cache_revalidate).
  void start_background(http::Exchange& ex, CachePath& path, std::string key, const Hash128& locked,
                        const EntryMeta& stale, int stale_fd, bool revalidate);

  /// Keeps a fill that lost its client (CacheState::continue_fill) until it is done.
  void adopt_fill(std::unique_ptr<BackgroundFill> fill);

  /// This core's copies of small hot entries (hot_cache.hh).
  HotCache& hot() { return hot_; }

  /// This core's counters (in the registry, so the stats renderers can read every core's).
  CacheCounters& counters() { return *counters_; }

 private:
  void wake_all();
  /// A request of a proxy_cache location: answered by the cache (true), or not cached (false).
  bool handle_cached(http::Exchange& ex);

  http::HttpServer& server_;
  proxy::ProxyModule* proxy_ = nullptr;
  reactor::Reactor& reactor_;
  CacheRegistry* reg_;
  int core_;
  absl::flat_hash_map<Hash128, std::vector<CacheState*>, Hash128Hasher> waiters_;
  std::vector<std::unique_ptr<CacheFetch>> retired_;
  std::vector<std::unique_ptr<BackgroundFill>> fills_;
  std::vector<std::unique_ptr<CacheMaintainer>> maintainers_;
  CacheCounters own_counters_;                 // used when there is no registry
  CacheCounters* counters_ = &own_counters_;
  HotCache hot_;
};

}  // namespace kosoku::cache
