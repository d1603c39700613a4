// One core's view of the cache rules: the per-request decision behind `$cache_rule`, with the core's memo
// of decisions and its compiled RE2::Set cache, and the core's part of the shard reclamation (QSBR).
//
// Decision for a request (host = $host normalised, uri = $uri: the normalised, percent-decoded path without
// the query — the string nginx's `location ~` regexes see, so `/a%2Ejpg` and `/x/../a.jpg` are judged
// like `/a.jpg`):
//   host has no rules                 → cache_rules_default (cache unless `nocache`)
//   host has rules                    → cached iff the uri matches one of its patterns
//   host's patterns fail to compile   → not cached (logged; only possible for unvalidated input)
// Cost: a host without rules is one hash + one probe of a shard; a host with rules adds a memo probe (hit)
// or a compiled-set lookup + RE2::Set match (miss). No lock, no atomic read-modify-write, no allocation on
// a memo hit.
//
// The core's loop runs poll() once per iteration: that is the core's QSBR quiescent point (it holds no
// shard pointer between requests), and where admin requests waiting for their change to reach the disk are
// answered. A 1-second timer frees idle compiled sets and retired shards.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"
#include "core/http/exchange.hh"
#include "core/http/module_core.hh"
#include "core/reactor/reactor.hh"
#include "core/rules/compiled_cache.hh"
#include "core/rules/memo.hh"
#include "core/rules/store.hh"

namespace kosoku::config {
struct DirectiveSpec;
struct Module;
}  // namespace kosoku::config

namespace kosoku::rules {

class AdminHandler;
class AdminState;

class RulesCore final : public reactor::Poller, public reactor::Timer, public http::ModuleCore {
 public:
  /// A loop's core: the process store for `conf` (loaded from cache_rules_file on first use: throws
  /// std::system_error if that fails), timers on `r`. Register it with r.add_poller().
  RulesCore(reactor::Reactor& r, const config::MainConf& conf, const std::string& prefix);
  /// Without a loop (tests, tools): the caller calls poll() (quiescent point) and set_now().
  explicit RulesCore(RuleStore& store);
  ~RulesCore();
  RulesCore(const RulesCore&) = delete;
  RulesCore& operator=(const RulesCore&) = delete;

  /// True if the response for (host, uri) may be cached. `host` as received ($host; normalised here).
  bool decide(std::string_view host, std::string_view uri);
  /// `$cache_rule`: "1" when the request must not be cached, "" otherwise.
  std::string_view cache_rule(std::string_view host, std::string_view uri) { return decide(host, uri) ? "" : "1"; }
  /// `$cache_rule` for a request, decided once per request: proxy_cache_bypass, proxy_no_cache and
  /// add_header all read it, and the later reads of the same request (same exchange, connection and request
  /// number, same $host and $uri views) reuse the first answer.
  std::string_view cache_rule(const http::Exchange& ex);

  bool poll() override;
  void fire() override;
  /// Coarse clock for the compiled-set LRU without a reactor.
  void set_now(uint64_t now_ms) { now_ms_ = now_ms; }
  /// Frees compiled sets idle for longer than cache_rules_compiled inactive=.
  size_t expire_idle() { return compiled_.expire(now_ms_); }

  RuleStore& store() { return store_; }
  http::ContentHandler& admin();
  /// ModuleCore: the admin API serves `cache_rules_admin;` locations.
  http::ContentHandler* content_handler() override { return &admin(); }

  struct Counters {
    uint64_t decisions = 0;
    uint64_t no_rules = 0;       // host without rules: the default applied
    uint64_t memo_hits = 0;
    uint64_t memo_misses = 0;
    uint64_t compiles = 0;
    uint64_t compile_errors = 0;
    uint64_t match_oom = 0;      // RE2 DFA out of memory: counted as no match
  };
  const Counters& counters() const { return counters_; }
  const Memo& memo() const { return memo_; }
  const CompiledCache& compiled() const { return compiled_; }

  // Admin requests waiting for their change to be durable (admin_handler.cc).
  void wait_durable(AdminState* st);
  void cancel_wait(AdminState* st);

 private:
  void answer_waiters();

  reactor::Reactor* reactor_ = nullptr;
  RuleStore& store_;
  Qsbr::Reader* reader_ = nullptr;
  Memo memo_;
  CompiledCache compiled_;
  std::string host_scratch_;
  // The last request's answer (cache_rule(ex)).
  struct LastRequest {
    const http::Exchange* ex = nullptr;
    uint64_t connection = 0;
    uint64_t request = 0;
    std::string_view host;
    std::string_view uri;
    bool cache = false;
  };
  LastRequest last_;
  std::string error_;
  uint64_t now_ms_ = 0;
  uint64_t last_log_ms_ = 0;
  Counters counters_;
  std::vector<AdminState*> waiters_;
  std::unique_ptr<AdminHandler> admin_;
};

/// The rules module's descriptor (rules/rules_core.cc), its directive table (rules/rules_directives.cc).
config::Module& module();
std::span<const config::DirectiveSpec> directives();

}  // namespace kosoku::rules
