// The cache's decision function; see decision.hh.
#include "core/cache/decision.hh"

namespace kosoku::cache {

namespace {

CacheDecision make(CacheStep step, CacheStatus status = CacheStatus::kNone, bool store = false) {
  CacheDecision d;
  d.step = step;
  d.status = status;
  d.store = store;
  return d;
}

// After the fetch: the origin's answer against the stale copy in hand (kRead), if any.
CacheDecision after_fetch(const CacheFacts& f, int64_t now, const CacheLocConf& cc) {
  const bool stale_copy = f.entry == EntryState::kRead && f.freshness != nullptr;
  if (f.fetch == FetchOutcome::kNotModified && stale_copy) {
    return make(CacheStep::kRevalidated, CacheStatus::kRevalidated);
  }
  if (f.fetch == FetchOutcome::kError) {
    if (stale_copy) {
      const Freshness& fr = *f.freshness;
      const uint32_t use = cc.use_stale;
      const bool stale = f.status == 504 ? stale_allowed(fr, now, use, kStaleTimeout)
                                         : stale_allowed(fr, now, use, kStaleError) ||
                                               (f.status == 502 && stale_allowed(fr, now, use, kStaleInvalidHeader));
      if (stale) return make(CacheStep::kStale, CacheStatus::kStale);
    }
    return make(CacheStep::kFail);
  }
  // A response (a 304 that does not match the stored validators is one too).
  if (stale_copy) {
    const uint32_t cond = stale_condition_for_status(f.status);
    if (cond != 0 && stale_allowed(*f.freshness, now, cc.use_stale, cond)) {
      return make(CacheStep::kStale, CacheStatus::kStale);
    }
  }
  return make(CacheStep::kPass);
}

// A stale entry whose head is read.
CacheDecision stale_entry(const CacheFacts& f, int64_t now, const CacheLocConf& cc) {
  if (f.lock == LockState::kUntried) return make(CacheStep::kLock);
  const bool updating_ok = stale_allowed(*f.freshness, now, cc.use_stale, kStaleUpdating);
  const CacheDecision refetch = cc.revalidate && f.has_validators
                                    ? make(CacheStep::kRevalidate, CacheStatus::kExpired, true)
                                    : make(CacheStep::kMiss, CacheStatus::kExpired, true);
  if (f.lock == LockState::kBusy) {
    if (updating_ok) return make(CacheStep::kUpdating, CacheStatus::kUpdating);
    if (cc.lock) return make(CacheStep::kWaitLock);
    return refetch;
  }
  if (cc.background_update && updating_ok) {
    CacheDecision d = make(CacheStep::kStale, CacheStatus::kStale);
    d.background = true;
    return d;
  }
  return refetch;
}

// No entry: proxy_cache_min_uses, then proxy_cache_lock.
CacheDecision no_entry(const CacheFacts& f, const CacheLocConf& cc) {
  if (!f.uses_counted) return make(CacheStep::kCountUse);
  const bool store = f.uses >= cc.min_uses;
  if (store && cc.lock) {
    if (f.lock == LockState::kUntried) return make(CacheStep::kLock);
    if (f.lock == LockState::kBusy) return make(CacheStep::kWaitLock);
  }
  return make(CacheStep::kMiss, CacheStatus::kMiss, store);
}

}  // namespace

std::string_view cache_status_name(CacheStatus s) {
  switch (s) {
    case CacheStatus::kNone: return "";
    case CacheStatus::kMiss: return "MISS";
    case CacheStatus::kBypass: return "BYPASS";
    case CacheStatus::kExpired: return "EXPIRED";
    case CacheStatus::kStale: return "STALE";
    case CacheStatus::kUpdating: return "UPDATING";
    case CacheStatus::kRevalidated: return "REVALIDATED";
    case CacheStatus::kHit: return "HIT";
  }
  return "";
}

std::string_view cache_step_name(CacheStep s) {
  switch (s) {
    case CacheStep::kLookup: return "lookup";
    case CacheStep::kOpen: return "open";
    case CacheStep::kCountUse: return "count-use";
    case CacheStep::kLock: return "lock";
    case CacheStep::kHit: return "hit";
    case CacheStep::kUpdating: return "updating";
    case CacheStep::kStale: return "stale";
    case CacheStep::kRevalidate: return "revalidate";
    case CacheStep::kMiss: return "miss";
    case CacheStep::kBypass: return "bypass";
    case CacheStep::kWaitLock: return "wait-lock";
    case CacheStep::kRevalidated: return "revalidated";
    case CacheStep::kPass: return "pass";
    case CacheStep::kFail: return "fail";
  }
  return "";
}

bool cached_method(http::Method m, const CacheLocConf& cc) {
  uint32_t bit = 0;
  switch (m) {
    case http::Method::kGet: bit = kMethodGet; break;
    case http::Method::kHead: bit = kMethodHead; break;
    case http::Method::kPost: bit = kMethodPost; break;
    default: break;
  }
  return (cc.methods & bit) != 0;
}

CacheDecision decide_cache(const CacheFacts& f, int64_t now_s, const CacheLocConf& cc) {
  if (f.fetch != FetchOutcome::kNone) return after_fetch(f, now_s, cc);
  if (f.bypass) return make(CacheStep::kBypass, CacheStatus::kBypass, true);
  if (f.lock == LockState::kTimedOut) {
    CacheDecision d = make(CacheStep::kMiss, CacheStatus::kMiss, false);
    d.lock_timeout = true;
    return d;
  }
  switch (f.entry) {
    case EntryState::kUnknown:
      return make(CacheStep::kLookup);
    case EntryState::kOnDisk:
      return make(CacheStep::kOpen);
    case EntryState::kHot:
      if (f.freshness != nullptr && f.freshness->fresh(now_s)) return make(CacheStep::kHit, CacheStatus::kHit);
      return make(CacheStep::kOpen);  // anything but a hit needs the file (revalidation, background update)
    case EntryState::kRead:
      if (f.freshness == nullptr) return no_entry(f, cc);
      if (f.freshness->fresh(now_s)) return make(CacheStep::kHit, CacheStatus::kHit);
      return stale_entry(f, now_s, cc);
    case EntryState::kNone:
      return no_entry(f, cc);
  }
  return no_entry(f, cc);
}

}  // namespace kosoku::cache
