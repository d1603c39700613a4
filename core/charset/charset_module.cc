// The charset module (nginx's ngx_http_charset_module, labelling only): `charset NAME;` adds
// "; charset=NAME" to the Content-Type of every response whose type is one of `charset_types` (text/html
// always) and that names no charset of its own, whatever its status or its source (a file, an error page, a
// proxied or cached response). kosoku does not recode bodies: `source_charset` is accepted only when it names
// the same charset, `override_charset` only `off`.
//
//   charset NAME | off;          http, server, location   (default off; inherited)
//   charset_types TYPE ... | *;  http, server, location   (default nginx's list; inherited)
//   source_charset NAME;         http, server, location   (the charset the content already has)
//   override_charset off;        http, server, location
#include <string>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/charset/charset_conf.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"

namespace kosoku::charset {

namespace {

using namespace config;  // the directive-table vocabulary

bool valid_charset_name(std::string_view v) {
  if (v.empty()) return false;
  for (char c : v) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' && c != ':') {
      return false;
    }
  }
  return true;
}

bool set_charset(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v.find('$') != std::string::npos) {
    return b.fail(d.args[0].loc, "variables in \"charset\" are not supported");
  }
  if (v != "off" && !valid_charset_name(v)) return fail_invalid_value(b, d, 0);
  s.loc->module<CharsetLocConf>().charset = v == "off" ? std::string() : v;
  return true;
}

bool set_charset_types(Builder& b, Scope& s, const Directive& d) {
  CharsetLocConf& c = s.loc->module<CharsetLocConf>();
  c.types.assign({"text/html"});
  c.all_types = false;
  for (size_t i = 0; i < d.args.size(); ++i) {
    const std::string& t = d.args[i].value;
    if (t == "*") {
      c.all_types = true;
      continue;
    }
    if (t.find('/') == std::string::npos || t.find_first_of(" \t;") != std::string::npos) {
      return fail_invalid_value(b, d, i);
    }
    c.types.push_back(absl::AsciiStrToLower(t));
  }
  return true;
}

// Recoding is not done: the source charset must be the one announced (nginx recodes between them).
bool set_source_charset(Builder& b, Scope& s, const Directive& d) {
  const std::string& charset = s.loc->module<CharsetLocConf>().charset;
  if (!absl::EqualsIgnoreCase(d.args[0].value, charset)) {
    return b.fail(d.loc, absl::StrCat("\"source_charset\" ", quoted(d.args[0].value),
                                      " differs from \"charset\": kosoku does not recode content (write "
                                      "source_charset after charset, with the same name, or drop it)"));
  }
  return true;
}

bool set_override_charset(Builder& b, Scope& s, const Directive& d) {
  bool on = false;
  if (!parse_flag_arg(b, d, 0, &on)) return false;
  if (on) return b.fail(d.loc, "\"override_charset on\" is not supported: kosoku does not recode content");
  return true;
}

constexpr DirectiveSpec kCharsetDirectives[] = {
    {.name = "charset", .contexts = kCtxHttpAny, .args = kTake1, .set = set_charset,
     .merge_loc = inherit<&CharsetLocConf::charset>, .default_value = "off"},
    {.name = "charset_types", .contexts = kCtxHttpAny, .args = k1More, .set = set_charset_types,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           c.module<CharsetLocConf>().types = p.module<CharsetLocConf>().types;
           c.module<CharsetLocConf>().all_types = p.module<CharsetLocConf>().all_types;
         }},
    {.name = "source_charset", .contexts = kCtxHttpAny, .args = kTake1, .set = set_source_charset},
    {.name = "override_charset", .contexts = kCtxHttpAny, .args = kTake1, .set = set_override_charset},
};

// Adds "; charset=NAME" to the Content-Type line of `h` when its type is one of the location's.
void add_charset(const http::Exchange& ex, int, std::string& h) {
  const CharsetLocConf& c = ex.location().module<CharsetLocConf>();
  if (c.charset.empty()) return;
  for (size_t line = h.find("\r\n"); line != std::string::npos;) {
    line += 2;
    const size_t end = h.find("\r\n", line);
    if (end == std::string::npos) return;
    std::string_view field(h.data() + line, end - line);
    if (!absl::StartsWithIgnoreCase(field, "content-type:")) {
      line = end;
      continue;
    }
    std::string_view value = absl::StripAsciiWhitespace(field.substr(13));
    if (absl::StrContains(absl::AsciiStrToLower(value), "charset=")) return;  // one small copy
    std::string_view type = absl::StripTrailingAsciiWhitespace(value.substr(0, value.find(';')));
    bool listed = c.all_types;
    for (size_t i = 0; !listed && i < c.types.size(); ++i) listed = absl::EqualsIgnoreCase(type, c.types[i]);
    if (listed) h.insert(end, absl::StrCat("; charset=", c.charset));
    return;
  }
}

constexpr http::HeadFilter kHeadFilters[] = {{.run = &add_charset}};

}  // namespace

config::Module& module() {
  static config::Module m{.name = "charset", .directives = kCharsetDirectives, .head_filters = kHeadFilters};
  return m;
}

}  // namespace kosoku::charset
