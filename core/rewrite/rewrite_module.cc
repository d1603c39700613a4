// The rewrite module (nginx's ngx_http_rewrite_module; only `return` so far): the directive, and its answer in
// the SERVER_REWRITE phase (a server's `return`, before any location is chosen) and the REWRITE phase (a
// location's, before access checks) — a redirect for 301/302/303/307/308, else TEXT as the body.
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/http/phase.hh"
#include "core/http/variables.hh"
#include "core/reactor/reactor.hh"
#include "core/rewrite/rewrite_conf.hh"

namespace kosoku::rewrite {

namespace {

using namespace config;  // the directive-table vocabulary

bool is_redirect(int code) { return code == 301 || code == 302 || code == 303 || code == 307 || code == 308; }

// `return CODE [TEXT|URL];` / `return URL;` (server, location). URL form: http://, https:// or $scheme
// start → 302. CODE 0..999 (nginx allows its own 444 and the like).
bool set_return(Builder& b, Scope& s, const Directive& d) {
  ReturnConf r;
  const Arg& first = d.args[0];
  const Arg* text = d.args.size() == 2 ? &d.args[1] : nullptr;
  if (d.args.size() == 1 && (first.value.rfind("http://", 0) == 0 || first.value.rfind("https://", 0) == 0 ||
                             first.value.rfind("$scheme", 0) == 0)) {
    r.code = 302;
    text = &first;
  } else {
    auto code = parse_number(first.value, 999);
    if (!code) return b.fail(first.loc, absl::StrCat("invalid return code ", quoted(first.value)));
    r.code = static_cast<int>(*code);
  }
  if (text) {
    r.text = text->value;
    // A redirect's URL becomes the Location field: its variables are percent-encoded (variables.hh, kUri).
    r.text_tpl = compile_arg(b, *text, is_redirect(r.code) ? LogEscape::kUri : LogEscape::kNone);
    if (!r.text_tpl) return false;
  } else {
    r.text_tpl = std::make_shared<const Template>();
  }
  s.loc->module<RewriteLocConf>().ret = std::move(r);
  return true;
}

constexpr DirectiveSpec kRewriteDirectives[] = {
    {.name = "return", .contexts = kCtxServerAny, .args = kTake12, .set = set_return},
};

// nginx's ngx_http_set_content_type: the MIME type of $uri's extension in the location's `types`, else
// default_type.
std::string_view content_type_for_uri(const http::Exchange& ex) {
  const config::LocationConf& loc = ex.location();
  std::string_view name = ex.uri();
  size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size() && loc.types != nullptr) {
    std::string ext(name.substr(dot + 1));
    absl::AsciiStrToLower(&ext);
    auto it = loc.types->find(ext);
    if (it != loc.types->end()) return it->second;
  }
  return loc.default_type;
}

// `return CODE [TEXT|URL]`: variables in TEXT/URL are expanded. The answer never reads the request body: what
// has arrived of it is dropped first, so a malformed body is answered 400 instead.
http::PhaseResult do_return(http::Exchange& ex, const ReturnConf& ret) {
  if (int status = ex.discard_request_body(); status != 0) {
    ex.respond(status);
    return http::PhaseResult::kDone;
  }
  std::string text = ret.text;
  if (ret.text_tpl != nullptr && ret.text_tpl->has_variables()) {
    text.clear();
    http::RequestVariables vars(ex, http::RequestVariables::Response{}, ex.core().reactor);
    config::expand(*ret.text_tpl, vars, text);
  }
  if (is_redirect(ret.code)) {
    ex.redirect(ret.code, text);
  } else {
    ex.respond(ret.code, text, text.empty() ? std::string_view() : content_type_for_uri(ex));
  }
  return http::PhaseResult::kDone;
}

http::PhaseResult server_return(http::Exchange& ex) {
  const ReturnConf& ret = ex.server().base.module<RewriteLocConf>().ret;
  return ret.code != 0 ? do_return(ex, ret) : http::PhaseResult::kNext;
}

http::PhaseResult location_return(http::Exchange& ex) {
  const config::LocationConf& loc = ex.location();
  if (&loc == &ex.server().base) return http::PhaseResult::kNext;  // the server's, already run
  const ReturnConf& ret = loc.module<RewriteLocConf>().ret;
  return ret.code != 0 ? do_return(ex, ret) : http::PhaseResult::kNext;
}

constexpr http::PhaseHandler kRewritePhases[] = {
    {.phase = http::Phase::kServerRewrite, .run = &server_return},
    {.phase = http::Phase::kRewrite, .run = &location_return},
};

}  // namespace

config::Module& module() {
  static config::Module m{.name = "rewrite", .directives = kRewriteDirectives, .phases = kRewritePhases};
  return m;
}

}  // namespace kosoku::rewrite
