// A purge request on a loop (either form of proxy_cache_purge): the client check (`from`), the key and its scope
// (purge_key.hh), the request's options — `Surrogate-Key: t1 t2` makes it a tag purge (tags.hh), and
// `Fastly-Soft-Purge: 1` a soft one — then the purge itself (purge.hh): its record in the core's purge log
// (purge_log.hh), the selection a step per loop iteration, and the answer once every selected entry has left
// the keys zone (or, soft, is marked stale):
//   200 "Successful purge" (or "Successful soft purge") with `Entries: N`;
//   404                                        nothing was selected;
//   400                                        a Surrogate-Key list that is empty, has an invalid tag or more
//                                              than 256 tags;
//   403                                        `from` refuses the client, or the key leaves the request's host;
//   500                                        the purge log could not be written: nothing was purged;
//   503                                        the disk queue is full (nothing was purged), or, with
//                                              Retry-After, the cache loader has not finished (entries not yet
//                                              indexed could not be selected).
// The files are unlinked after the answer, a few at a time; an unlink that fails is logged once per purge and
// counted, and the purge log keeps its entry purged across a restart. A purge is never forwarded. A client that
// goes away meanwhile does not stop the purge (PurgeRun owns itself).
#pragma once

#include "core/cache/cache_handler.hh"
#include "core/config/variables.hh"

namespace kosoku::cache {

/// Answers `ex` as a purge of `path` with the key of `key_template` (the location's proxy_cache_key for the
/// method form, the KEY of `proxy_cache_purge ZONE KEY` otherwise).
void start_purge(CacheModule& m, http::Exchange& ex, CachePath& path, const config::Template& key_template);

}  // namespace kosoku::cache
