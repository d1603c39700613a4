// The `status` module (like nginx's ngx_http_stub_status_module): `status;` in a location makes it serve every
// core's counters, aggregated on demand, as text (nginx stub_status-compatible first lines, the default), JSON
// (?format=json) or Prometheus (?format=prometheus). GET and HEAD only; the request body is never read.
//
//   status;            location    (not inherited)
//   stub_status [on];  location    nginx's name: its four lines exactly (what nginx exporters parse), in any
//                                  format asked for
#include "core/stats/status_module.hh"

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/http/connection.hh"
#include "core/http/method_policy.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/export.hh"

namespace kosoku::stats {

namespace {

using namespace config;  // the directive-table vocabulary

bool set_status(Builder&, Scope& s, const Directive&) {
  s.loc->module<StatusLocConf>().enabled = true;
  return true;
}

// `stub_status;` (nginx ≥ 1.7.5; the older `stub_status on;` form is accepted, its argument ignored as nginx
// ignores it).
// One slot with `status`: both in one location is "is duplicate".
bool set_stub_status(Builder&, Scope& s, const Directive&) {
  StatusLocConf& c = s.loc->module<StatusLocConf>();
  c.enabled = true;
  c.stub_page = true;
  return true;
}

constexpr DirectiveSpec kStatusDirectives[] = {
    {.name = "status", .contexts = kCtxLocation, .args = kNoArgs, .set = set_status, .slot = "status"},
    {.name = "stub_status", .contexts = kCtxLocation, .args = {0, 1}, .set = set_stub_status, .slot = "status"},
};

class StatusHandler final : public http::ContentHandler, public http::ModuleCore {
 public:
  http::ContentHandler* content_handler() override { return this; }
  bool reads_body() const override { return false; }

  void handle(http::Exchange& ex) override {
    if (http::refuse_unless_get_or_head(ex)) return;
    const http::CoreContext& core = ex.core();
    Snapshot snap = aggregate(*core.all_stats, core.reactor->wall_time());
    add_extra(snap);
    std::string_view args = ex.args();
    std::string body;
    std::string_view type = "text/plain";
    if (ex.location().module<StatusLocConf>().stub_page) {  // nginx's headers too: no Cache-Control
      ex.respond(200, render_stub_status(snap), type);
      return;
    }
    if (absl::StrContains(args, "format=json")) {
      body = render_json(snap);
      type = "application/json";
    } else if (absl::StrContains(args, "format=prom")) {
      body = render_prometheus(snap);
      type = "text/plain; version=0.0.4";
    } else {
      body = render_text(snap);
    }
    ex.head().extra.assign("Cache-Control: no-cache\r\n");
    ex.respond(200, body, type);
  }
};

}  // namespace

config::Module& status_module() {
  static config::Module m{
      .name = "status",
      .directives = kStatusDirectives,
      .content = [](const config::LocationConf& loc) { return loc.module<StatusLocConf>().enabled; },
      .init_core = [](http::HttpServer&, std::string*) -> std::unique_ptr<http::ModuleCore> {
        return std::make_unique<StatusHandler>();
      },
  };
  return m;
}

}  // namespace kosoku::stats
