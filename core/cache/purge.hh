// Cache purge (the shapes of ngx_cache_purge / nginx plus): what a PurgeTarget selects (purge_key.hh: an exact
// key with all its Vary variants, a key prefix from a trailing `*`, the whole zone, or the console's glob) is
// removed from the disk first and from the keys zone second.
//
// Design: a purge reports what happened to the files, and the keys zone never forgets an entry whose file is
// still on disk. Each selected file is unlinked (through the caller: the loop's DiskQueue, or a plain unlink
// on the serial console's thread); only when the unlink succeeded (or the file was already gone) is the entry
// removed from the zone (CacheZone::forget, only if it is still the version that was selected). An unlink that
// fails (EROFS, EIO, EACCES, a full disk queue) leaves its entry in the zone and on disk — still served, and
// still there after a restart, which is what the purge's answer then says: 500 (503 for a disk queue overflow)
// with an `unlink() "PATH" failed (30: Read-only file system)` line in the error log, instead of nginx's
// ngx_cache_purge, which logs the failure, answers 200 and forgets the entry until the next start brings it
// back. After the first failure no further file of that purge is tried (on a read-only or failing disk the
// rest would fail alike: one log line, not thousands). File-less entries (Vary primaries, placeholders) go last,
// and only when no file failed, so a variant kept on disk stays reachable through its primary.
// While the files are being unlinked (one disk round trip) the selected entries are still served; a purge is
// complete when it is answered. The keys zone is shared by every core, so that is then seen by all at once.
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
  size_t removed = 0;       // entries removed (files and Vary primaries)
  uint64_t bytes = 0;       // bytes on disk released
  size_t failed = 0;        // files that could not be unlinked (their entries stay)
  int error = 0;            // the first failure's errno (positive); 0: none
  std::string failed_file;  // the first file that could not be unlinked
};

/// One purge: the entries selected when it is made, then one unlink per file (see the header comment).
class PurgeJob {
 public:
  PurgeJob(CachePath& path, const PurgeTarget& target);

  /// The next entry whose file is to be unlinked (its path: path_of(view.hash)); null when none is left or
  /// after a failure. The pointer stays valid for the job's life.
  const EntryView* next();
  /// The unlink of `v`'s file returned `result` (0 or -errno; -ENOENT counts as removed).
  void unlinked(const EntryView& v, int result);
  /// After the last unlinked(): removes the file-less entries when every file was unlinked (none failed, none
  /// left untried by a caller that stopped early). Idempotent.
  void finish();

  CachePath& path() { return path_; }
  const PurgeResult& result() const { return result_; }

 private:
  CachePath& path_;
  std::vector<EntryView> files_;     // entries with a file, in selection order
  std::vector<EntryView> fileless_;  // Vary primaries and placeholders
  size_t next_ = 0;
  bool finished_ = false;
  PurgeResult result_;
};

/// The whole purge at once, with a synchronous `unlink_file(path)` returning 0 or -errno (the serial console's
/// thread, tests): never call it on a loop with a blocking unlink.
PurgeResult purge(CachePath& path, const PurgeTarget& target, const std::function<int(const std::string&)>& unlink_file);

/// A soft purge (Fastly-Soft-Purge): every complete entry `target` selects is marked stale from `now_s` on
/// (CacheZone::mark_stale) instead of removed — its file stays, and the next request serves it stale where
/// proxy_cache_use_stale or its stale-while-revalidate window allow, else revalidates it. No disk I/O: callable
/// on a loop. `removed` counts the entries marked, `bytes` their files.
PurgeResult soft_purge(CachePath& path, const PurgeTarget& target, int64_t now_s);

/// The console's target for KEY: `*` alone is the whole zone, a KEY with `*` a glob (purge_match), else exact.
PurgeTarget console_target(std::string_view key);

/// The serial console's `cache purge ZONE KEY` (and `cache stats`): the text reply. Blocking unlinks: call it
/// from the console thread, never from a loop.
std::string console_command(std::string_view line);

}  // namespace kosoku::cache
