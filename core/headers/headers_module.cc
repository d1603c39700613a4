// The headers module (nginx's ngx_http_headers_module): `expires` and `add_header`, and the head filters that
// add their fields to a response head, in nginx's order (Expires and Cache-Control first, then add_header's) —
// for the statuses nginx names (add_header's `always` adds its field to every status), with the values'
// variables expanded against the request and its status; an add_header value that expands to "" is not sent.
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/variables.hh"
#include "core/headers/headers_conf.hh"
#include "core/http/conditional.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"
#include "core/http/variables.hh"
#include "core/reactor/reactor.hh"

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
      return b.fail(d.args[2].loc, absl::StrCat("invalid parameter ", config::quoted(d.args[2].value)));
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

// `expires [modified] TIME | @TIME | epoch | max | off;` or `expires $variable;` (expires.hh).
bool set_expires(Builder& b, Scope& s, const Directive& d) {
  HeadersLocConf& c = s.loc->module<HeadersLocConf>();
  if (d.args.size() == 1 && d.args[0].value.find('$') != std::string::npos) {
    c.expires_var = compile_arg(b, d.args[0], LogEscape::kNone);
    return c.expires_var != nullptr;
  }
  if (!parse_expires(d.args[0].value, d.args.size() == 2 ? std::string_view(d.args[1].value) : std::string_view(),
                     &c.expires)) {
    const size_t bad = d.args.size() == 2 && d.args[0].value == "modified" ? 1 : 0;
    return fail_invalid_value(b, d, bad);
  }
  c.expires_var = nullptr;
  return true;
}

constexpr DirectiveSpec kHeadersDirectives[] = {
    {.name = "expires", .contexts = kCtxHttpAny, .args = kTake12, .set = set_expires,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.module<HeadersLocConf>().expires = p.module<HeadersLocConf>().expires;
           c.module<HeadersLocConf>().expires_var = p.module<HeadersLocConf>().expires_var;
         },
     .default_value = "off"},
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

// The response's Last-Modified: the handler's, else a proxied or cached response's field in `head`; -1: none.
int64_t last_modified_of(const http::Exchange& ex, std::string_view head) {
  if (ex.head().last_modified >= 0) return ex.head().last_modified;
  for (size_t at = head.find("\r\n"); at != std::string_view::npos && at + 2 < head.size();) {
    const size_t line = at + 2;
    at = head.find("\r\n", line);
    std::string_view field = head.substr(line, at == std::string_view::npos ? std::string_view::npos : at - line);
    if (absl::StartsWithIgnoreCase(field, "last-modified:")) {
      return http::parse_http_date(absl::StripAsciiWhitespace(field.substr(14))).value_or(-1);
    }
  }
  return -1;
}

void add_expires(const http::Exchange& ex, int status, std::string& h) {
  const HeadersLocConf& c = ex.location().module<HeadersLocConf>();
  if (c.expires.kind == Expires::Kind::kOff && c.expires_var == nullptr) return;
  if (!add_header_status(status)) return;
  Expires e = c.expires;
  if (c.expires_var != nullptr) {
    std::string value;
    http::RequestVariables vars(ex, http::RequestVariables::Response{status, 0, 0, 0}, ex.core().reactor);
    config::expand(*c.expires_var, vars, value);
    std::string_view v = absl::StripAsciiWhitespace(value);
    if (v.empty()) return;  // a variable that is empty or not set: no fields, as `off`
    std::string_view first = v.substr(0, v.find(' '));
    std::string_view second = first.size() < v.size() ? absl::StripLeadingAsciiWhitespace(v.substr(first.size()))
                                                      : std::string_view();
    if (!parse_expires(first, second, &e)) {
      // nginx adds nothing either, silently; kosoku also says so (rate-limited).
      KOSOKU_LOG_EVERY_MS(1000, kError, "invalid \"expires\" value \"%s\": no Expires sent", base::log_escaped(value));
      return;
    }
  }
  if (e.kind == Expires::Kind::kOff) return;
  const int64_t last_modified = e.kind == Expires::Kind::kModified ? last_modified_of(ex, h) : -1;
  erase_cache_fields(h);
  append_expires_fields(e, ex.core().reactor->wall_time(), last_modified, h);
}

constexpr http::HeadFilter kHeadFilters[] = {{.run = &add_expires}, {.run = &add_headers}};

}  // namespace

config::Module& module() {
  static config::Module m{.name = "headers", .directives = kHeadersDirectives, .head_filters = kHeadFilters};
  return m;
}

}  // namespace kosoku::headers
