#include "core/certs/cert_cache.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/certs/admin_handler.hh"
#include "core/certs/host_name.hh"
#include "core/certs/pem.hh"
#include "core/config/module.hh"
#include "core/http/connection.hh"
#include "core/stats/export.hh"

namespace kosoku::certs {

namespace {

constexpr uint64_t kHousekeepingMs = 1000;
constexpr uint64_t kLogIntervalMs = 10000;

void free_cert(LoadedCert& c) {
  X509_free(c.leaf);
  if (c.chain != nullptr) sk_X509_pop_free(c.chain, X509_free);
  EVP_PKEY_free(c.key);
  c = LoadedCert{};
}

// Every core's counters, for the stats renderers (they only read; a value may be slightly stale).
std::mutex g_stats_mu;
std::vector<std::pair<int, const CertCache::Counters*>>& stats_registry() {
  static std::vector<std::pair<int, const CertCache::Counters*>> r;
  return r;
}

void register_stats_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    stats::register_extra_source([](stats::Snapshot& s) {
      stats::ExtraSection sec;
      sec.name = "ssl_certificate_cache";
      using T = stats::ExtraMetric::Type;
      std::lock_guard<std::mutex> lock(g_stats_mu);
      for (const auto& [core, c] : stats_registry()) {
        auto add = [&, core = core](std::string name, std::string help, T type, uint64_t v) {
          sec.metrics.push_back(stats::ExtraMetric{std::move(name), std::move(help), type,
                                                   {{"core", absl::StrCat(core)}}, static_cast<double>(v)});
        };
        add("ssl_cert_cache_hits_total", "Certificate lookups answered from the core's cache", T::kCounter, c->hits);
        add("ssl_cert_cache_misses_total", "Certificate loads started", T::kCounter, c->misses);
        add("ssl_cert_cache_loads_total", "Certificate loads that succeeded", T::kCounter, c->loads);
        add("ssl_cert_cache_failures_total", "Certificate loads that failed", T::kCounter, c->failures);
        add("ssl_cert_cache_evictions_total", "Certificates dropped from the cache", T::kCounter, c->evictions);
        add("ssl_cert_cache_absent_total", "Lookups of names without a stored certificate", T::kCounter,
            c->absent);
        add("ssl_cert_cache_entries", "Certificates in the core's cache", T::kGauge, c->entries);
      }
      if (CertStore* store = process_store_if_created()) {
        sec.metrics.push_back(stats::ExtraMetric{"ssl_cert_store_hosts", "Hosts with a certificate in the store",
                                                 T::kGauge, {}, static_cast<double>(store->index().size())});
      }
      s.extra.push_back(std::move(sec));
    });
  });
}

}  // namespace

// One cached name. Loading: `op` is (or was) in the disk queue; the entry is not in the LRU.
struct CertCache::Entry final : public disk::DiskCallback {
  enum class State { kNew, kLoading, kReady, kFailed };
  enum class Stage { kOpen, kRead };

  CertCache* cache = nullptr;  // null: orphaned (the cache went away while the op was in flight)
  std::string key;
  uint64_t version = 0;       // the index version this entry is (or will be) loaded at
  uint64_t load_version = 0;  // the version the running load started at
  State state = State::kNew;
  Stage stage = Stage::kOpen;
  LoadedCert cert;
  disk::DiskOp op;
  std::string buf;
  size_t got = 0;
  int fd = -1;
  bool queued = false;  // op waits in the disk queue (its callback will run)
  uint64_t last_used_ms = 0;
  uint64_t retry_at_ms = 0;  // kFailed: find() loads again from then on
  Entry* prev = nullptr;  // LRU
  Entry* next = nullptr;
  bool in_lru = false;
  CertWaiter::List waiters;

  void on_disk_done(disk::DiskOp&) override {
    queued = false;
    if (cache == nullptr) {  // orphaned: nothing waits any more
      if (stage == Stage::kOpen && op.result >= 0) ::close(op.result);
      if (fd >= 0) ::close(fd);
      delete this;
      return;
    }
    CertCache* c = cache;
    if (c->advance(*this)) c->notify(*this);
  }
};

CertCache::CertCache(reactor::Reactor& r, disk::DiskQueue& queue, CertStore& store, const CertsConf& conf,
                     config::AioMode mode)
    : reactor_(r), queue_(queue), mode_(mode), store_(store), max_(conf.cache_max == 0 ? 1 : conf.cache_max),
      inactive_ms_(conf.cache_inactive_ms) {
  reader_ = store_.index().qsbr().enroll();
  admin_ = std::make_unique<AdminHandler>(*this);
  r.timers().arm(*this, r.now_ms() + kHousekeepingMs);
  register_stats_once();
  std::lock_guard<std::mutex> lock(g_stats_mu);
  stats_registry().emplace_back(r.core_id(), &counters_);
}

CertCache::~CertCache() {
  store_.detach(this);  // no deliver() to this cache runs or starts after this
  for (AdminState* st : admins_) st->detach();
  admins_.clear();
  {
    std::lock_guard<std::mutex> lock(g_stats_mu);
    std::erase_if(stats_registry(), [&](const auto& p) { return p.second == &counters_; });
  }
  reactor_.timers().cancel(*this);
  for (auto& [key, e] : entries_) {
    while (e->waiters.head != nullptr) unlink(e->waiters.head);
    free_cert(e->cert);
    if (e->state == Entry::State::kLoading && e->queued) {
      e->cache = nullptr;  // the disk queue still holds the op: the entry frees itself on completion
      e.release();
    } else if (e->fd >= 0) {
      ::close(e->fd);
    }
  }
  entries_.clear();
  for (LoadedCert& c : graveyard_) free_cert(c);
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.clear();
  }
  admin_.reset();
  store_.index().qsbr().leave(reader_);
}

CertCache* CertCache::of(const http::HttpServer& server) {
  return static_cast<CertCache*>(server.module_core(module()));
}

http::ContentHandler* CertCache::content_handler() { return admin_.get(); }

CertCache::Result CertCache::find(std::string_view name, CertWaiter* w, const LoadedCert** out) {
  const CertIndex& index = store_.index();
  uint64_t v = index.version(name);
  std::string_view key = name;
  if (v == 0) {
    key = wildcard_of(name, scratch_);
    v = key.empty() ? 0 : index.version(key);
  }
  if (v == 0) {
    ++counters_.absent;
    // A certificate deleted from the store: drop what this core still holds of it.
    if (auto it = entries_.find(name); it != entries_.end() && it->second->state != Entry::State::kLoading) {
      erase_entry(*it->second);
    }
    return Result::kAbsent;
  }
  return lookup(key, v, w, out);
}

CertCache::Result CertCache::find_exact(std::string_view name, CertWaiter* w, const LoadedCert** out) {
  const uint64_t v = store_.index().version(name);
  if (v == 0) {
    ++counters_.absent;
    return Result::kAbsent;
  }
  return lookup(name, v, w, out);
}

CertCache::Result CertCache::lookup(std::string_view key, uint64_t version, CertWaiter* w, const LoadedCert** out) {
  const uint64_t now = reactor_.now_ms();
  Entry* e = nullptr;
  if (auto it = entries_.find(key); it != entries_.end()) e = it->second.get();
  if (e != nullptr && e->state != Entry::State::kLoading && e->version == version) {
    if (e->state == Entry::State::kReady) {
      ++counters_.hits;
      e->last_used_ms = now;
      lru_touch(*e);
      *out = &e->cert;
      return Result::kFound;
    }
    if (now < e->retry_at_ms) {
      e->last_used_ms = now;
      return Result::kAbsent;
    }
  }
  if (e == nullptr) {
    evict_for_insert();
    auto fresh = std::make_unique<Entry>();
    fresh->cache = this;
    fresh->key.assign(key);
    e = fresh.get();
    entries_.emplace(e->key, std::move(fresh));
    counters_.entries = entries_.size();
  }
  e->version = version;
  e->last_used_ms = now;
  if (e->state != Entry::State::kLoading) {
    start_load(*e);
    if (advance(*e)) {
      if (e->state == Entry::State::kReady) {
        *out = &e->cert;
        return Result::kFound;
      }
      return Result::kAbsent;
    }
  }
  if (w != nullptr) {
    if (w->list_ != nullptr) unlink(w);
    link(e->waiters, w);
  }
  return Result::kPending;
}

void CertCache::cancel(CertWaiter* w) {
  if (w != nullptr && w->list_ != nullptr) unlink(w);
}

void CertCache::start_load(Entry& e) {
  ++counters_.misses;
  lru_unlink(e);
  retire(e);
  e.state = Entry::State::kLoading;
  e.stage = Entry::Stage::kOpen;
  e.load_version = e.version;
  e.got = 0;
  e.buf.clear();
  e.op = disk::DiskOp{};
  e.op.kind = disk::DiskOp::Kind::kOpen;
  e.op.path = store_.path_of(e.key);
  e.op.callback = &e;
}

bool CertCache::advance(Entry& e) {
  // e.op.user_data is set while the op is submitted: on entry here (from on_disk_done) it marks a completed
  // op whose result is to be read; null means the op in e.op is still to be submitted.
  bool pending_result = e.op.user_data != nullptr;
  for (;;) {
    if (!pending_result) {
      e.op.result = 0;
      e.op.user_data = &e;
      disk::DiskQueue::Submit s = queue_.submit(e.op, mode_);
      if (s == disk::DiskQueue::Submit::kQueued) {
        e.queued = true;
        return false;
      }
      if (s == disk::DiskQueue::Submit::kOverflow) {
        e.op.user_data = nullptr;
        finish(e, false, "the disk queue is full", kOverflowRetryMs);
        return true;
      }
    }
    e.op.user_data = nullptr;
    pending_result = false;
    const int32_t res = e.op.result;
    if (e.stage == Entry::Stage::kOpen) {
      if (res < 0) {
        finish(e, false, absl::StrCat("open() \"", e.op.path, "\" failed (", -res, ": ", std::strerror(-res), ")"));
        return true;
      }
      e.fd = res;
      const off_t size = e.op.st.st_size;
      if (size <= 0 || static_cast<uint64_t>(size) > kMaxFileBytes) {
        finish(e, false, absl::StrCat("\"", e.op.path, "\" has ", size, " bytes (1..", kMaxFileBytes, " expected)"));
        return true;
      }
      e.buf.resize(static_cast<size_t>(size));
      e.stage = Entry::Stage::kRead;
    } else {
      if (res < 0) {
        finish(e, false, absl::StrCat("read() \"", e.op.path, "\" failed (", -res, ": ", std::strerror(-res), ")"));
        return true;
      }
      e.got += static_cast<size_t>(res);
      if (res == 0 || e.got >= e.buf.size()) {
        e.buf.resize(e.got);
        finish(e, true, {});
        return true;
      }
    }
    // The next read.
    const std::string path = std::move(e.op.path);
    e.op = disk::DiskOp{};
    e.op.kind = disk::DiskOp::Kind::kRead;
    e.op.path = path;
    e.op.fd = e.fd;
    e.op.buf = e.buf.data() + e.got;
    e.op.len = static_cast<uint32_t>(e.buf.size() - e.got);
    e.op.offset = e.got;
    e.op.callback = &e;
  }
}

void CertCache::finish(Entry& e, bool ok, std::string_view why, uint64_t retry_ms) {
  if (e.fd >= 0) {
    ::close(e.fd);  // a regular file opened read-only: close(2) does not wait for the disk
    e.fd = -1;
  }
  std::string error(why);
  if (ok) {
    CertBundle b;
    if (parse_bundle(e.buf, &b, &error)) {
      e.cert = LoadedCert{b.leaf, b.chain, b.key};
      b.leaf = nullptr, b.chain = nullptr, b.key = nullptr;
    } else {
      ok = false;
      error = absl::StrCat("\"", store_.path_of(e.key), "\": ", error);
    }
  }
  e.buf.clear();
  e.buf.shrink_to_fit();
  const uint64_t now = reactor_.now_ms();
  if (ok) {
    ++counters_.loads;
    e.state = Entry::State::kReady;
  } else {
    ++counters_.failures;
    e.state = Entry::State::kFailed;
    e.retry_at_ms = now + retry_ms;
    if (last_log_ms_ == 0 || now >= last_log_ms_ + kLogIntervalMs) {
      last_log_ms_ = now;
      KOSOKU_LOG(kError, "ssl certificate of \"%s\" not loaded: %s", e.key, error);
    }
  }
  e.last_used_ms = now;
  lru_touch(e);
}

void CertCache::notify(Entry& e) {
  // A load that started at an older version than the one now wanted reads again (the file it read may be
  // the replaced one).
  if (e.load_version != e.version) {
    start_load(e);
    if (!advance(e)) return;
  }
  CertWaiter::List local = e.waiters;
  e.waiters = CertWaiter::List{};
  for (CertWaiter* w = local.head; w != nullptr; w = w->next_) w->list_ = &local;
  // `e` may be evicted by what a waiter does: only `local` is used from here on.
  while (local.head != nullptr) {
    CertWaiter* w = local.head;
    unlink(w);
    w->on_cert_ready();
  }
}

void CertCache::retire(Entry& e) {
  if (e.cert.leaf != nullptr || e.cert.key != nullptr || e.cert.chain != nullptr) {
    graveyard_.push_back(e.cert);
    e.cert = LoadedCert{};
  }
}

void CertCache::erase_entry(Entry& e) {
  lru_unlink(e);
  retire(e);
  while (e.waiters.head != nullptr) unlink(e.waiters.head);
  entries_.erase(e.key);  // destroys e
  counters_.entries = entries_.size();
}

void CertCache::evict_for_insert() {
  while (entries_.size() >= max_ && lru_tail_ != nullptr) {
    ++counters_.evictions;
    erase_entry(*lru_tail_);
  }
}

void CertCache::lru_unlink(Entry& e) {
  if (!e.in_lru) return;
  (e.prev != nullptr ? e.prev->next : lru_head_) = e.next;
  (e.next != nullptr ? e.next->prev : lru_tail_) = e.prev;
  e.prev = e.next = nullptr;
  e.in_lru = false;
}

void CertCache::lru_touch(Entry& e) {
  if (e.in_lru && lru_head_ == &e) return;
  lru_unlink(e);
  e.next = lru_head_;
  if (lru_head_ != nullptr) lru_head_->prev = &e;
  lru_head_ = &e;
  if (lru_tail_ == nullptr) lru_tail_ = &e;
  e.in_lru = true;
}

void CertCache::link(CertWaiter::List& l, CertWaiter* w) {
  w->list_ = &l;
  w->next_ = nullptr;
  w->prev_ = l.tail;
  (l.tail != nullptr ? l.tail->next_ : l.head) = w;
  l.tail = w;
}

void CertCache::unlink(CertWaiter* w) {
  CertWaiter::List& l = *w->list_;
  (w->prev_ != nullptr ? w->prev_->next_ : l.head) = w->next_;
  (w->next_ != nullptr ? w->next_->prev_ : l.tail) = w->prev_;
  w->prev_ = w->next_ = nullptr;
  w->list_ = nullptr;
}

size_t CertCache::expire_idle(uint64_t now_ms) {
  size_t n = 0;
  while (lru_tail_ != nullptr && lru_tail_->last_used_ms + inactive_ms_ <= now_ms) {
    ++counters_.evictions;
    erase_entry(*lru_tail_);
    ++n;
  }
  return n;
}

bool CertCache::poll() {
  store_.index().qsbr().quiescent(reader_);
  bool did = false;
  if (!graveyard_.empty()) {
    for (LoadedCert& c : graveyard_) free_cert(c);
    graveyard_.clear();
    did = true;
  }
  if (inbox_ready_.load(std::memory_order_acquire)) {
    std::vector<std::unique_ptr<StoreJob>> done;
    {
      std::lock_guard<std::mutex> lock(inbox_mu_);
      done.swap(inbox_);
      inbox_ready_.store(false, std::memory_order_relaxed);
    }
    for (auto& job : done) AdminState::job_done(std::move(job));
    did = true;
  }
  return did;
}

void CertCache::fire() {
  const uint64_t now = reactor_.now_ms();
  expire_idle(now);
  store_.index().try_reclaim();
  reactor_.timers().arm(*this, now + kHousekeepingMs);
}

void CertCache::deliver(std::unique_ptr<StoreJob> job) {
  {
    std::lock_guard<std::mutex> lock(inbox_mu_);
    inbox_.push_back(std::move(job));
    inbox_ready_.store(true, std::memory_order_release);
  }
  reactor_.wake();
}

config::Module& module() {
  static config::Module m{
      .name = "certs",
      .directives = directives(),
      .finalize = &finalize_certs,
      .content = [](const config::LocationConf& loc) { return loc.module<CertsLocConf>().admin; },
      // The process store is opened (and PATH scanned) on the first core's start; std::system_error if
      // PATH is unusable, which fails the worker's start. No store configured: no per-core part.
      .init_core = [](http::HttpServer& server, std::string*) -> std::unique_ptr<http::ModuleCore> {
        const http::CoreContext& core = server.core();
        const CertsConf& conf = core.conf->http.module<CertsConf>();
        if (conf.store.empty()) return nullptr;
        CertStore& store = process_store(conf, core.prefix);
        auto cc = std::make_unique<CertCache>(*core.reactor, *core.queue("default"), store, conf);
        core.reactor->add_poller(cc.get());
        return cc;
      },
  };
  return m;
}

}  // namespace kosoku::certs
