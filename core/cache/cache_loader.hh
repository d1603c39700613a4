// nginx's cache loader and cache manager for one proxy_cache_path, run by one loop (CacheModule gives path i
// to core i % workers).
//
// Loader (at start): walks PATH (the level directories, and PATH/temp), and for every file named like an
// entry (32 hex digits, at the right depth, in the right level directory) reads its header through the
// DiskQueue and adds it to the keys zone (CacheZone::Commit::only_if_absent: never over an entry a request
// stored meanwhile; Vary primaries are rebuilt from the variants' headers) — unless a purge of an earlier run
// covers the file (purge_log.hh): then it is unlinked, or for a soft purge loaded as stale. Everything else —
// temp files left by a crash, corrupt or truncated entries, stray files — is unlinked, as nginx does (the purge
// log's files excepted).
// Bounded work per loop iteration: at most `loader_files` directory entries are examined per poll() and at most kMaxReads header
// reads are in flight, so the loop keeps serving while the cache loads. Until the loader is done, a lookup that
// misses the zone still tries the file (cache_handler.cc), so entries not yet loaded are hits too.
// Directory listing (opendir/readdir) is the one file-system call made directly on the loop: io_uring has no
// getdents operation. It touches only the cache's own directories, at most `loader_files` entries per
// iteration.
//
// Manager (every `manager_sleep`, at least 1 s apart when idle): removes entries not used for `inactive` (a
// sweep over part of the zone per pass) and, while the bytes on disk exceed `max_size`, the least recently used
// entries; at most `manager_files` removals per pass. Files are unlinked through the DiskQueue.
#pragma once

#include <dirent.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cache/cache_paths.hh"
#include "core/cache/cache_store.hh"
#include "core/disk/disk_queue.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::cache {

class CacheMaintainer final : public reactor::Poller, public reactor::Timer {
 public:
  static constexpr size_t kMaxReads = 16;
  static constexpr size_t kSweepBuckets = 4096;

  struct Stats {
    uint64_t loaded = 0;      // entries added by the loader
    uint64_t removed = 0;     // files the loader unlinked (temp leftovers, corrupt, stray)
    uint64_t purged = 0;      // ... of them, files a purge of an earlier run covers (purge_log.hh)
    uint64_t inactive = 0;    // entries the manager removed for `inactive`
    uint64_t evicted = 0;     // entries the manager removed for `max_size`
  };

  /// Starts loading at once (poll() does the work). `wall_now` gives the wall clock (seconds); null: the
  /// reactor's.
  CacheMaintainer(reactor::Reactor& r, CachePath& path, disk::DiskQueue& q, config::AioMode aio);
  ~CacheMaintainer();
  CacheMaintainer(const CacheMaintainer&) = delete;
  CacheMaintainer& operator=(const CacheMaintainer&) = delete;

  bool poll() override;  // loader steps
  void fire() override;  // a manager pass
  /// One manager pass now (tests); returns the entries removed.
  size_t manage(int64_t now_s);

  bool loading() const { return !done_; }
  const Stats& stats() const { return stats_; }
  /// Stops starting new work (shutdown); in-flight reads finish on their own.
  void stop() { stopped_ = true; }
  /// Header reads still in flight (the owner keeps this object alive until 0).
  size_t in_flight() const;

 private:
  struct Read;
  struct Dir {
    std::string path;
    DIR* dir = nullptr;
    size_t depth = 0;   // 0: PATH itself
    bool temp = false;  // PATH/temp: everything in it is a leftover
  };
  void walk(size_t budget);
  void visit(Dir& d, const dirent* e);
  void start_read(std::string file, const Hash128& h);
  void read_done(Read& r, int error);
  void unlink(std::string file);
  void finish_loading();

  reactor::Reactor& r_;
  CachePath& path_;
  disk::DiskQueue& q_;
  config::AioMode aio_;
  std::vector<Dir> stack_;
  std::vector<std::unique_ptr<Read>> reads_;
  std::vector<std::pair<std::string, Hash128>> pending_;  // files waiting for a free read slot
  bool done_ = false;
  bool walked_ = false;
  bool stopped_ = false;
  Stats stats_;
};

}  // namespace kosoku::cache
