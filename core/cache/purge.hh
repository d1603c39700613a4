// Cache purge (the shapes of ngx_cache_purge / nginx plus, and the CDNs' tag and soft purges): what a
// PurgeTarget selects (purge_key.hh: an exact key with all its Vary variants, a key prefix from a trailing `*`,
// the whole zone, the console's glob, or the entries carrying some tags, from the zone's TagIndex) leaves the
// keys zone first and the disk afterwards — or, for a soft purge, is only marked stale (CacheZone::mark_stale).
//
// Design: a purge is complete when it is answered, for every core: the answer waits until every selected entry
// has left the keys zone (which every core reads), and until the purge's record is in the purge log
// (purge_log.hh), so that a file not yet unlinked when the process dies is not loaded again by the next start.
// The files are unlinked after the answer, through the loop's DiskQueue, a few at a time. An unlink that fails
// (EROFS, EIO, a full disk queue) is logged (`unlink() "PATH" failed (30: Read-only file system)`, once per
// purge: after the first failure no further file of that purge is tried, as the rest would fail alike) and
// counted; its entry is gone from the zone all the same, and the log keeps it gone after a restart, whose
// loader unlinks the file. A purge whose record cannot be written changes nothing and answers 500.
//
// Selection is incremental (PurgeSelection::step): a budget of entries, buckets or key shards per call, so a
// purge of a million entries out of ten never holds a loop for long — the loop serves other requests between
// steps. A selected entry whose lock is held (a fill in flight) stays as a placeholder marked stale, so that
// the fill's result is stored stale: it was fetched before the purge, or while it ran.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/cache/cache_zone.hh"
#include "core/cache/purge_key.hh"

namespace kosoku::cache {

class CachePath;

/// `*` matches any run of bytes (possibly empty); every other byte matches itself (the console's patterns).
bool purge_match(std::string_view pattern, std::string_view key);
inline bool is_wildcard(std::string_view pattern) { return pattern.find('*') != std::string_view::npos; }

struct PurgeResult {
  size_t removed = 0;       // entries removed from the zone (files and Vary primaries), or marked stale
  uint64_t bytes = 0;       // their bytes on disk
  size_t failed = 0;        // files that could not be unlinked (their entries are gone all the same)
  int error = 0;            // the first failure's errno (positive); 0: none
  std::string failed_file;  // the first file that could not be unlinked
  int log_error = 0;        // the purge log could not be written (errno): nothing was purged
};

/// The selection of one purge: removes (or, `soft`, marks stale at `now_s`) the entries `target` selects, a
/// budget at a time; collects the files to unlink. No disk I/O.
class PurgeSelection {
 public:
  /// Work per step(): entries of a tag list, zone buckets, or key shards.
  static constexpr size_t kStepEntries = 4096;
  static constexpr size_t kStepBuckets = 512;

  PurgeSelection(CachePath& path, const PurgeTarget& target, bool soft, int64_t now_s);
  /// Does up to about `entries` entries' worth of work; true when the selection is complete.
  bool step(size_t entries = kStepEntries);
  bool done() const { return phase_ == Phase::kDone; }
  const PurgeResult& result() const { return result_; }
  /// The files of the removed entries, to unlink once the purge is answered (empty for a soft purge).
  std::vector<Hash128>& files() { return files_; }

 private:
  enum class Phase : uint8_t { kExact, kVariants, kBuckets, kShards, kHashes, kDone };
  void take(const EntryView& v);
  void take_hash(const Hash128& h);

  CachePath& path_;
  PurgeTarget target_;
  bool soft_;
  int64_t now_s_;
  Phase phase_ = Phase::kDone;
  size_t cursor_ = 0;            // the next bucket, key shard or hash
  size_t shard_cost_ = 1;        // kShards: the keys of a shard, about
  uint64_t variants_of_ = 0;     // kVariants: the primary's tag
  std::vector<Hash128> hashes_;  // kHashes: the tagged entries
  std::vector<Hash128> files_;
  PurgeResult result_;
};

/// Whether the file of `h` is still to be unlinked after its purge: no newer complete entry replaced it (a fill
/// committed after the purge renames its file over the same name).
bool purge_unlink_due(CachePath& path, const Hash128& h);

/// The whole purge at once (the serial console's thread, tests): the record in core 0's purge log (if the log is
/// open), the selection, then `unlink_file(path)` per file (0 or -errno; -ENOENT counts as gone), stopping at
/// the first failure. Blocking: never call it on a loop. A record that cannot be written fails the purge
/// (`log_error`, nothing removed).
PurgeResult purge(CachePath& path, const PurgeTarget& target, const std::function<int(const std::string&)>& unlink_file,
                  int64_t now_s, bool soft = false);

/// The console's target for KEY: `*` alone is the whole zone, a KEY with `*` a glob (purge_match), else exact.
PurgeTarget console_target(std::string_view key);

/// The serial console's `cache purge ZONE KEY` (and `cache stats`): the text reply. Blocking unlinks: call it
/// from the console thread, never from a loop.
std::string console_command(std::string_view line);

}  // namespace kosoku::cache
