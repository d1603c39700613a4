// A request's phases (nginx's phase engine, ngx_http_core_module; http/phase.hh): URI normalisation
// (POST_READ), the server-level `return` (SERVER_REWRITE), the location (FIND_CONFIG) and its body-size and
// Expect checks, the modules' REWRITE and ACCESS handlers (allow/deny) and the content handler the
// configuration chose for the location; plus the answer the request gives itself: `return CODE [TEXT|URL]`.
// The class is declared in http_request.hh.
#include "absl/strings/ascii.h"
#include "core/http/connection.hh"
#include "core/http/http_request.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"

namespace kosoku::http {

bool HttpRequest::run_module_phases(Phase phase) {
  for (const PhaseHandler& h : srv_.phase_handlers(phase)) {
    if (h.run(*this) == PhaseResult::kDone) return true;
  }
  return false;
}

void HttpRequest::run_phases() {
  NormalizeResult nr = normalize_path(req_.path, uri_);
  int norm = nr.http_status;
  if (req_.target_form != TargetForm::kOrigin && req_.target_form != TargetForm::kAbsolute) {
    norm = req_.method == Method::kConnect ? 405 : (req_.method == Method::kOptions ? 0 : 400);
    uri_.assign(1, '*');
  }
  if (norm != 0) {
    keep_alive_ = false;
    respond(norm, {}, {});
    return;
  }
  if (server_->base.ret.code != 0) {
    // nginx's SERVER_REWRITE phase: a server-level `return` answers before any location is chosen.
    do_return(server_->base.ret);
    return;
  }
  loc_ = server_->find_location(uri_);
  // A logged request keeps its client address even if the client resets before the response is done.
  if (!loc_->access_log.empty()) remote_addr();
  location_chosen();

  // Request body framing limits (RFC 9110 §15.5.14; nginx client_max_body_size).
  uint64_t max_body = loc_->client_max_body_size;
  if (req_.body == BodyFraming::kContentLength && max_body != 0 && *req_.content_length > max_body) {
    keep_alive_ = false;
    respond(413, {}, {});
    return;
  }
  if (req_.expect_other) {
    keep_alive_ = false;
    respond(417, {}, {});
    return;
  }

  // The modules' REWRITE and ACCESS phase handlers (allow/deny: core/access/).
  if (run_module_phases(Phase::kRewrite) || run_module_phases(Phase::kAccess)) return;
  // A request body is never read by the handlers below: refuse 100-continue and close after the answer if the
  // client is waiting for permission, otherwise discard the body after the response.
  if (req_.body != BodyFraming::kNone && req_.expect_100_continue) keep_alive_ = false;

  // CONTENT phase: the handler the configuration chose for the location (config/module.hh), or `return`.
  ContentHandler& handler = srv_.content_handler(*loc_);
  if (!handler.reads_body() || loc_->ret.code != 0) {
    // These answers never read the body: drop what has already arrived first (as nginx's
    // ngx_http_discard_request_body), so a malformed body is answered 400 instead of a response that
    // promises keep-alive and then closes.
    if (int status = discard_available_body(); status != 0) {
      keep_alive_ = false;
      respond(status, {}, {});
      return;
    }
  }
  if (loc_->ret.code != 0) {
    do_return(loc_->ret);
    return;
  }
  handler.handle(*this);
}

// `return CODE [TEXT|URL]` (ngx_http_rewrite_module): redirects for 301/302/303/307/308, else a response with
// TEXT as the body (default_type). Variables in TEXT/URL are expanded.
void HttpRequest::do_return(const config::ReturnConf& ret) {
  std::string text = ret.text;
  if (ret.text_tpl != nullptr && ret.text_tpl->has_variables()) {
    text.clear();
    RequestVariables vars(*this, RequestVariables::Response{}, core_.reactor);
    config::expand(*ret.text_tpl, vars, text);
  }
  int code = ret.code;
  if (code == 301 || code == 302 || code == 303 || code == 307 || code == 308) {
    redirect(code, text);
  } else {
    return_body_ = std::move(text);
    respond(code, return_body_, return_body_.empty() ? std::string_view() : content_type_for_uri());
  }
}

// nginx's ngx_http_set_content_type: the MIME type of $uri's extension in the location's `types`, else
// default_type.
std::string_view HttpRequest::content_type_for_uri() const {
  std::string_view name = uri_;
  size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size() && loc_->types != nullptr) {
    std::string ext(name.substr(dot + 1));
    absl::AsciiStrToLower(&ext);
    auto it = loc_->types->find(ext);
    if (it != loc_->types->end()) return it->second;
  }
  return loc_->default_type;
}

}  // namespace kosoku::http
