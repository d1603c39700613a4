// Dynamic per-host cache rules (core/rules/): where the rules live, the default for hosts without rules, the
// per-core caches, and the admin location. kosoku's own directives (no nginx module has them; in the
// nginx + ngx_mruby + MySQL setup they replace, these were Ruby code and a database).
//
//   cache_rules_file PATH;                 http      (none: rules in memory only)
//   cache_rules_default cache|nocache;     http      cache
//   cache_rules_memo N;                    http      100000   (0: no memo)
//   cache_rules_compiled N [inactive=T];   http      1024 inactive=10m
//   cache_rules_admin;                     location  (not inherited, like `status`)
//
// The http-only rows carry no default_value text: their defaults are the rules::RulesConf initialisers
// (core/rules/rules_conf.hh), checked by tests/unit/rules_test.cc.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/rules/rules_conf.hh"
#include "core/rules/rules_core.hh"

namespace kosoku::rules {

namespace {

using namespace config;  // the directive-table vocabulary: Builder, Scope, Directive, set_*

RulesConf& rules_of(Scope& s) { return s.main->http.module<RulesConf>(); }

bool set_rules_file(Builder& b, Scope& s, const Directive& d) {
  if (d.args[0].value.empty()) return fail_invalid_value(b, d, 0);
  rules_of(s).file = d.args[0].value;
  return true;
}

bool set_rules_default(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v != "cache" && v != "nocache") return fail_invalid_value(b, d, 0, ", it must be \"cache\" or \"nocache\"");
  rules_of(s).default_cache = v == "cache";
  return true;
}

bool set_rules_memo(Builder& b, Scope& s, const Directive& d) {
  auto v = parse_number(d.args[0].value, 1u << 30);
  if (!v) return fail_invalid_value(b, d, 0);
  rules_of(s).memo_max = static_cast<uint32_t>(*v);
  return true;
}

// `cache_rules_compiled N [inactive=TIME];` N >= 1.
bool set_rules_compiled(Builder& b, Scope& s, const Directive& d) {
  auto v = parse_number(d.args[0].value, 1u << 24);
  if (!v || *v == 0) return fail_invalid_value(b, d, 0);
  rules_of(s).compiled_max = static_cast<uint32_t>(*v);
  if (d.args.size() == 2) {
    std::string_view a = d.args[1].value;
    if (a.substr(0, 9) != "inactive=") return b.fail(d.args[1].loc, absl::StrCat("invalid parameter ", quoted(a)));
    auto t = parse_time_ms(a.substr(9));
    if (!t || *t == 0) return fail_invalid_value(b, d, 1);
    rules_of(s).compiled_inactive_ms = *t;
  }
  return true;
}

bool set_rules_admin(Builder&, Scope& s, const Directive&) {
  s.loc->module<RulesLocConf>().admin = true;
  return true;
}

constexpr DirectiveSpec kRulesDirectives[] = {
    {.name = "cache_rules_file", .contexts = kCtxHttp, .args = kTake1, .set = set_rules_file},
    {.name = "cache_rules_default", .contexts = kCtxHttp, .args = kTake1, .set = set_rules_default},
    {.name = "cache_rules_memo", .contexts = kCtxHttp, .args = kTake1, .set = set_rules_memo},
    {.name = "cache_rules_compiled", .contexts = kCtxHttp, .args = kTake12, .set = set_rules_compiled},
    {.name = "cache_rules_admin", .contexts = kCtxLocation, .args = kNoArgs, .set = set_rules_admin},
};

}  // namespace

std::span<const config::DirectiveSpec> directives() { return kRulesDirectives; }

}  // namespace kosoku::rules
