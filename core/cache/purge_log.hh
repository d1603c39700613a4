// The purge log of one proxy_cache_path: what makes a purge answered before a crash stay effective after the
// restart. A purge removes its entries from the keys zone before it answers, and their files afterwards
// (purge.hh); a file still on disk when the process dies would otherwise be loaded again by the next start's
// cache loader. So before it answers, every purge appends one record — its target (kind, key or scope, tags),
// soft or not, and its wall-clock second — to the log of the core that runs it, and the next start does not
// bring back any file the record covers (purge_record_covers): one whose request to the origin went out at or
// before that second and whose key (and tags) the target selects. A request of the purge's own second is
// covered too: at worst an entry stored just after a purge is fetched again after a restart, never the other way
// round. The same rule, applied at run time to the last purges (RecentPurges), stores a fill that was in flight
// during a purge as stale.
//
// Files (in PATH, beside the level directories; the cache loader leaves them alone):
//   purge.N.log     the records of core N during this run, appended through that core's DiskQueue (O_APPEND)
//   purge.replay    the previous runs' records, merged at start-up by CacheRegistry::create (blocking, before
//                   the loops run); deleted by the loader once it has applied them and unlinked every file
//                   they cover (kept when an unlink failed, so the next start tries again)
// Soft records (a soft purge marks entries stale instead of removing them) are applied by the loader as marks,
// and carried into core 0's new log at start-up, so a soft purge survives any number of restarts; at most
// kMaxSoftRecords of them are carried (the oldest are dropped first).
//
// Record: one line, `P1 <second> <kind e|p|a|g|t> <soft 0|1> <host_end|-1> <key in hex|-> [tag ...]`.
// A record that does not parse is skipped with a log line (a torn last line after a crash).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/cache/cache_store.hh"
#include "core/cache/purge_key.hh"

namespace kosoku::cache {

struct PurgeRecord {
  int64_t at = 0;  // the purge's wall-clock second
  bool soft = false;
  PurgeTarget target;
};

/// One log line (with its '\n').
std::string encode_purge_record(const PurgeRecord& r);
/// The record of one line (a trailing '\n' is ignored); nullopt when it does not parse.
std::optional<PurgeRecord> decode_purge_record(std::string_view line);

/// Whether target `t` selects the stored response `m` (its key, and tags).
bool purge_target_selects(const PurgeTarget& t, const EntryMeta& m);
/// Whether `r` covers the stored response `m`: its request to the origin went out at or before the purge's second
/// (so it may hold what the purge removed) and the target selects it.
bool purge_record_covers(const PurgeRecord& r, const EntryMeta& m);

/// The last purges of a zone, numbered, for the fills that were in flight while they ran (any core, any thread):
/// a fill whose request went out before a purge that selects it is stored stale, never fresh
/// (StoreWriter::commit). At most kKept are kept; a fill older than the oldest of them is treated as covered
/// (stale), so none slips through.
class RecentPurges {
 public:
  static constexpr size_t kKept = 256;
  /// The number of the last purge (0: none yet).
  uint64_t seq() const { return seq_.load(std::memory_order_acquire); }
  /// Records a purge before its selection starts.
  void add(const PurgeTarget& t);
  /// Whether a purge numbered after `since` selects `m`. Lock-free when there was none.
  bool cover(const EntryMeta& m, uint64_t since) const;

 private:
  std::atomic<uint64_t> seq_{0};
  mutable std::mutex mu_;
  std::deque<std::pair<uint64_t, PurgeTarget>> kept_;
  uint64_t dropped_ = 0;  // the number of the newest purge no longer kept
};

class PurgeLog {
 public:
  static constexpr size_t kMaxSoftRecords = 4096;

  /// Start-up, blocking: merges the previous runs' records of `dir` into purge.replay and starts this run's
  /// purge.N.log for `cores` cores (core 0's with the soft records carried over). A directory that cannot be
  /// written (a read-only cache) is no reason not to start: the failure is logged at crit, the old files stay
  /// as they are (the next start reads them again), and purges answer 500 while their records cannot be written.
  void open(const std::string& dir, int cores);

  /// This run's log of `core`, opened for each record (O_APPEND; no descriptor is held, so the file system can
  /// be remounted read-only); "" when open() was not called (tests), and then purges are not logged.
  const std::string& file(int core) const;
  /// The previous runs' records (immutable after open(): read by any core).
  const std::vector<PurgeRecord>& replay() const { return replay_; }
  /// The replayed record that covers `m`, hard records first; null when none.
  const PurgeRecord* replayed_cover(const EntryMeta& m) const;
  /// purge.replay, or "" when there is none or it must stay (the soft records could not be carried over).
  const std::string& replay_path() const { return carried_ ? replay_path_ : kNoPath; }

  /// Whether `name` (a file name in PATH) is one of the log's files.
  static bool is_log_file(std::string_view name);

 private:
  static inline const std::string kNoPath;
  std::vector<std::string> files_;
  std::vector<PurgeRecord> replay_;
  absl::flat_hash_map<std::string, std::vector<size_t>> exact_;  // key → the exact records of replay_
  std::vector<size_t> others_;                                  // the other records of replay_
  std::string replay_path_;
  bool carried_ = true;  // the soft records made it into this run's log
};

}  // namespace kosoku::cache
