// decide_cache (core/cache/decision.hh): every branch of the cache's decision, one table row each, with nginx's
// semantics (proxy_cache_bypass, _lock, _lock_timeout, _min_uses, _revalidate, _use_stale, _background_update)
// and RFC 9111's stale rules (must-revalidate & co., no-cache, stale-while-revalidate, stale-if-error).
#include "core/cache/decision.hh"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kosoku::cache {
namespace {

constexpr int64_t kNow = 100000;

// Stored responses, seen at kNow.
Freshness fresh() {
  Freshness f;
  f.response_time = kNow - 10;
  f.lifetime = 60;
  return f;
}
Freshness stale() {  // expired 50 s ago
  Freshness f;
  f.response_time = kNow - 110;
  f.lifetime = 60;
  return f;
}
Freshness stale_no_stale() {  // must-revalidate, proxy-revalidate, s-maxage or no-cache
  Freshness f = stale();
  f.flags = kFlagNoStale;
  return f;
}
Freshness always_revalidate() {  // no-cache: never fresh, whatever its lifetime
  Freshness f = fresh();
  f.flags = kFlagAlwaysRevalidate | kFlagNoStale;
  return f;
}
Freshness stale_while_revalidate() {  // stale-while-revalidate=100, 50 s into it
  Freshness f = stale();
  f.stale_while_revalidate = 100;
  return f;
}
Freshness stale_while_revalidate_over() {  // stale-while-revalidate=30, 50 s after expiry: over
  Freshness f = stale();
  f.stale_while_revalidate = 30;
  return f;
}
Freshness stale_if_error() {  // stale-if-error=100, 50 s into it
  Freshness f = stale();
  f.stale_if_error = 100;
  return f;
}

const Freshness kFresh = fresh();
const Freshness kStale = stale();
const Freshness kStaleNoStale = stale_no_stale();
const Freshness kAlwaysRevalidate = always_revalidate();
const Freshness kSwr = stale_while_revalidate();
const Freshness kSwrOver = stale_while_revalidate_over();
const Freshness kSie = stale_if_error();

CacheFacts read(const Freshness& f, LockState lock = LockState::kUntried, bool validators = false) {
  CacheFacts x;
  x.entry = EntryState::kRead;
  x.freshness = &f;
  x.lock = lock;
  x.has_validators = validators;
  return x;
}
CacheFacts hot(const Freshness& f) {
  CacheFacts x;
  x.entry = EntryState::kHot;
  x.freshness = &f;
  return x;
}
CacheFacts none(bool counted = false, uint32_t uses = 0, LockState lock = LockState::kUntried) {
  CacheFacts x;
  x.entry = EntryState::kNone;
  x.uses_counted = counted;
  x.uses = uses;
  x.lock = lock;
  return x;
}
CacheFacts fetched(CacheFacts x, FetchOutcome o, int status) {
  x.fetch = o;
  x.status = status;
  return x;
}
CacheFacts bypass(CacheFacts x) {
  x.bypass = true;
  return x;
}

CacheLocConf conf(uint32_t use_stale = 0, bool lock = false, bool revalidate = false, bool background = false,
                  uint32_t min_uses = 1) {
  CacheLocConf c;
  c.enabled = true;
  c.use_stale = use_stale;
  c.lock = lock;
  c.revalidate = revalidate;
  c.background_update = background;
  c.min_uses = min_uses;
  return c;
}

CacheDecision want(CacheStep step, CacheStatus status = CacheStatus::kNone, bool store = false) {
  CacheDecision d;
  d.step = step;
  d.status = status;
  d.store = store;
  return d;
}
CacheDecision want_background_stale() {
  CacheDecision d = want(CacheStep::kStale, CacheStatus::kStale);
  d.background = true;
  return d;
}
CacheDecision want_lock_timeout() {
  CacheDecision d = want(CacheStep::kMiss, CacheStatus::kMiss, false);
  d.lock_timeout = true;
  return d;
}

struct Row {
  std::string name;
  CacheFacts facts;
  CacheLocConf conf;
  CacheDecision want;
};

std::string show(const CacheDecision& d) {
  return std::string(cache_step_name(d.step)) + " status=" + std::string(cache_status_name(d.status)) +
         " store=" + (d.store ? "1" : "0") + " background=" + (d.background ? "1" : "0") +
         " lock_timeout=" + (d.lock_timeout ? "1" : "0");
}

void run(const std::vector<Row>& rows) {
  for (const Row& r : rows) {
    const CacheDecision got = decide_cache(r.facts, kNow, r.conf);
    EXPECT_EQ(got, r.want) << r.name << ": got " << show(got) << ", want " << show(r.want);
  }
}

constexpr uint32_t kUpdating = kStaleUpdating;
using L = LockState;
using S = CacheStep;
using St = CacheStatus;

TEST(CacheDecision, BeforeLookingAtTheEntry) {
  run({
      {"bypass skips the lookup and stores", bypass(CacheFacts{}), conf(), want(S::kBypass, St::kBypass, true)},
      {"bypass with a fresh entry in hand", bypass(read(kFresh)), conf(), want(S::kBypass, St::kBypass, true)},
      {"bypass before a lock timeout", bypass(read(kStale, L::kTimedOut)), conf(0, true),
       want(S::kBypass, St::kBypass, true)},
      {"lock timeout: MISS, not stored (nginx)", read(kStale, L::kTimedOut), conf(kUpdating, true),
       want_lock_timeout()},
      {"lock timeout without an entry", none(true, 5, L::kTimedOut), conf(0, true), want_lock_timeout()},
      {"not looked up yet", CacheFacts{}, conf(), want(S::kLookup)},
      {"in the zone, head unread", [] { CacheFacts x; x.entry = EntryState::kOnDisk; return x; }(), conf(),
       want(S::kOpen)},
  });
}

TEST(CacheDecision, FreshEntry) {
  run({
      {"fresh in-memory copy", hot(kFresh), conf(), want(S::kHit, St::kHit)},
      {"stale in-memory copy: the file is needed", hot(kStale), conf(kUpdating, false, true, true), want(S::kOpen)},
      {"fresh file", read(kFresh), conf(), want(S::kHit, St::kHit)},
      {"fresh file, the lock is not looked at", read(kFresh, L::kBusy), conf(0, true), want(S::kHit, St::kHit)},
      {"no-cache is never fresh: the lock first", read(kAlwaysRevalidate), conf(), want(S::kLock)},
  });
}

TEST(CacheDecision, StaleEntryLockTaken) {
  run({
      {"stale: the updating mark first", read(kStale), conf(), want(S::kLock)},
      {"EXPIRED refetch", read(kStale, L::kHeld), conf(), want(S::kMiss, St::kExpired, true)},
      {"EXPIRED revalidation (revalidate on, validator stored)", read(kStale, L::kHeld, true), conf(0, false, true),
       want(S::kRevalidate, St::kExpired, true)},
      {"revalidate on, no validator: refetch", read(kStale, L::kHeld, false), conf(0, false, true),
       want(S::kMiss, St::kExpired, true)},
      {"validator, revalidate off: refetch", read(kStale, L::kHeld, true), conf(), want(S::kMiss, St::kExpired, true)},
      {"no-cache with validator: revalidation", read(kAlwaysRevalidate, L::kHeld, true), conf(0, false, true),
       want(S::kRevalidate, St::kExpired, true)},
      {"background update with use_stale updating: STALE", read(kStale, L::kHeld), conf(kUpdating, false, false, true),
       want_background_stale()},
      {"background update, revalidation is the update's", read(kStale, L::kHeld, true),
       conf(kUpdating, false, true, true), want_background_stale()},
      {"background update within stale-while-revalidate", read(kSwr, L::kHeld), conf(0, false, false, true),
       want_background_stale()},
      {"background update past stale-while-revalidate", read(kSwrOver, L::kHeld), conf(0, false, false, true),
       want(S::kMiss, St::kExpired, true)},
      {"background update without updating", read(kStale, L::kHeld), conf(kStaleError, false, false, true),
       want(S::kMiss, St::kExpired, true)},
      {"background update, must-revalidate: never stale", read(kStaleNoStale, L::kHeld, true),
       conf(kUpdating, false, true, true), want(S::kRevalidate, St::kExpired, true)},
      {"use_stale updating without background update: refetch", read(kStale, L::kHeld), conf(kUpdating),
       want(S::kMiss, St::kExpired, true)},
  });
}

TEST(CacheDecision, StaleEntryLockBusy) {
  run({
      {"updating: UPDATING", read(kStale, L::kBusy), conf(kUpdating), want(S::kUpdating, St::kUpdating)},
      {"updating beats proxy_cache_lock", read(kStale, L::kBusy), conf(kUpdating, true),
       want(S::kUpdating, St::kUpdating)},
      {"stale-while-revalidate window: UPDATING", read(kSwr, L::kBusy), conf(), want(S::kUpdating, St::kUpdating)},
      {"past stale-while-revalidate: refetch", read(kSwrOver, L::kBusy), conf(), want(S::kMiss, St::kExpired, true)},
      {"must-revalidate, proxy_cache_lock: wait", read(kStaleNoStale, L::kBusy), conf(kUpdating, true),
       want(S::kWaitLock)},
      {"no updating, proxy_cache_lock: wait", read(kStale, L::kBusy), conf(0, true), want(S::kWaitLock)},
      {"no lock: revalidate beside the other", read(kStale, L::kBusy, true), conf(0, false, true),
       want(S::kRevalidate, St::kExpired, true)},
      {"no lock: refetch beside the other", read(kStale, L::kBusy), conf(), want(S::kMiss, St::kExpired, true)},
  });
}

TEST(CacheDecision, NoEntry) {
  run({
      {"the use is counted first", none(), conf(0, true), want(S::kCountUse)},
      {"MISS, stored", none(true, 1), conf(), want(S::kMiss, St::kMiss, true)},
      {"below min_uses: not stored", none(true, 1), conf(0, false, false, false, 2), want(S::kMiss, St::kMiss, false)},
      {"min_uses reached: stored", none(true, 2), conf(0, false, false, false, 2), want(S::kMiss, St::kMiss, true)},
      {"below min_uses: no lock taken", none(true, 1), conf(0, true, false, false, 3),
       want(S::kMiss, St::kMiss, false)},
      {"proxy_cache_lock: the lock first", none(true, 1), conf(0, true), want(S::kLock)},
      {"proxy_cache_lock taken: MISS, stored", none(true, 1, L::kHeld), conf(0, true), want(S::kMiss, St::kMiss, true)},
      {"proxy_cache_lock busy: wait", none(true, 1, L::kBusy), conf(0, true), want(S::kWaitLock)},
      {"use_stale updating means nothing without an entry", none(true, 1, L::kBusy), conf(kUpdating, true),
       want(S::kWaitLock)},
      {"a read entry without its head is none", [] { CacheFacts x = none(true, 1); x.entry = EntryState::kRead;
                                                     return x; }(), conf(), want(S::kMiss, St::kMiss, true)},
  });
}

TEST(CacheDecision, AfterTheFetch) {
  const uint32_t k5xx = kStaleHttp500 | kStaleHttp502 | kStaleHttp503 | kStaleHttp504;
  run({
      {"matching 304: REVALIDATED", fetched(read(kStale), FetchOutcome::kNotModified, 304), conf(0, false, true),
       want(S::kRevalidated, St::kRevalidated)},
      {"matching 304 without the entry: passed on", fetched(none(), FetchOutcome::kNotModified, 304), conf(),
       want(S::kPass)},
      {"a 304 that does not match: passed on", fetched(read(kStale), FetchOutcome::kResponse, 304), conf(k5xx),
       want(S::kPass)},
      {"200: passed on", fetched(read(kStale), FetchOutcome::kResponse, 200), conf(k5xx | kStaleError),
       want(S::kPass)},
      {"500 with http_500: STALE", fetched(read(kStale), FetchOutcome::kResponse, 500), conf(kStaleHttp500),
       want(S::kStale, St::kStale)},
      {"500 with http_502 only: passed on", fetched(read(kStale), FetchOutcome::kResponse, 500), conf(kStaleHttp502),
       want(S::kPass)},
      {"500 with error only: passed on", fetched(read(kStale), FetchOutcome::kResponse, 500), conf(kStaleError),
       want(S::kPass)},
      {"404 with http_404: STALE", fetched(read(kStale), FetchOutcome::kResponse, 404), conf(kStaleHttp404),
       want(S::kStale, St::kStale)},
      {"429 with http_429: STALE", fetched(read(kStale), FetchOutcome::kResponse, 429), conf(kStaleHttp429),
       want(S::kStale, St::kStale)},
      {"503 within stale-if-error: STALE", fetched(read(kSie), FetchOutcome::kResponse, 503), conf(),
       want(S::kStale, St::kStale)},
      {"501 is no use_stale condition", fetched(read(kSie), FetchOutcome::kResponse, 501), conf(~0u),
       want(S::kPass)},
      {"500, must-revalidate: passed on", fetched(read(kStaleNoStale), FetchOutcome::kResponse, 500), conf(k5xx),
       want(S::kPass)},
      {"500 without a stale copy: passed on", fetched(none(), FetchOutcome::kResponse, 500), conf(k5xx),
       want(S::kPass)},
      {"502 error with error: STALE", fetched(read(kStale), FetchOutcome::kError, 502), conf(kStaleError),
       want(S::kStale, St::kStale)},
      {"502 error with invalid_header: STALE", fetched(read(kStale), FetchOutcome::kError, 502),
       conf(kStaleInvalidHeader), want(S::kStale, St::kStale)},
      {"500 error with invalid_header only: fail", fetched(read(kStale), FetchOutcome::kError, 500),
       conf(kStaleInvalidHeader), want(S::kFail)},
      {"500 error with error: STALE", fetched(read(kStale), FetchOutcome::kError, 500), conf(kStaleError),
       want(S::kStale, St::kStale)},
      {"504 timeout with error only: fail", fetched(read(kStale), FetchOutcome::kError, 504), conf(kStaleError),
       want(S::kFail)},
      {"504 timeout with timeout: STALE", fetched(read(kStale), FetchOutcome::kError, 504), conf(kStaleTimeout),
       want(S::kStale, St::kStale)},
      {"502 with timeout only: fail", fetched(read(kStale), FetchOutcome::kError, 502), conf(kStaleTimeout),
       want(S::kFail)},
      {"error within stale-if-error: STALE", fetched(read(kSie), FetchOutcome::kError, 502), conf(),
       want(S::kStale, St::kStale)},
      {"error, no-cache entry: fail", fetched(read(kAlwaysRevalidate), FetchOutcome::kError, 502),
       conf(kStaleError | kStaleTimeout), want(S::kFail)},
      {"error without a stale copy: fail", fetched(none(), FetchOutcome::kError, 502), conf(kStaleError),
       want(S::kFail)},
      {"the fetch outcome comes before bypass", fetched(bypass(read(kStale)), FetchOutcome::kError, 502),
       conf(kStaleError), want(S::kStale, St::kStale)},
  });
}

// The facts a request gathers, step by step, reach an answer: a miss under proxy_cache_lock.
TEST(CacheDecision, StepsOfALockedMiss) {
  const CacheLocConf c = conf(0, true);
  CacheFacts f;
  EXPECT_EQ(decide_cache(f, kNow, c).step, S::kLookup);
  f.entry = EntryState::kNone;
  EXPECT_EQ(decide_cache(f, kNow, c).step, S::kCountUse);
  f.uses_counted = true;
  f.uses = 1;
  EXPECT_EQ(decide_cache(f, kNow, c).step, S::kLock);
  f.lock = L::kBusy;
  EXPECT_EQ(decide_cache(f, kNow, c).step, S::kWaitLock);
  f.lock = L::kTimedOut;
  EXPECT_EQ(decide_cache(f, kNow, c), want_lock_timeout());
}

TEST(CacheDecision, CachedMethods) {
  CacheLocConf c = conf();
  EXPECT_TRUE(cached_method(http::Method::kGet, c));
  EXPECT_TRUE(cached_method(http::Method::kHead, c));
  EXPECT_FALSE(cached_method(http::Method::kPost, c));
  EXPECT_FALSE(cached_method(http::Method::kPut, c));
  c.methods |= kMethodPost;
  EXPECT_TRUE(cached_method(http::Method::kPost, c));
  EXPECT_FALSE(cached_method(http::Method::kDelete, c));
}

TEST(CacheDecision, StatusNames) {
  EXPECT_EQ(cache_status_name(St::kNone), "");
  EXPECT_EQ(cache_status_name(St::kMiss), "MISS");
  EXPECT_EQ(cache_status_name(St::kBypass), "BYPASS");
  EXPECT_EQ(cache_status_name(St::kExpired), "EXPIRED");
  EXPECT_EQ(cache_status_name(St::kStale), "STALE");
  EXPECT_EQ(cache_status_name(St::kUpdating), "UPDATING");
  EXPECT_EQ(cache_status_name(St::kRevalidated), "REVALIDATED");
  EXPECT_EQ(cache_status_name(St::kHit), "HIT");
}

}  // namespace
}  // namespace kosoku::cache
