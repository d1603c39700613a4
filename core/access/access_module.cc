// The access module (nginx's ngx_http_access_module): `allow` / `deny` and their check in the ACCESS phase —
// 403 and the error-log line nginx writes (`access forbidden by rule, client: ADDR, request: "GET /x"`).
#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/access/access_conf.hh"
#include "core/base/log.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/values.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"

namespace kosoku::access {

namespace {

using namespace config;  // the directive-table vocabulary

// `allow ADDR[/N] | all;` `deny ...;` one ordered list (slot "access").
bool set_access(Builder& b, Scope& s, const Directive& d) {
  AccessRule r;
  r.allow = d.name == "allow";
  bool host_bits = false;
  const std::string& v = d.args[0].value;
  if (v.rfind("unix:", 0) == 0 || !parse_access_rule(v, &r, &host_bits)) {
    return b.fail(d.args[0].loc, absl::StrCat("invalid parameter ", config::quoted(v)));
  }
  if (host_bits) b.warn(d.args[0].loc, absl::StrCat("low address bits of ", v, " are meaningless"));
  s.loc->module<AccessLocConf>().rules.push_back(r);
  return true;
}

constexpr DirectiveSpec kAccessDirectives[] = {
    {.name = "allow", .contexts = kCtxHttpAny, .args = kTake1, .flags = kMulti, .set = set_access,
     .merge_loc = inherit<&AccessLocConf::rules>, .slot = "access"},
    {.name = "deny", .contexts = kCtxHttpAny, .args = kTake1, .flags = kMulti, .set = set_access,
     .merge_loc = inherit<&AccessLocConf::rules>, .slot = "access"},
};

bool matches(const AccessRule& r, const sockaddr* sa) {
  if (r.all) return true;
  if (sa == nullptr) return false;
  const uint8_t* a = nullptr;
  int family = sa->sa_family;
  uint8_t mapped[4];
  if (family == AF_INET) {
    a = reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
  } else if (family == AF_INET6) {
    const auto* in6 = &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(in6) && r.family == AF_INET) {
      std::memcpy(mapped, &in6->s6_addr[12], 4);
      a = mapped;
      family = AF_INET;
    } else {
      a = in6->s6_addr;
    }
  } else {
    return false;
  }
  if (family != r.family) return false;
  int bits = r.prefix;
  for (int i = 0; bits > 0; ++i, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : static_cast<uint8_t>(0xff << (8 - bits));
    if ((a[i] & mask) != r.addr[i]) return false;
  }
  return true;
}

http::PhaseResult check_access(http::Exchange& ex) {
  const AccessLocConf& conf = ex.location().module<AccessLocConf>();
  if (conf.rules.empty() || allowed(conf.rules, ex.peer_addr())) return http::PhaseResult::kNext;
  const http::Request& req = ex.request();
  KOSOKU_LOG(kError, "access forbidden by rule, client: %s, request: \"%s %s\"", ex.remote_addr(), req.method_text,
             base::log_escaped(req.target));
  ex.respond(403, {}, {});
  return http::PhaseResult::kDone;
}

constexpr http::PhaseHandler kAccessPhases[] = {
    {.phase = http::Phase::kAccess, .run = &check_access},
};

}  // namespace

bool allowed(const std::vector<AccessRule>& rules, const sockaddr* peer) {
  for (const AccessRule& r : rules) {
    if (matches(r, peer)) return r.allow;
  }
  return true;
}

config::Module& module() {
  static config::Module m{.name = "access", .directives = kAccessDirectives, .phases = kAccessPhases};
  return m;
}

}  // namespace kosoku::access
