#include "core/rules/rules_core.hh"

#include "core/base/log.hh"
#include "core/config/module.hh"
#include "core/http/connection.hh"
#include "core/rules/admin_handler.hh"
#include "core/rules/rules_conf.hh"
#include "core/rules/host_name.hh"
#include "core/rules/pattern.hh"

namespace kosoku::rules {

namespace {

constexpr uint64_t kHousekeepingMs = 1000;
constexpr uint64_t kLogIntervalMs = 10000;

}  // namespace

RulesCore::RulesCore(reactor::Reactor& r, const config::MainConf& conf, const std::string& prefix)
    : reactor_(&r),
      store_(process_store(conf.http.module<RulesConf>(), prefix)),
      memo_(store_.conf().memo_max),
      compiled_(store_.conf().compiled_max, store_.conf().compiled_inactive_ms) {
  reader_ = store_.set().qsbr().enroll();
  now_ms_ = r.now_ms();
  r.timers().arm(*this, now_ms_ + kHousekeepingMs);
  if (Persister* p = store_.persister()) {
    p->add_listener({[](void* ctx) { static_cast<RulesCore*>(ctx)->reactor_->wake(); }, this});
  }
  admin_ = std::make_unique<AdminHandler>(*this);
}

RulesCore::RulesCore(RuleStore& store)
    : store_(store), memo_(store.conf().memo_max), compiled_(store.conf().compiled_max, store.conf().compiled_inactive_ms) {
  reader_ = store_.set().qsbr().enroll();
  admin_ = std::make_unique<AdminHandler>(*this);
}

RulesCore::~RulesCore() {
  if (reactor_ != nullptr) {
    reactor_->timers().cancel(*this);
    if (Persister* p = store_.persister()) p->remove_listener(this);
  }
  for (AdminState* w : waiters_) w->detach();
  waiters_.clear();
  store_.set().qsbr().leave(reader_);
}

http::ContentHandler& RulesCore::admin() { return *admin_; }

bool RulesCore::decide(std::string_view host, std::string_view uri) {
  ++counters_.decisions;
  const bool fallback = store_.conf().default_cache;
  std::string_view h = normalize_host(host, host_scratch_);
  const size_t hash = hash_host(h);
  const Shard* shard = store_.set().shard(hash);
  if (shard == nullptr || h.empty()) {
    ++counters_.no_rules;
    return fallback;
  }
  // The memo first: an entry exists only for a host that had rules in this very shard version (versions are
  // never reused), so a hit needs no probe of the shard and no decoding of the host's record.
  const uint64_t version = shard->version();
  Memo::Hit hit = memo_.find(h, hash, uri, version);
  if (hit != Memo::Hit::kMiss) {
    ++counters_.memo_hits;
    return hit == Memo::Hit::kCache;
  }
  std::optional<HostRules> rec = shard->find(h, hash);
  if (!rec) {
    ++counters_.no_rules;
    return fallback;
  }
  ++counters_.memo_misses;
  CompiledCache::Result cs = compiled_.get(*rec, version, now_ms_, &error_);
  if (cs.compiled) ++counters_.compiles;
  if (cs.failed) {
    ++counters_.compile_errors;
    if (now_ms_ >= last_log_ms_ + kLogIntervalMs || last_log_ms_ == 0) {
      last_log_ms_ = now_ms_ + 1;
      KOSOKU_LOG(kError, "cache rules of host \"%s\" do not compile, nothing of it is cached: %s", h, error_);
    }
  }
  bool cache = false;
  bool oom = false;
  if (cs.set != nullptr) cache = set_matches(*cs.set, uri, &oom);
  if (oom) {
    ++counters_.match_oom;
    return false;
  }
  memo_.insert(h, hash, uri, version, cache);
  return cache;
}

bool RulesCore::poll() {
  store_.set().qsbr().quiescent(reader_);
  if (reactor_ != nullptr) now_ms_ = reactor_->now_ms();
  if (waiters_.empty()) return false;
  answer_waiters();
  return false;
}

void RulesCore::fire() {
  if (reactor_ != nullptr) now_ms_ = reactor_->now_ms();
  compiled_.expire(now_ms_);
  store_.set().try_reclaim();
  if (reactor_ != nullptr) reactor_->timers().arm(*this, now_ms_ + kHousekeepingMs);
}

void RulesCore::wait_durable(AdminState* st) { waiters_.push_back(st); }

void RulesCore::cancel_wait(AdminState* st) { std::erase(waiters_, st); }

void RulesCore::answer_waiters() {
  Persister* p = store_.persister();
  const uint64_t durable = p != nullptr ? p->durable() : UINT64_MAX;
  const uint64_t failed = p != nullptr ? p->failed() : 0;
  std::vector<AdminState*> ready;
  std::erase_if(waiters_, [&](AdminState* w) {
    if (w->generation() > durable && w->generation() > failed) return false;
    ready.push_back(w);
    return true;
  });
  for (AdminState* w : ready) {
    if (w->generation() <= durable) {
      w->answer_durable();
    } else {
      w->answer_failed(p->last_error());
    }
  }
}

std::string_view RulesCore::cache_rule(const http::Exchange& ex) {
  const std::string_view host = ex.host();
  const std::string_view uri = ex.uri();
  const uint64_t conn = ex.connection_id();
  const uint64_t n = ex.connection_requests();
  const LastRequest& l = last_;
  const bool same = l.ex == &ex && l.connection == conn && l.request == n && l.host.data() == host.data() &&
                    l.host.size() == host.size() && l.uri.data() == uri.data() && l.uri.size() == uri.size();
  if (!same) last_ = LastRequest{&ex, conn, n, host, uri, decide(host, uri)};
  return last_.cache ? "" : "1";
}

namespace {

// `$cache_rule`: "1" when the request must not be cached (proxy_cache_bypass / proxy_no_cache treat a
// non-empty value other than "0" as true), "" otherwise: the request's $host and $uri against the host's
// patterns, by the RulesCore of the request's loop; without one (a server built by hand), cache_rules_default.
bool cache_rule_variable(const config::VariableSource& src, std::string_view, std::string& out) {
  const http::Exchange& ex = src.exchange();
  const http::HttpServer* server = ex.core().server;
  if (auto* rc = server != nullptr ? static_cast<RulesCore*>(server->module_core(module())) : nullptr) {
    out.append(rc->cache_rule(ex));
    return true;
  }
  const config::MainConf* conf = ex.core().conf;
  if (conf != nullptr && !conf->http.module<RulesConf>().default_cache) out.append("1");
  return true;
}

constexpr config::Variable kRulesVariables[] = {
    {"cache_rule", &cache_rule_variable},
};

}  // namespace

config::Module& module() {
  static config::Module m{
      .name = "rules",
      .directives = directives(),
      .variables = kRulesVariables,
      .content = [](const config::LocationConf& loc) { return loc.module<RulesLocConf>().admin; },
      // The process store is loaded from cache_rules_file on the first core's start (std::system_error if
      // that fails, which fails the worker's start).
      .init_core = [](http::HttpServer& server, std::string*) -> std::unique_ptr<http::ModuleCore> {
        const http::CoreContext& core = server.core();
        auto rc = std::make_unique<RulesCore>(*core.reactor, *core.conf, core.prefix);
        core.reactor->add_poller(rc.get());
        return rc;
      },
  };
  return m;
}

}  // namespace kosoku::rules
