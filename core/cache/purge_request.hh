// A purge request on a loop (either form of proxy_cache_purge): the client check (`from`), the key and its scope
// (purge_key.hh), then the purge itself (purge.hh) with its unlinks through the cache path's DiskQueue — at most
// kWindow in flight, so a wildcard over a large zone neither floods the queue nor blocks the loop — and the
// answer once every unlink has completed:
//   200 "Successful purge" with `Entries: N`   the entries are gone from the disk and the keys zone;
//   404                                        nothing was selected;
//   403                                        `from` refuses the client, or the key leaves the request's host;
//   500 (503 for a disk queue overflow)        an unlink failed: the error log has `unlink() "PATH" failed
//                                              (ERRNO: TEXT)`; the entries not removed are still cached;
//   503 with Retry-After                       the cache loader has not finished (entries not yet indexed
//                                              could not be selected and would come back with it).
// A purge is never forwarded. A client that goes away meanwhile does not stop the unlinks already submitted:
// their entries still leave the zone when their files are gone (PurgeState keeps itself until then).
#pragma once

#include "core/cache/cache_handler.hh"
#include "core/config/variables.hh"

namespace kosoku::cache {

/// Answers `ex` as a purge of `path` with the key of `key_template` (the location's proxy_cache_key for the
/// method form, the KEY of `proxy_cache_purge ZONE KEY` otherwise).
void start_purge(CacheModule& m, http::Exchange& ex, CachePath& path, const config::Template& key_template);

}  // namespace kosoku::cache
