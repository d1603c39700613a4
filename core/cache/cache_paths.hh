// The proxy caches at run time: one CachePath per `proxy_cache_path` (its directory, its keys zone, its temp
// file names), all in one CacheRegistry created from the configuration before the loops start and shared by
// every core (the zones are the shared, lock-free-read part; everything else here is immutable after start),
// plus WakeHub, the cross-core wake-up of cache-lock waiters.
//
// WakeHub: when a fill commits or gives up, the zone hands back the bitmask of cores that have waiters for
// that key (CacheZone::add_waiter). The filler pushes the key's hash into each of those cores' inboxes (a
// bounded lock-free multi-producer ring per core, Vyukov's bounded queue) and calls Reactor::wake(); the
// core's poller drains its inbox and resumes the waiters of each hash. A full inbox sets the core's overflow
// flag instead, and the core then resumes all its waiters (each looks again). No polling, no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/cache_conf.hh"
#include "core/cache/cache_key.hh"
#include "core/cache/cache_zone.hh"
#include "core/cache/purge_log.hh"

namespace kosoku::config {
struct MainConf;
}
namespace kosoku::reactor {
class Reactor;
}

namespace kosoku::cache {

/// One `proxy_cache_path` at run time.
struct PurgeResult;

class CachePath {
 public:
  CachePath(const CachePathConf& conf, std::string dir, int64_t now_s);

  const CachePathConf& conf() const { return conf_; }
  const std::string& dir() const { return dir_; }
  CacheZone& zone() { return zone_; }

  /// The entry file of `h` (nginx's layout, cache_key.hh).
  std::string path_of(const Hash128& h) const { return entry_path(dir_, conf_.levels, h); }
  /// A fresh temp file name for `h` on `core`: beside the entry (use_temp_path=off, "<entry>.<core>.<n>") or
  /// in DIR/temp/ (use_temp_path=on). The cache loader deletes leftovers of both kinds.
  std::string temp_path_for(const Hash128& h, int core);
  /// DIR/temp (use_temp_path=on), else empty.
  const std::string& temp_dir() const { return temp_dir_; }

  /// Purges of this zone (requests and the console; counted once each, relaxed: for status only).
  struct PurgeCounters {
    std::atomic<uint64_t> exact{0}, prefix{0}, all{0}, tags{0}, soft{0};  // purges by kind; soft: also counted
                                                                          // by kind
    std::atomic<uint64_t> entries{0}, bytes{0};            // entries (and their file bytes) removed
    std::atomic<uint64_t> soft_entries{0};                 // entries a soft purge marked stale
    std::atomic<uint64_t> soft_served_stale{0};            // responses served stale from a soft-purged entry
    std::atomic<uint64_t> unlink_failures{0};              // purges whose files could not all be unlinked
  };
  /// The purge log (purge_log.hh): opened by CacheRegistry::create; without it (tests) purges are not logged.
  PurgeLog& purge_log() { return purge_log_; }
  const PurgeLog& purge_log() const { return purge_log_; }
  /// The last purges, for fills in flight during them (purge_log.hh).
  RecentPurges& recent_purges() { return recent_purges_; }
  PurgeCounters& purge_counters() { return purge_counters_; }
  const PurgeCounters& purge_counters() const { return purge_counters_; }
  /// Counts one purge of `target` and what it did (`soft`: marked stale instead of removed).
  void count_purge(const PurgeTarget& target, bool soft, const PurgeResult& r);

  /// The cache loader finished (entries on disk are all in the zone).
  bool loaded() const { return loaded_.load(std::memory_order_acquire); }
  void set_loaded() { loaded_.store(true, std::memory_order_release); }

 private:
  const CachePathConf& conf_;
  std::string dir_;
  std::string temp_dir_;
  CacheZone zone_;
  std::atomic<uint64_t> temp_seq_{0};
  std::atomic<bool> loaded_{false};
  PurgeCounters purge_counters_;
  PurgeLog purge_log_;
  RecentPurges recent_purges_;
};

/// Cross-core wake-ups of cache-lock waiters (see the header comment).
class WakeHub {
 public:
  explicit WakeHub(int cores);
  ~WakeHub();
  int cores() const { return cores_; }
  /// A core's loop registers itself (its thread, before it runs); null detaches it.
  void attach(int core, reactor::Reactor* r);
  /// Any thread: tells every core in `mask` that the lock of `h` was released.
  void notify(uint64_t mask, const Hash128& h);
  /// On core `core`: calls f(hash) for each wake-up received; returns true if some were lost (the core must
  /// then resume all its waiters).
  template <class F>
  bool drain(int core, F&& f) {
    Inbox& in = *inboxes_[static_cast<size_t>(core)];
    Hash128 h;
    while (pop(in, &h)) f(h);
    return in.overflow.exchange(false, std::memory_order_acq_rel);
  }

 private:
  static constexpr size_t kCapacity = 4096;
  struct Cell {
    std::atomic<size_t> seq{0};
    Hash128 h;
  };
  struct Inbox {
    Cell cells[kCapacity];
    alignas(64) std::atomic<size_t> head{0};  // producers
    alignas(64) std::atomic<size_t> tail{0};  // the consumer
    std::atomic<bool> overflow{false};
    std::atomic<reactor::Reactor*> reactor{nullptr};
  };
  bool push(Inbox& in, const Hash128& h);
  bool pop(Inbox& in, Hash128* h);

  int cores_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
};

/// One core's cache counters: plain fields written only by that core's loop, read by the stats renderers on
/// demand (a slightly stale value is fine; 64-bit aligned stores do not tear on x86-64).
struct alignas(64) CacheCounters {
  uint64_t hits = 0, misses = 0, expired = 0, stale = 0, updating = 0, revalidated = 0, bypass = 0;
  uint64_t lock_waits = 0, lock_timeouts = 0, purges = 0, background = 0, hot_hits = 0;
};

/// Every cache of the configuration.
class CacheRegistry {
 public:
  /// Creates each proxy_cache_path's directory (and DIR/temp) if missing — blocking, at start — and its
  /// zone. Relative paths resolve against `prefix` (with trailing '/'). `cores`: worker count (WakeHub).
  /// Null with *err (nginx's wording: `mkdir() "PATH" failed (13: Permission denied)`) on failure.
  static std::unique_ptr<CacheRegistry> create(const config::MainConf& conf, std::string_view prefix, int cores,
                                               int64_t now_s, std::string* err);

  CachePath* find(std::string_view zone_name);
  std::span<const std::unique_ptr<CachePath>> paths() const { return paths_; }
  WakeHub& wake_hub() { return hub_; }
  /// The counters of `core` (0..cores-1).
  CacheCounters& counters(int core) { return counters_[static_cast<size_t>(core) % counters_.size()]; }
  const std::vector<CacheCounters>& all_counters() const { return counters_; }

 private:
  explicit CacheRegistry(int cores) : hub_(cores), counters_(static_cast<size_t>(cores > 0 ? cores : 1)) {}
  std::vector<std::unique_ptr<CachePath>> paths_;
  WakeHub hub_;
  std::vector<CacheCounters> counters_;
};

/// The process's registry: set once by main before the loops start (null: no proxy_cache_path).
CacheRegistry* registry();
void set_registry(CacheRegistry* r);

}  // namespace kosoku::cache
