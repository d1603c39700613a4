// CacheModule and the lookup/lock/fetch/store half of CacheState (the flow: cache_handler.hh; serving an
// entry: cache_serve.cc).
#include "core/cache/cache_handler.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_fill.hh"
#include "core/cache/cache_loader.hh"
#include "core/cache/cache_state.hh"
#include "core/cache/cache_variables.hh"
#include "core/cache/cache_fetch.hh"
#include "core/http/variables.hh"
#include "core/cache/freshness.hh"
#include "core/cache/purge_request.hh"
#include "core/http/conditional.hh"
#include "core/stats/counters.hh"

namespace kosoku::cache {

namespace {

const config::Template& default_key() {
  static const config::Template kKey = config::compile("$scheme$proxy_host$request_uri", config::SourceLoc{}, nullptr);
  return kKey;
}

std::string expand_key(const http::Exchange& ex, const CacheLocConf& cc) {
  std::string key;
  http::RequestVariables vars(ex, ex.core().reactor);
  config::expand(cc.key != nullptr ? *cc.key : default_key(), vars, key);
  return key;
}

}  // namespace

// ---------------------------------------------------------------- CacheModule

CacheModule::CacheModule(http::HttpServer& server, CacheRegistry* reg)
    : server_(server), reactor_(*server.core().reactor), reg_(reg), core_(reactor_.core_id()) {
  if (reg_ == nullptr) return;
  counters_ = &reg_->counters(core_);
  reactor_.add_poller(this);
  reg_->wake_hub().attach(core_, &reactor_);
  const int workers = std::max(1, server.core().conf->worker_processes);
  auto paths = reg_->paths();
  for (size_t i = 0; i < paths.size(); ++i) {
    if (static_cast<int>(i % static_cast<size_t>(workers)) != core_) continue;
    CachePath& p = *paths[i];
    disk::DiskQueue* q = server.core().queue(p.conf().disk_queue);
    auto m = std::make_unique<CacheMaintainer>(reactor_, p, *q, config::AioMode::kIoUring);
    reactor_.add_poller(m.get());
    maintainers_.push_back(std::move(m));
  }
}

CacheModule::~CacheModule() {
  if (reg_ != nullptr) reg_->wake_hub().attach(core_, nullptr);
  for (auto& m : maintainers_) m->stop();
}

disk::DiskQueue& CacheModule::queue_for(const CachePath& path, const http::Exchange& ex) const {
  return *ex.core().queue(path.conf().disk_queue);
}

disk::DiskQueue& CacheModule::queue_for(const CachePath& path) const {
  return *server_.core().queue(path.conf().disk_queue);
}

void CacheModule::wait(const Hash128& h, CacheState* s) {
  waiters_[h].push_back(s);
  ++counters_->lock_waits;
}

void CacheModule::unwait(const Hash128& h, CacheState* s) {
  auto it = waiters_.find(h);
  if (it == waiters_.end()) return;
  auto& v = it->second;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == s) {
      v.erase(v.begin() + static_cast<long>(i));
      break;
    }
  }
  if (v.empty()) waiters_.erase(it);
}

void CacheModule::wake_all() {
  std::vector<CacheState*> all;
  for (auto& [h, v] : waiters_) all.insert(all.end(), v.begin(), v.end());
  waiters_.clear();
  for (CacheState* s : all) s->wake();
}

bool CacheModule::poll() {
  bool lost = reg_->wake_hub().drain(core_, [this](const Hash128& h) {
    auto it = waiters_.find(h);
    if (it == waiters_.end()) return;
    std::vector<CacheState*> v = std::move(it->second);
    waiters_.erase(it);
    for (CacheState* s : v) s->wake();
  });
  if (lost) wake_all();
  // Retired fetches and finished background fills go once the proxy is done with them.
  for (size_t i = 0; i < retired_.size();) {
    if (retired_[i]->done()) {
      retired_[i] = std::move(retired_.back());
      retired_.pop_back();
    } else {
      ++i;
    }
  }
  for (size_t i = 0; i < fills_.size();) {
    if (fills_[i]->done()) {
      fills_[i] = std::move(fills_.back());
      fills_.pop_back();
    } else {
      ++i;
    }
  }
  return false;
}

void CacheModule::retire(std::unique_ptr<CacheFetch> fx) {
  if (fx == nullptr) return;
  fx->detach();
  retired_.push_back(std::move(fx));  // never destroyed here: the call may come from inside the fetch
}

void CacheModule::start_background(http::Exchange& ex, CachePath& path, std::string key, const Hash128& locked,
                                   const EntryMeta& stale, int stale_fd, bool revalidate) {
  ++counters_->background;
  fills_.push_back(
      std::make_unique<BackgroundFill>(*this, ex, path, std::move(key), locked, stale, stale_fd, revalidate));
  fills_.back()->start();
}

void CacheModule::adopt_fill(std::unique_ptr<BackgroundFill> fill) { fills_.push_back(std::move(fill)); }

void CacheModule::handle(http::Exchange& ex) {
  const PurgeConf& pc = ex.location().module<CacheLocConf>().purge;
  if (pc.mode == PurgeConf::Mode::kZoneKey) {
    CachePath* path = reg_ != nullptr ? reg_->find(pc.zone) : nullptr;
    if (path == nullptr || pc.key == nullptr) {
      ex.respond(500);
      return;
    }
    start_purge(*this, ex, *path, *pc.key);
    return;
  }
  if (!handle_cached(ex)) proxy().forward(ex);  // not cached: the proxy forwards it as is
}

proxy::ProxyModule& CacheModule::proxy() {
  if (proxy_ == nullptr) proxy_ = static_cast<proxy::ProxyModule*>(server_.module_core(proxy::module()));
  return *proxy_;
}

bool CacheModule::handle_cached(http::Exchange& ex) {
  const config::LocationConf& loc = ex.location();
  const CacheLocConf& cc = loc.module<CacheLocConf>();
  const http::Request& req = ex.request();
  const bool purging = cc.purge.mode == PurgeConf::Mode::kMethod && req.method_text == cc.purge.method;
  if (!cc.enabled && !purging) return false;
  CachePath* path = nullptr;
  if (cc.enabled && cc.zone_tpl != nullptr) {
    std::string zone;
    http::RequestVariables vars(ex, ex.core().reactor);
    config::expand(*cc.zone_tpl, vars, zone);
    if (zone.empty() || zone == "off") {
      if (!purging) return false;
    } else {
      path = reg_->find(zone);
      if (path == nullptr) {
        KOSOKU_LOG(kError, "cache \"%s\" not found, client: %s", zone, ex.remote_addr());
        ex.respond(500);
        return true;
      }
    }
  } else if (cc.enabled) {
    path = reg_->find(cc.zone);
  }
  if (path == nullptr) {
    if (purging) {
      ex.respond(404);
      return true;
    }
    return false;
  }
  if (purging) {
    start_purge(*this, ex, *path, cc.key != nullptr ? *cc.key : default_key());
    return true;
  }
  std::string key = expand_key(ex, cc);
  if (!cached_method(req.method, cc)) return false;  // not cached: the proxy forwards it as is
  const bool bypass = any_predicate(cc.bypass, ex);

  auto st = std::make_unique<CacheState>(*this, ex);
  CacheState* s = st.get();
  ex.state() = std::move(st);
  s->start(*path, std::move(key), bypass);
  return true;
}

// ---------------------------------------------------------------- CacheState: lookup, lock, fetch

CacheState::~CacheState() {
  detach_store_wait();
  if (armed()) mod_.reactor().timers().cancel(*this);
  if (waiting_) mod_.unwait(hash_, this);
  if (writer_ != nullptr) writer_->abort();
  release_lock();
  if (fetch_ != nullptr) mod_.retire(std::move(fetch_));
  std::free(buf_[0]);
  std::free(buf_[1]);
}

int64_t CacheState::now_s() const { return mod_.reactor().wall_time(); }
uint64_t CacheState::now_ms() const { return mod_.reactor().now_ms(); }

void CacheState::start(CachePath& path, std::string key, bool bypass) {
  path_ = &path;
  key_ = std::move(key);
  primary_ = hash_key(key_);
  hash_ = primary_;
  facts_.bypass = bypass;
  step();
}

// The request's state machine: the decision (decision.hh) on the facts gathered so far, and its action. A step
// that gathers a fact decides again; a step that waits (open, lock) decides again when its result arrives.
void CacheState::step() {
  const CacheDecision d = decide_cache(facts_, now_s(), conf());
  switch (d.step) {
    case CacheStep::kLookup:
      lookup();
      return;
    case CacheStep::kOpen:
      phase_ = Phase::kOpening;
      reader_.open(path_->path_of(hash_), hash_, key_, mod_.queue_for(*path_, ex_), ex_.location().aio, this);
      return;
    case CacheStep::kCountUse:
      count_use();
      step();
      return;
    case CacheStep::kLock:
      try_lock();
      step();
      return;
    case CacheStep::kWaitLock:
      wait_lock();
      return;
    case CacheStep::kHit:
      hit();
      return;
    case CacheStep::kUpdating:
      ++mod_.counters().updating;
      count_soft_purged_stale();
      use_entry_meta_ = true;
      serve(CacheStatus::kUpdating);
      return;
    case CacheStep::kStale:
      // Before a fetch, kStale is always the background update: the lock goes to the background fill, and this
      // request is answered with the stale copy.
      lock_held_ = false;
      mod_.start_background(ex_, *path_, key_, hash_, reader_.meta(), ::dup(reader_.fd()), conf().revalidate);
      ++mod_.counters().stale;
      count_soft_purged_stale();
      use_entry_meta_ = true;
      serve(CacheStatus::kStale);
      return;
    case CacheStep::kBypass:
      ++mod_.counters().bypass;
      fetch(CacheStatus::kBypass, false, true);
      return;
    case CacheStep::kRevalidate:
    case CacheStep::kMiss:
      if (d.lock_timeout) {
        // proxy_cache_lock_timeout: go to the origin, and do not cache the response (nginx).
        ++mod_.counters().lock_timeouts;
        reader_.close();
        have_entry_ = false;
      }
      ++(d.status == CacheStatus::kExpired ? mod_.counters().expired : mod_.counters().misses);
      fetch(d.status, d.step == CacheStep::kRevalidate, d.store);
      return;
    case CacheStep::kRevalidated:
    case CacheStep::kPass:
    case CacheStep::kFail:
      break;  // answers to a fetch (on_fetch_response, on_fetch_error)
  }
  KOSOKU_LOG(kAlert, "cache: step \"%s\" before a fetch", cache_step_name(d.step));
  phase_ = Phase::kDone;
  ex_.respond(500);
}

void CacheState::lookup() {
  phase_ = Phase::kIdle;
  CacheZone& z = path_->zone();
  const int64_t now = now_s();
  hash_ = primary_;
  variant_ = false;
  std::optional<EntryView> v = z.lookup(hash_, now);
  if (v && (v->flags & kEntryPrimary)) {
    std::string material;
    vary_key_material(z.vary().get(v->vary_id), ex_.request(), material);
    hash_ = hash_variant(key_, material);
    variant_ = true;
    v = z.lookup(hash_, now);
  }
  entry_ = v;
  hot_found_ = nullptr;
  if (v && v->exists()) {
    // A soft-purged entry is read from its file (its head says fresh; stored_freshness() says stale).
    hot_found_ = (v->flags & kEntryStale) ? nullptr : mod_.hot().find(hash_, *v);
    if (hot_found_ != nullptr) {
      facts_.entry = EntryState::kHot;
      facts_.freshness = &hot_found_->meta.freshness;
    } else {
      facts_.entry = EntryState::kOnDisk;
    }
  } else {
    // Not loaded yet: the file may be on disk although the loader has not reached it (nginx reads it too).
    facts_.entry = path_->loaded() ? EntryState::kNone : EntryState::kOnDisk;
  }
  step();
}

void CacheState::on_entry_open(EntryReader&, int error) {
  if (phase_ != Phase::kOpening) return;
  if (aborted_) {
    maybe_release();
    return;
  }
  phase_ = Phase::kIdle;
  CacheZone& z = path_->zone();
  // No entry after all: look on without it.
  auto none = [&](bool remove_file) {
    if (remove_file) remove_file_async(mod_.queue_for(*path_, ex_), ex_.location().aio, path_->path_of(hash_));
    entry_.reset();
    facts_.entry = EntryState::kNone;
    facts_.freshness = nullptr;
    step();
  };
  if (error != 0) {
    none(entry_ && entry_->exists() && z.remove_if_same(*entry_) && error == -EINVAL);
    return;
  }
  const EntryMeta& m = reader_.meta();
  const PurgeRecord* purged = nullptr;
  if (!entry_ || !entry_->exists()) {
    // Found on disk before the loader: a purge of an earlier run may cover it (purge_log.hh), as the loader
    // would find.
    purged = path_->purge_log().replayed_cover(m);
    if (purged != nullptr && !purged->soft) {
      reader_.close();
      none(true);
      return;
    }
  }
  have_entry_ = true;
  if (!entry_ || !entry_->exists()) {
    // Found on disk before the loader: index it (never over a newer entry).
    std::optional<EntryView> ev;
    const Freshness& f = m.freshness;
    CacheZone::Commit c{(f.flags & kFlagAlwaysRevalidate) ? 0 : f.expires_at(), m.header_size + m.body_size, 0, 0,
                        true};
    if (!m.primary.zero()) {
      c.extra_flags = kEntryVariant;
      c.parent = m.primary.tag();
    }
    z.commit(hash_, c, now_s(), &ev);
    if (ev && ev->exists()) {
      remove_file_async(mod_.queue_for(*path_, ex_), ex_.location().aio, path_->path_of(ev->hash));
    }
    z.keys().put(hash_, key_);
    if (std::optional<EntryView> v = z.peek(hash_);
        !m.tags.empty() && v && v->expires_at == c.expires_at && v->fs_size == c.fs_size) {
      z.tags().put(hash_, m.tags);
    }
    if (std::optional<EntryView> v = z.peek(hash_);
        purged != nullptr && v && v->expires_at == c.expires_at && v->fs_size == c.fs_size) {
      z.mark_stale(*v, purged->at);
      entry_ = z.peek(hash_);
    }
  }
  facts_.entry = EntryState::kRead;
  soft_freshness_ = m.freshness;
  if (entry_ && (entry_->flags & kEntryStale) && soft_freshness_.expires_at() > entry_->expires_at) {
    soft_freshness_.lifetime -= soft_freshness_.expires_at() - entry_->expires_at;  // stale since the soft purge
  }
  facts_.freshness = &soft_freshness_;
  facts_.has_validators = !m.etag.empty() || m.last_modified >= 0;
  step();
}

void CacheState::count_soft_purged_stale() {
  if (entry_ && (entry_->flags & kEntryStale)) {
    path_->purge_counters().soft_served_stale.fetch_add(1, std::memory_order_relaxed);
  }
}

void CacheState::hit() {
  ++mod_.counters().hits;
  if (facts_.entry == EntryState::kHot) {
    ++mod_.counters().hot_hits;
    hot_meta_ = &hot_found_->meta;
    hot_body_ = hot_found_->body;
    serve(CacheStatus::kHit);
    return;
  }
  const EntryMeta& m = reader_.meta();
  use_entry_meta_ = true;
  if (entry_ && entry_->exists() && m.header_size + m.body_size <= HotCache::kMaxEntry) {
    mod_.hot().put(hash_, *entry_, m, reader_.prefetched());
  }
  serve(CacheStatus::kHit);
}

void CacheState::count_use() {
  std::optional<EntryView> ev;
  const EntryView v = path_->zone().count_use(hash_, now_s(), &ev);
  if (ev && ev->exists()) remove_file_async(mod_.queue_for(*path_, ex_), ex_.location().aio, path_->path_of(ev->hash));
  facts_.uses_counted = true;
  facts_.uses = v.uses;
}

void CacheState::try_lock() {
  std::optional<EntryView> ev;
  const CacheZone::LockResult r = path_->zone().try_lock(hash_, now_ms(), conf().lock_age_ms, now_s(), &ev);
  if (ev && ev->exists()) remove_file_async(mod_.queue_for(*path_, ex_), ex_.location().aio, path_->path_of(ev->hash));
  if (r == CacheZone::LockResult::kBusy) {
    facts_.lock = LockState::kBusy;
    return;
  }
  lock_held_ = true;
  facts_.lock = LockState::kHeld;
}

void CacheState::wait_lock() {
  const uint64_t now = now_ms();
  if (lock_deadline_ms_ == 0) lock_deadline_ms_ = now + conf().lock_timeout_ms;
  if (now >= lock_deadline_ms_) {
    fire();
    return;
  }
  if (!path_->zone().add_waiter(hash_, mod_.core(), now)) {
    // Released between our look and now: look again on the next turn.
    phase_ = Phase::kWaitingLock;
    task_queued_ = true;
    mod_.reactor().post(this);
    return;
  }
  phase_ = Phase::kWaitingLock;
  waiting_ = true;
  mod_.wait(hash_, this);
  mod_.reactor().timers().arm(*this, lock_deadline_ms_);
}

void CacheState::wake() {
  if (!waiting_) return;
  waiting_ = false;
  if (armed()) mod_.reactor().timers().cancel(*this);
  task_queued_ = true;
  mod_.reactor().post(this);
}

void CacheState::run() {
  task_queued_ = false;
  if (aborted_) {
    maybe_release();
    return;
  }
  if (phase_ != Phase::kWaitingLock) return;
  reader_.close();
  have_entry_ = false;
  facts_ = CacheFacts{};  // a new look (the lock's deadline stays)
  step();
}

void CacheState::fire() {
  // proxy_cache_lock_timeout (step: a MISS that is not stored).
  if (waiting_) {
    waiting_ = false;
    mod_.unwait(hash_, this);
  }
  if (aborted_) {
    maybe_release();
    return;
  }
  facts_.lock = LockState::kTimedOut;
  step();
}

void CacheState::fetch(CacheStatus status, bool revalidate, bool store_allowed) {
  status_ = status;
  revalidating_ = revalidate;
  store_allowed_ = store_allowed;
  phase_ = Phase::kFetching;
  CacheFetch::Options opts;
  const CacheLocConf& cc = conf();
  opts.head_to_get = cc.convert_head && ex_.request().method == http::Method::kHead;
  if (revalidate) {
    const EntryMeta& m = reader_.meta();
    char date[http::kHttpDateLen];
    std::string_view lm = m.last_modified >= 0 ? http::format_http_date(m.last_modified, date) : std::string_view();
    opts.extra_fields = revalidation_fields(m.etag, lm);
  }
  fetch_ = std::make_unique<CacheFetch>(ex_, opts, false);
  request_time_ = now_s();
  purge_seq_ = path_->recent_purges().seq();
  relay_.reset(ex_, ex_.location().module<proxy::ProxyLocationConf>(), this);
  fetch_->start(mod_.proxy(), *this, proxy::upstream_state(ex_));  // may call back before returning
}

// The cache answers from the entry instead (a 304 revalidation, a stale copy): the fetch reads the rest of the
// response on its own. Its $upstream_* record so far stays with the client's response.
void CacheState::takeover() {
  passthrough_ = false;
  if (fetch_ != nullptr) mod_.retire(std::move(fetch_));
}

void CacheState::release_lock() {
  if (!lock_held_ || path_ == nullptr) return;
  lock_held_ = false;
  uint64_t w = path_->zone().unlock(hash_);
  if (w != 0) mod_.registry()->wake_hub().notify(w, hash_);
}

// The facts after a fetch: its outcome, and the stale copy in hand if this request read one.
CacheFacts CacheState::fetched_facts(FetchOutcome outcome, int status) const {
  CacheFacts f;
  f.entry = have_entry_ ? EntryState::kRead : EntryState::kNone;
  f.freshness = have_entry_ ? &soft_freshness_ : nullptr;
  f.fetch = outcome;
  f.status = status;
  return f;
}

void CacheState::on_upstream_head(const http::ParsedResponse& resp) {
  if (phase_ != Phase::kFetching) return;
  FetchOutcome outcome = FetchOutcome::kResponse;
  if (revalidating_ && resp.status == 304 && have_entry_) {
    const EntryMeta& m = reader_.meta();
    char date[http::kHttpDateLen];
    std::string_view lm = m.last_modified >= 0 ? http::format_http_date(m.last_modified, date) : std::string_view();
    if (validators_match_304(resp.headers(), m.etag, lm)) outcome = FetchOutcome::kNotModified;
  }
  switch (decide_cache(fetched_facts(outcome, resp.status), now_s(), conf()).step) {
    case CacheStep::kRevalidated:
      revalidated(resp);
      return;
    case CacheStep::kStale:
      release_lock();
      takeover();
      ++mod_.counters().stale;
      use_entry_meta_ = true;
      serve(CacheStatus::kStale);
      return;
    default:
      break;  // kPass
  }
  passthrough_ = true;
  expected_length_ =
      resp.framing == http::ResponseFraming::kContentLength ? static_cast<int64_t>(resp.content_length) : -1;
  origin_last_modified_ = stored_last_modified(resp.headers()).value_or(-1);
  start_store(resp);

  // The client's head: the proxy's own (hidden fields, proxy_redirect), then the client's view of a 200.
  http::ResponseHead& h = ex_.head();
  proxy::build_response_head(resp, ex_.location().module<proxy::ProxyLocationConf>(), h);
  proxy::rewrite_redirects(ex_, ex_.location().module<proxy::ProxyLocationConf>(), h);
  set_cache_status(ex_, status_);
  pass_view_ = PassView::kWhole;
  if (h.status == 200) {
    // The origin's body streams by once: several ranges only in ascending order; none without a length.
    const http::ResponseStep step = response_step(h, origin_last_modified_, expected_length_,
                                                  http::RangeSupport::kAscending);
    if (step.outcome == http::ResponseOutcome::kPreconditionFailed ||
        step.outcome == http::ResponseOutcome::kRangeNotSatisfiable) {
      // An error answer: the fill is given up (as nginx finalizes the request with the error).
      if (writer_ != nullptr) {
        writer_->abort();
        writer_ = nullptr;
      }
      detach_store_wait();
      release_lock();
      takeover();
      phase_ = Phase::kDone;
      ex_.respond(step.status());
      return;
    }
    if (step.outcome == http::ResponseOutcome::kPartial) pass_view_ = PassView::kRanges;
    // A 304: the fill goes on; the 304 ends with it.
    if (step.outcome == http::ResponseOutcome::kNotModified) pass_view_ = PassView::kNothing;
  }
  relay_.send_head();  // the head's views into `resp` are copied into the client's output here
}

// Where a fill or rewrite of this request's entry goes; it takes over the lock when this request holds it.
StoreWriter::Target CacheState::store_target() const {
  StoreWriter::Target t;
  t.path = path_;
  t.hub = &mod_.registry()->wake_hub();
  t.queue = &mod_.queue_for(*path_, ex_);
  t.aio = ex_.location().aio;
  t.core = mod_.core();
  t.now_s = now_s();
  t.holds_lock = lock_held_;
  t.locked = hash_;
  t.purge_seq = purge_seq_;
  return t;
}

void CacheState::start_store(const http::ParsedResponse& resp) {
  if (!store_allowed_ || fetch_->sends_head() || any_predicate(conf().no_cache, ex_)) {  // HEAD: no body to store
    release_lock();
    return;
  }
  const StoreWriter::Target t = store_target();
  NotStored why;
  detach_store_wait();
  store_wait_ = std::make_shared<StoreWait>();
  store_wait_->state = this;
  writer_ = begin_store(conf(), ex_.request(), *path_, key_, primary_, resp, request_time_, t.now_s, t, &why,
                        [w = store_wait_](bool) {
                          if (w->state != nullptr) w->state->on_store_done();
                        });
  if (writer_ == nullptr) detach_store_wait();
  if (writer_ != nullptr) {
    lock_held_ = false;  // the writer releases it (commit or failure)
    return;
  }
  release_lock();
  // The origin now says "do not store" (no-store, private, Set-Cookie, ...): forget the old copy.
  if (have_entry_ && resp.status < 500 && why != NotStored::kStatus) {
    if (std::optional<EntryView> old = path_->zone().remove(hash_); old && old->exists()) {
      remove_file_async(*t.queue, t.aio, path_->path_of(hash_));
    }
  }
}

void CacheState::revalidated(const http::ParsedResponse& resp) {
  takeover();
  ++mod_.counters().revalidated;
  const StoreWriter::Target t = store_target();
  lock_held_ = false;  // refresh_entry takes it over
  use_entry_meta_ = false;
  refresh_entry(conf(), ex_.request(), reader_.meta(), ::dup(reader_.fd()), resp.headers(), request_time_, t,
                served_);
  serve(CacheStatus::kRevalidated);
}

// The client's output and the cache's disk both pace the origin: no room while the writer is backlogged (it
// resumes the fetch once it has caught up).
size_t CacheState::upstream_room() {
  const size_t room = passthrough_ ? relay_.room() : SIZE_MAX;
  if (writer_ != nullptr && fetch_ != nullptr && writer_->backlogged(fetch_->upstream().resumer())) return 0;
  return room;
}

void CacheState::on_upstream_data(const std::string_view* spans, size_t count, bool last) {
  if (writer_ != nullptr) {
    for (size_t i = 0; i < count; ++i) writer_->append(spans[i]);
  }
  if (passthrough_) relay_.deliver(spans, count, last);
}

void CacheState::write_content(const char* data, size_t len, bool by_ref) {
  switch (pass_view_) {
    case PassView::kNothing:
      return;
    case PassView::kRanges:
      write_view(data, len, by_ref);
      return;
    case PassView::kWhole:
      if (by_ref) {
        ex_.write_ref(data, len);
      } else {
        ex_.write(std::string_view(data, len));
      }
      return;
  }
}

void CacheState::on_upstream_end() {
  if (writer_ != nullptr) {
    writer_->finish(expected_length_);
    writer_ = nullptr;
  }
  if (!passthrough_) return;
  if (!relay_.flush()) {
    draining_ = true;  // on_writable goes on once the client has taken the relay's bytes
    return;
  }
  pass_done();
}

// The passed-through response is all in the client's stream.
void CacheState::pass_done() {
  draining_ = false;
  if (fetch_ != nullptr) mod_.retire(std::move(fetch_));
  if (store_wait_ != nullptr) {
    finish_deferred_ = true;  // on_store_done() finishes
    return;
  }
  phase_ = Phase::kDone;
  ex_.finish();
}

void CacheState::on_store_done() {
  detach_store_wait();
  if (!finish_deferred_) return;
  finish_deferred_ = false;
  phase_ = Phase::kDone;
  ex_.finish();
}

void CacheState::detach_store_wait() {
  if (store_wait_ != nullptr) store_wait_->state = nullptr;
  store_wait_.reset();
}

void CacheState::on_upstream_error(int status) {
  if (status == 0 || passthrough_) {
    fetch_cut_off();
    return;
  }
  fetch_failed(status);
}

// The response was cut off after its head (or the request body broke off): never stored, never finished.
void CacheState::fetch_cut_off() {
  detach_store_wait();
  if (writer_ != nullptr) {
    writer_->abort();
    writer_ = nullptr;
  }
  if (!passthrough_) return;
  phase_ = Phase::kDone;
  if (fetch_ != nullptr) mod_.retire(std::move(fetch_));
  ex_.abort_response();
}

// The origin gave no usable response (`status`: 502, 504 on a timeout, ...): a stale copy where allowed, else
// the error.
void CacheState::fetch_failed(int status) {
  if (writer_ != nullptr) {
    writer_->abort();
    writer_ = nullptr;
  }
  release_lock();
  takeover();
  if (decide_cache(fetched_facts(FetchOutcome::kError, status), now_s(), conf()).step == CacheStep::kStale) {
    ++mod_.counters().stale;
    use_entry_meta_ = true;
    serve(CacheStatus::kStale);
    return;
  }
  phase_ = Phase::kDone;
  set_cache_status(ex_, status_);
  ex_.respond(status);
}

// nginx keeps the upstream request of a cacheable response going when the client closes (the fill is not
// wasted, and lock waiters get the entry): the fetch, its lock and its writer go to a BackgroundFill. Not when
// nothing would be stored (min_uses, lock timeout, a response already found not storable).
bool CacheState::continue_fill() {
  if (phase_ != Phase::kFetching || fetch_ == nullptr || fetch_->done() || !store_allowed_) return false;
  if (passthrough_ && writer_ == nullptr) return false;
  // A request body (proxy_cache_methods POST) would stop coming with the client: the fetch could never end.
  if (ex_.request().body != http::BodyFraming::kNone) return false;
  BackgroundFill::Adopted a;
  a.holds_lock = lock_held_;
  a.writer = writer_;
  a.head_seen = passthrough_;
  a.no_cache = any_predicate(conf().no_cache, ex_);
  a.expected = expected_length_;
  a.request_time = request_time_;
  a.purge_seq = purge_seq_;
  if (revalidating_ && have_entry_ && !passthrough_) {
    a.stale = &reader_.meta();
    a.stale_fd = ::dup(reader_.fd());
  }
  a.fetch = std::move(fetch_);
  detach_store_wait();  // the writer's completion no longer finishes a client response
  lock_held_ = false;
  writer_ = nullptr;
  passthrough_ = false;
  draining_ = false;
  mod_.adopt_fill(std::make_unique<BackgroundFill>(mod_, std::move(a), *path_, key_, hash_));
  return true;
}

void CacheState::on_abort() {
  aborted_ = true;
  if (continue_fill()) {
    maybe_release();
    return;
  }
  detach_store_wait();
  finish_deferred_ = false;
  if (armed()) mod_.reactor().timers().cancel(*this);
  if (waiting_) {
    waiting_ = false;
    mod_.unwait(hash_, this);
  }
  if (writer_ != nullptr) {
    writer_->abort();
    writer_ = nullptr;
  }
  release_lock();
  streaming_ = false;
  draining_ = false;
  // The fetch closes the upstream connection; a failure still queued for the loop ends it later
  // (on_upstream_cancelled).
  if (fetch_ != nullptr && !fetch_->done() && !fetch_->cancel()) return;
  maybe_release();
}

void CacheState::maybe_release() {
  if (!aborted_ || released_) return;
  if (reader_.busy() || read_in_flight_ || task_queued_) return;
  if (fetch_ != nullptr && !fetch_->done()) return;
  if (fetch_ != nullptr) mod_.retire(std::move(fetch_));
  released_ = true;
  phase_ = Phase::kDone;
  ex_.release();
}

}  // namespace kosoku::cache
