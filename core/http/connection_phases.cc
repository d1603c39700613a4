// HttpConnection's request phases (nginx's phase engine, ngx_http_core_module): the server-level `return`
// (SERVER_REWRITE), the location (FIND_CONFIG), the body-size and Expect checks, allow/deny (ACCESS) and the
// content handler; plus the answers the connection gives itself: `return CODE [TEXT|URL]` and the `status`
// location. The class is declared in connection_impl.hh.
#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "core/base/log.hh"
#include "core/http/connection_impl.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"
#include "core/stats/export.hh"

namespace kosoku::http {

namespace {

bool addr_matches(const config::AccessRule& r, const sockaddr* sa) {
  if (r.all) return true;
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

bool access_allowed(const config::LocationConf& loc, const sockaddr* peer) {
  for (const config::AccessRule& r : loc.access) {
    if (addr_matches(r, peer)) return r.allow;
  }
  return true;
}

}  // namespace

void HttpConnection::run_phases() {
  NormalizeResult nr = normalize_path(req_.path, uri_);
  int norm = nr.http_status;
  if (req_.target_form != TargetForm::kOrigin && req_.target_form != TargetForm::kAbsolute) {
    norm = req_.method == Method::kConnect ? 405 : (req_.method == Method::kOptions ? 0 : 400);
    uri_.assign("*");
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
  if (chunked_ != nullptr) *chunked_ = ChunkedDecoder(ChunkedLimits{.max_body_size = loc_->client_max_body_size});
  if (loc_->keepalive_timeout_ms == 0 || requests_ >= loc_->keepalive_requests) keep_alive_ = false;

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

  // ACCESS phase: allow/deny.
  if (!loc_->access.empty() && !access_allowed(*loc_, stream_->peer())) {
    KOSOKU_LOG(kError, "access forbidden by rule, client: %s, request: \"%s %s\"", stream_->peer_text(),
               req_.method_text, base::log_escaped(req_.target));
    respond(403, {}, {});
    return;
  }
  // A request body is never read by the handlers below: refuse 100-continue and close after the answer if the
  // client is waiting for permission, otherwise discard the body after the response.
  if (req_.body != BodyFraming::kNone && req_.expect_100_continue) keep_alive_ = false;

  ContentHandler& handler = srv_.content_handler(*loc_);
  if (&handler == &srv_.static_handler() || loc_->ret.code != 0) {
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
  if (&handler != &srv_.static_handler()) {
    handler.handle(*this);  // e.g. proxy_pass: every method goes to the handler
    return;
  }
  if (req_.method == Method::kOther) {
    // RFC 9110 §9.1: a method the server does not recognise is 501 (a known one it refuses is 405).
    respond(501, {}, {});
    return;
  }
  if (req_.method != Method::kGet && req_.method != Method::kHead) {
    head_.extra.assign("Allow: GET, HEAD\r\n");
    respond(405, {}, {});
    return;
  }
  if (loc_->status) {
    serve_status();
    return;
  }
  handler.handle(*this);
}

// `status;` (like nginx's stub_status): every core's counters, aggregated on demand. Format by
// ?format=json|prometheus|text (default text, nginx stub_status-compatible first lines).
void HttpConnection::serve_status() {
  stats::Snapshot snap = stats::aggregate(*core_.all_stats, core_.reactor->wall_time());
  stats::add_extra(snap);
  std::string_view args = req_.query;
  std::string body;
  std::string_view type = "text/plain";
  if (absl::StrContains(args, "format=json")) {
    body = stats::render_json(snap);
    type = "application/json";
  } else if (absl::StrContains(args, "format=prom")) {
    body = stats::render_prometheus(snap);
    type = "text/plain; version=0.0.4";
  } else {
    body = stats::render_text(snap);
  }
  head_.extra.assign("Cache-Control: no-cache\r\n");
  respond(200, body, type);
}

// `return CODE [TEXT|URL]` (ngx_http_rewrite_module): redirects for 301/302/303/307/308, else a response with
// TEXT as the body (default_type). Variables in TEXT/URL are expanded.
void HttpConnection::do_return(const config::ReturnConf& ret) {
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
std::string_view HttpConnection::content_type_for_uri() const {
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
