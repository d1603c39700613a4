// A request's phases (nginx's phase engine, ngx_http_core_module; http/phase.hh): URI normalisation
// (POST_READ), the modules' SERVER_REWRITE handlers, the location (FIND_CONFIG) and its body-size and Expect
// checks, the modules' REWRITE and ACCESS handlers, and the content handler the configuration chose for the
// location. The class is declared in http_request.hh.
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
  // POST_READ and SERVER_REWRITE: the modules' handlers (a server-level `return`, core/rewrite/, answers before
  // any location is chosen).
  if (run_module_phases(Phase::kPostRead) || run_module_phases(Phase::kServerRewrite)) return;

  // FIND_CONFIG: the location, then the request body's framing limits (RFC 9110 §15.5.14; nginx
  // client_max_body_size) and expectations.
  loc_ = server_->find_location(uri_);
  location_chosen();
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
  // Until a handler reads the body (Exchange::read_body, which sends 100 Continue), a client waiting for
  // permission to send it gets its answer and a close; any other unread body is discarded after the response.
  if (req_.body != BodyFraming::kNone && req_.expect_100_continue) keep_alive_ = false;

  // REWRITE, ACCESS and PRE_CONTENT: the modules' handlers (a location's `return`: core/rewrite/; allow/deny:
  // core/access/).
  if (run_module_phases(Phase::kRewrite) || run_module_phases(Phase::kAccess) ||
      run_module_phases(Phase::kPreContent)) {
    return;
  }

  // CONTENT: the handler the configuration chose for the location (config/module.hh).
  ContentHandler& handler = srv_.content_handler(*loc_);
  if (!handler.reads_body()) {
    if (int status = discard_request_body(); status != 0) {
      respond(status, {}, {});
      return;
    }
  }
  handler.handle(*this);
}

}  // namespace kosoku::http
