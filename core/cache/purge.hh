// Cache purge (the shapes of ngx_cache_purge / nginx plus, issue 5): an exact key — with all its Vary variants —,
// a wildcard key (`*` matches any run of bytes: `http:example.com/img/*`, `*.jpg`), or `*` alone for the whole
// zone. The keys zone is shared by every core, so a purge done on one core is seen by all at once; the files
// are unlinked afterwards (through the caller's function: the loop's DiskQueue, or a plain unlink on the
// serial console's thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace kosoku::cache {

class CachePath;

/// `*` matches any run of bytes (possibly empty); every other byte matches itself.
bool purge_match(std::string_view pattern, std::string_view key);
inline bool is_wildcard(std::string_view pattern) { return pattern.find('*') != std::string_view::npos; }

struct PurgeResult {
  size_t removed = 0;   // entries removed (files and Vary primaries)
  uint64_t bytes = 0;   // bytes on disk released
};

/// Removes what `pattern` selects from `path` (see the header comment). `unlink_file` gets the path of every
/// removed file.
PurgeResult purge(CachePath& path, std::string_view pattern, const std::function<void(std::string)>& unlink_file);

/// The serial console's `cache purge ZONE KEY` (and `cache stats`): the text reply. Blocking unlinks: call it
/// from the console thread, never from a loop.
std::string console_command(std::string_view line);

}  // namespace kosoku::cache
