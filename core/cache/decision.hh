// What a cached request does next (nginx's ngx_http_upstream_cache / ngx_http_file_cache_open outcomes), as one
// pure function: the facts gathered so far about the request's entry, the request and the origin's answer, the
// time and the location's proxy_cache_* settings in, one step out. No I/O, no clock, no globals: the request
// flow (CacheState, cache_state.hh) gathers the facts, calls decide_cache(), acts on the step and, when the step
// asks for a fact it does not have yet (the entry's head, the use count, the lock), gathers it and calls again.
//
// The rules, in order (nginx's semantics; RFC 9111 where freshness.hh says so):
//   after a fetch (CacheFacts::fetch set):
//     - a 304 matching the stored validators of the entry that was revalidated → kRevalidated (REVALIDATED);
//     - an origin status proxy_cache_use_stale names (http_500, http_404...) or a fetch error (error, timeout,
//       invalid_header: 502 is `error` or `invalid_header`, 504 is `timeout`) with a stale copy in hand that
//       may be served (stale_allowed: never for must-revalidate, proxy-revalidate, s-maxage, no-cache) →
//       kStale (STALE);
//     - else kPass (the response goes to the client, and to the store when storable) or kFail (the error);
//   before it:
//     1. proxy_cache_bypass → kBypass (BYPASS; the response is stored), without looking at the entry;
//     2. proxy_cache_lock_timeout passed → kMiss (MISS) without storing (nginx);
//     3. not looked up yet → kLookup; in the zone (or possibly on disk) but its head unread → kOpen;
//     4. fresh (its in-memory copy or its file) → kHit (HIT); a stale in-memory copy → kOpen (the file);
//     5. stale: the lock (the entry's updating mark) is tried first (kLock); then
//          lock taken:  proxy_cache_background_update and use_stale updating → kStale (STALE), a background
//                       fetch updates the entry (and gets the lock);
//                       else kRevalidate with proxy_cache_revalidate and a stored validator, else kMiss (EXPIRED);
//          lock busy:   use_stale updating → kUpdating (UPDATING); proxy_cache_lock → kWaitLock; else as taken;
//     6. no entry: the use is counted first (kCountUse); below proxy_cache_min_uses → kMiss without storing;
//        with proxy_cache_lock the lock is tried (kLock): busy → kWaitLock, taken → kMiss (MISS, stored).
// A look that waited for the lock starts again at 3 with fresh facts (the lock's deadline stays).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cache/cache_conf.hh"
#include "core/cache/freshness.hh"
#include "core/http/parser.hh"

namespace kosoku::cache {

/// $upstream_cache_status values.
enum class CacheStatus : uint8_t { kNone, kMiss, kBypass, kExpired, kStale, kUpdating, kRevalidated, kHit };
std::string_view cache_status_name(CacheStatus s);

/// Whether requests with `m` go through the cache at all (proxy_cache_methods; GET and HEAD always). Requests
/// that do not are forwarded as they are, with an empty $upstream_cache_status.
bool cached_method(http::Method m, const CacheLocConf& cc);

/// What the request knows of its entry.
enum class EntryState : uint8_t {
  kUnknown,  // not looked up in the keys zone yet
  kNone,     // no complete entry: not in the zone (and the cache loader is done), or its file could not be read
  kOnDisk,   // the zone has a complete entry, or the loader has not finished (the file may exist): head unread
  kHot,      // an in-memory copy of the entry (HotCache): `freshness` is its
  kRead,     // the entry's head was read from its file: `freshness` and `has_validators` are its
};

/// The entry's lock (proxy_cache_lock, and the updating mark of a stale entry; CacheZone::try_lock).
enum class LockState : uint8_t {
  kUntried,
  kHeld,      // this request holds it
  kBusy,      // another request holds it
  kTimedOut,  // proxy_cache_lock_timeout passed while waiting for it
};

/// What the origin answered (after a fetch).
enum class FetchOutcome : uint8_t {
  kNone,         // no fetch yet
  kNotModified,  // a 304 to the revalidation that matches the stored validators (validators_match_304)
  kResponse,     // a response head with `status`
  kError,        // no response: the fetch's error status (502 error / invalid header, 504 timeout, 500...)
};

struct CacheFacts {
  bool bypass = false;               // proxy_cache_bypass is true for the request
  EntryState entry = EntryState::kUnknown;
  const Freshness* freshness = nullptr;  // kHot, kRead: the stored response's times and flags
  bool has_validators = false;       // kRead: the stored response has an ETag or a Last-Modified
  bool uses_counted = false;         // kNone: this look counted its use (CacheZone::count_use) ...
  uint32_t uses = 0;                 // ... and the key's uses so far, this one included
  LockState lock = LockState::kUntried;
  FetchOutcome fetch = FetchOutcome::kNone;
  int status = 0;                    // kResponse: the origin's status; kError: the error status
};

enum class CacheStep : uint8_t {
  // A fact is missing: gather it, then decide again.
  kLookup,     // look the key (and its Vary variant) up in the keys zone
  kOpen,       // read the entry's head from its file
  kCountUse,   // count this use of the key (proxy_cache_min_uses)
  kLock,       // try the entry's lock
  // An answer.
  kHit,        // serve the fresh entry
  kUpdating,   // serve the stale entry: another request is updating it
  kStale,      // serve the stale entry: `background`: and update it in the background (the update takes the
               // lock); else instead of the origin's error
  kRevalidate, // fetch with the stored validators (If-None-Match / If-Modified-Since); the entry is kept
  kMiss,       // fetch and fill (`store`); status MISS, or EXPIRED for a stale entry fetched again
  kBypass,     // fetch, past the entry; the response is stored
  kWaitLock,   // another request fills the entry: wait for its commit, up to proxy_cache_lock_timeout
  kRevalidated,  // the 304 refreshes the stored head and validity (RFC 9111 §4.3.4); serve the entry
  kPass,       // the origin's response goes to the client (and to the store when storable)
  kFail,       // the fetch's error goes to the client
};
std::string_view cache_step_name(CacheStep s);

struct CacheDecision {
  CacheStep step = CacheStep::kLookup;
  /// $upstream_cache_status the step gives; kNone for the fact-gathering steps, kWaitLock, kPass and kFail
  /// (a response passed on or an error keeps the status of the fetch that got it).
  CacheStatus status = CacheStatus::kNone;
  bool store = false;       // kMiss, kRevalidate, kBypass: a storable response fills the cache
  bool background = false;  // kStale: a background update starts
  bool lock_timeout = false;  // kMiss: because proxy_cache_lock_timeout passed
  bool operator==(const CacheDecision&) const = default;
};

/// The next step for `f` at `now_s` (wall clock, seconds since the epoch) under `cc` (see the rules above).
CacheDecision decide_cache(const CacheFacts& f, int64_t now_s, const CacheLocConf& cc);

}  // namespace kosoku::cache
