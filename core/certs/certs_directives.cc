// The TLS certificate store (core/certs/): where the certificates live, the per-core cache of loaded ones,
// and the admin location. kosoku's own directives (nginx loads certificates at start only; the names follow
// nginx's ssl_certificate / open_file_cache).
//
//   ssl_certificate_store PATH;              http      (none: no run-time certificates)
//   ssl_certificate_cache N [inactive=T];    http      1000 inactive=10m
//   ssl_certificate_admin;                   location  (not inherited, like `status`)
//
// The http-only rows carry no default_value text: their defaults are the CertsConf initialisers
// (core/certs/certs_conf.hh), checked by tests/unit/certs_store_test.cc.
#include <string>

#include "absl/strings/str_cat.h"
#include "core/certs/cert_cache.hh"
#include "core/certs/certs_conf.hh"
#include "core/config/build.hh"
#include "core/config/directive.hh"

namespace kosoku::certs {

namespace {

using namespace config;  // the directive-table vocabulary: Builder, Scope, Directive, set_*

CertsConf& certs_of(Scope& s) { return s.main->http.module<CertsConf>(); }

bool set_store(Builder& b, Scope& s, const Directive& d) {
  if (d.args[0].value.empty()) return fail_invalid_value(b, d, 0);
  certs_of(s).store = d.args[0].value;
  return true;
}

// `ssl_certificate_cache N [inactive=TIME];` N >= 1.
bool set_cache(Builder& b, Scope& s, const Directive& d) {
  auto v = parse_number(d.args[0].value, 1u << 24);
  if (!v || *v == 0) return fail_invalid_value(b, d, 0);
  certs_of(s).cache_max = static_cast<uint32_t>(*v);
  if (d.args.size() == 2) {
    std::string_view a = d.args[1].value;
    if (a.substr(0, 9) != "inactive=") return b.fail(d.args[1].loc, absl::StrCat("invalid parameter ", quoted(a)));
    auto t = parse_time_ms(a.substr(9));
    if (!t || *t == 0) return fail_invalid_value(b, d, 1);
    certs_of(s).cache_inactive_ms = *t;
  }
  return true;
}

bool set_admin(Builder&, Scope& s, const Directive& d) {
  s.loc->module<CertsLocConf>().admin = true;
  if (!certs_of(s).admin_loc) certs_of(s).admin_loc = d.loc;
  return true;
}

constexpr DirectiveSpec kCertsDirectives[] = {
    {.name = "ssl_certificate_store", .contexts = kCtxHttp, .args = kTake1, .set = set_store},
    {.name = "ssl_certificate_cache", .contexts = kCtxHttp, .args = kTake12, .set = set_cache},
    {.name = "ssl_certificate_admin", .contexts = kCtxLocation, .args = kNoArgs, .set = set_admin},
};

}  // namespace

std::span<const config::DirectiveSpec> directives() { return kCertsDirectives; }

bool finalize_certs(config::Builder& b) {
  const CertsConf& c = b.main->http.module<CertsConf>();
  if (c.admin_loc && c.store.empty()) {
    return b.fail(*c.admin_loc, "\"ssl_certificate_admin\" needs \"ssl_certificate_store\" in the http block");
  }
  return true;
}

}  // namespace kosoku::certs
