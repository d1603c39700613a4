// The headers module (nginx's ngx_http_headers_module; add_header so far): the directive, and the head filter
// that adds its fields to a response head — for the statuses nginx names unless `always`, with the value's
// variables expanded against the request and its status; a value that expands to "" is not sent.
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/variables.hh"
#include "core/headers/headers_conf.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"
#include "core/http/variables.hh"

namespace kosoku::headers {

namespace {

using namespace config;  // the directive-table vocabulary

// `add_header NAME VALUE [always];`
bool set_add_header(Builder& b, Scope& s, const Directive& d) {
  AddHeader h;
  h.name = d.args[0].value;
  if (h.name.empty() || h.name.find_first_of(" \t\r\n:") != std::string::npos) return fail_invalid_value(b, d, 0);
  h.value = d.args[1].value;
  if (h.value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) return fail_invalid_value(b, d, 1);
  if (d.args.size() == 3) {
    if (d.args[2].value != "always") {
      return b.fail(d.args[2].loc, absl::StrCat("invalid parameter ", quoted(d.args[2].value)));
    }
    h.always = true;
  }
  // The value's variables are made safe for a header (variables.hh): percent-encoded in the fields whose
  // value is a URI, control bytes replaced by SP in the others.
  const bool uri = absl::EqualsIgnoreCase(h.name, "location") || absl::EqualsIgnoreCase(h.name, "content-location");
  h.value_tpl = compile_arg(b, d.args[1], uri ? LogEscape::kUri : LogEscape::kField);
  if (!h.value_tpl) return false;
  s.loc->module<HeadersLocConf>().add_header.push_back(std::move(h));
  return true;
}

constexpr DirectiveSpec kHeadersDirectives[] = {
    {.name = "add_header", .contexts = kCtxHttpAny, .args = kTake23, .flags = kMulti, .set = set_add_header,
     .merge_loc = inherit<&HeadersLocConf::add_header>},
};

// add_header applies to these statuses unless `always` (nginx ngx_http_headers_filter).
bool add_header_status(int s) {
  return s == 200 || s == 201 || s == 204 || s == 206 || s == 301 || s == 302 || s == 303 || s == 304 ||
         s == 307 || s == 308;
}

void add_headers(const http::Exchange& ex, int status, std::string& h) {
  for (const AddHeader& a : ex.location().module<HeadersLocConf>().add_header) {
    if (!a.always && !add_header_status(status)) continue;
    if (!a.value_tpl->has_variables()) {
      absl::StrAppend(&h, a.name, ": ", a.value, "\r\n");
      continue;
    }
    std::string value;
    http::RequestVariables vars(ex, http::RequestVariables::Response{status, 0, 0, 0}, ex.core().reactor);
    config::expand(*a.value_tpl, vars, value);
    if (!value.empty()) absl::StrAppend(&h, a.name, ": ", value, "\r\n");
  }
}

constexpr http::HeadFilter kHeadFilters[] = {{.run = &add_headers}};

}  // namespace

config::Module& module() {
  static config::Module m{.name = "headers", .directives = kHeadersDirectives, .head_filters = kHeadFilters};
  return m;
}

}  // namespace kosoku::headers
