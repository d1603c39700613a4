// A request's phases (nginx's phase engine, ngx_http_core_module; http/phase.hh): URI normalisation
// (POST_READ), the modules' SERVER_REWRITE handlers, the location (FIND_CONFIG) and its body-size and Expect
// checks, the modules' REWRITE and ACCESS handlers, and the content handler the configuration chose for the
// location; and `error_page`'s internal redirect, which runs them again from SERVER_REWRITE (a URI) or from
// the location's checks (a named location). The class is declared in http_request.hh.
#include <algorithm>
#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/strings/match.h"
#include "re2/re2.h"

#include "core/base/log.hh"
#include "core/config/regex.hh"
#include "core/http/connection.hh"
#include "core/http/http_request.hh"
#include "core/http/uri.hh"
#include "core/http/variables.hh"

namespace kosoku::http {

PhaseResult HttpRequest::run_module_phases(Phase phase) {
  for (const PhaseHandler& h : srv_.phase_handlers(phase)) {
    const PhaseResult r = h.run(*this);
    if (r == PhaseResult::kDone || (r == PhaseResult::kFindConfig && phase == Phase::kRewrite)) return r;
  }
  return PhaseResult::kNext;
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
  // POST_READ, then the rest.
  if (run_module_phases(Phase::kPostRead) == PhaseResult::kDone) return;
  run_from_server_rewrite();
}

void HttpRequest::run_from_server_rewrite() {
  // SERVER_REWRITE: the modules' handlers (a server's rewrite directives, core/rewrite/, before any location is
  // chosen: they may answer, or change the URI the location is then searched for).
  if (run_module_phases(Phase::kServerRewrite) == PhaseResult::kDone) return;
  find_config();
  run_from_location();
}

void HttpRequest::find_config() {
  loc_ = server_->find_location(uri_);
  if (uri_origin_ == UriOrigin::kChangedInLocation) uri_origin_ = UriOrigin::kChanged;
  match_captures();
}

void HttpRequest::run_from_location() {
  // The request body's framing limits (RFC 9110 §15.5.14; nginx client_max_body_size) and expectations, once:
  // an error_page redirect (of a request without a body) does not check them again.
  if (!location_chosen_) {
    location_chosen_ = true;
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
  }
  // `internal`: only an internal redirect (error_page, try_files) or a rewrite reaches the location (nginx's
  // r->internal); the client's own URI gets a 404.
  if (loc_->internal && uri_origin_ == UriOrigin::kAsReceived && !error_redirected_) {
    respond(404, {}, {});
    return;
  }
  // Until a handler reads the body (Exchange::read_body, which sends 100 Continue), a client waiting for
  // permission to send it gets its answer and a close; any other unread body is discarded after the response.
  if (req_.body != BodyFraming::kNone && req_.expect_100_continue) keep_alive_ = false;

  // REWRITE: the modules' handlers (a location's rewrite directives: core/rewrite/). A changed URI is searched
  // again (nginx's POST_REWRITE), at most uri_changes_ times.
  for (;;) {
    const PhaseResult r = run_module_phases(Phase::kRewrite);
    if (r == PhaseResult::kDone) return;
    if (r == PhaseResult::kNext) break;
    if (--uri_changes_ == 0) {
      KOSOKU_LOG(kError, "rewrite or internal redirection cycle while processing \"%s\"", base::log_escaped(uri_));
      respond(500, {}, {});
      return;
    }
    find_config();
  }
  // ACCESS and PRE_CONTENT: the modules' handlers (allow/deny: core/access/).
  if (run_module_phases(Phase::kAccess) == PhaseResult::kDone ||
      run_module_phases(Phase::kPreContent) == PhaseResult::kDone) {
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

void HttpRequest::match_captures() {
  using Match = config::LocationConf::Match;
  if ((loc_->match != Match::kRegex && loc_->match != Match::kRegexCaseless) || loc_->regex == nullptr) return;
  const re2::RE2& re = config::per_core_regex(*loc_->regex);
  const int n = re.NumberOfCapturingGroups();
  absl::InlinedVector<re2::StringPiece, 10> groups(static_cast<size_t>(n) + 1);
  const re2::StringPiece text(uri_.data(), uri_.size());
  if (!re.Match(text, 0, text.size(), re2::RE2::UNANCHORED, groups.data(), n + 1)) return;
  absl::InlinedVector<std::string_view, 10> views(groups.size());
  for (size_t i = 0; i < groups.size(); ++i) views[i] = std::string_view(groups[i].data(), groups[i].size());
  set_captures(re, uri_, views);
}

void HttpRequest::set_captures(const re2::RE2& re, std::string_view subject, std::span<const std::string_view> groups) {
  captures_.assign(groups.size(), {-1, 0});
  capture_re_ = &re;
  for (size_t i = 1; i < groups.size(); ++i) {
    const std::string_view g = groups[i];
    if (g.data() == nullptr) continue;
    captures_[i] = {static_cast<int32_t>(g.data() - subject.data()), static_cast<int32_t>(g.size())};
  }
  capture_text_.assign(subject);  // last: `subject` may be capture_text_'s own bytes
}

bool HttpRequest::set_uri(std::string uri, const std::string* args) {
  // A "." or ".." segment, or a NUL, and the URI is normalised (and may be refused) as a request's path is.
  bool dots = uri.find('\0') != std::string::npos;
  for (size_t i = 0; i <= uri.size() && !dots;) {
    size_t j = uri.find('/', i);
    if (j == std::string::npos) j = uri.size();
    const std::string_view seg = std::string_view(uri).substr(i, j - i);
    dots = seg == "." || seg == "..";
    i = j + 1;
  }
  if (dots) {
    std::string normal;
    if (!normalize_path(uri, normal).ok()) return false;
    uri = std::move(normal);
  }
  uri_ = std::move(uri);
  uri_origin_ = UriOrigin::kChangedInLocation;
  if (args != nullptr) {
    redirect_args_ = *args;
    req_.query = redirect_args_;
    req_.has_query = !redirect_args_.empty();
  }
  return true;
}

bool HttpRequest::regex_capture(std::string_view group, std::string_view* out) const {
  if (captures_.empty() || group.empty()) return false;
  size_t i = 0;
  if (group.size() == 1 && group[0] >= '1' && group[0] <= '9') {
    i = static_cast<size_t>(group[0] - '0');
  } else {
    // Variable names are lower-cased; the regex's group names are as written.
    bool found = false;
    for (const auto& [name, index] : capture_re_->NamedCapturingGroups()) {
      if (absl::EqualsIgnoreCase(name, group)) {
        i = static_cast<size_t>(index);
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  if (i >= captures_.size() || captures_[i].first < 0) return false;
  *out = std::string_view(capture_text_).substr(static_cast<size_t>(captures_[i].first), static_cast<size_t>(captures_[i].second));
  return true;
}

// `error_page` (nginx's ngx_http_send_error_page): runs inside respond(), possibly inside a call of the content
// state that failed; that state is kept until the request goes, so its call returns into live memory.
bool HttpRequest::error_page_redirect(int status) {
  const config::ErrorPage* page = nullptr;
  for (const config::ErrorPage& ep : loc_->error_pages) {
    if (std::find(ep.codes.begin(), ep.codes.end(), status) != ep.codes.end()) {
      page = &ep;
      break;
    }
  }
  if (page == nullptr) return false;
  error_redirected_ = true;
  std::string target;
  RequestVariables vars(*this, RequestVariables::Response{status, 0, 0, 0}, core_.reactor);
  config::expand(*page->uri, vars, target);
  if (target.empty()) return false;
  if (target[0] != '/' && target[0] != '@') {
    // A URL: the client is sent there (nginx: 302, or the `=` status when it is a redirect's).
    const int o = page->overwrite;
    const int code = o == 301 || o == 302 || o == 303 || o == 307 || o == 308 ? o : 302;
    head_ = ResponseHead{};  // nothing of the failed answer (validators, stored fields) goes with the redirect
    redirect(code, target);
    return true;
  }
  // An internal redirect: to a URI as a GET (HEAD stays HEAD), to a named location with its own method (nginx's
  // ngx_http_named_location).
  err_status_ = page->overwrite < 0 ? status : page->overwrite;
  if (req_.method != Method::kHead && target[0] != '@') {
    req_.method = Method::kGet;
    req_.method_text = "GET";
  }
  // The error page is sent whole: the client's preconditions and Range were about the resource it asked for
  // (nginx's not-modified and range filters let a status other than 200 through untouched).
  for (HeaderToken t : {HeaderToken::kIfMatch, HeaderToken::kIfModifiedSince, HeaderToken::kIfNoneMatch,
                        HeaderToken::kIfRange, HeaderToken::kIfUnmodifiedSince, HeaderToken::kRange}) {
    req_.first_field[static_cast<size_t>(t)] = Request::kNoField;
  }
  redirect_internally(std::move(target));
  return true;
}

void HttpRequest::redirect_internally(std::string target) {
  if (--uri_changes_ <= 0) {
    KOSOKU_LOG(kError, "rewrite or internal redirection cycle while internally redirecting to \"%s\"",
               base::log_escaped(target));
    err_status_ = 0;
    respond(500, {}, {});
    return;
  }
  // The handler that asked, or failed, lets go (it is kept, inert, until the request goes), and the response head
  // starts anew.
  if (content_ != nullptr) {
    content_->on_response_complete();
    replaced_content_.push_back(std::move(content_));
  }
  head_ = ResponseHead{};
  if (!target.empty() && target[0] == '@') {
    const config::LocationConf* named = server_->find_named(target);
    if (named == nullptr) {
      KOSOKU_LOG(kError, "could not find named location \"%s\"", base::log_escaped(target));
      err_status_ = 0;
      respond(500, {}, {});
      return;
    }
    loc_ = named;
    run_from_location();
    return;
  }
  const size_t q = target.find('?');
  if (q != std::string::npos) {
    redirect_args_ = target.substr(q + 1);
    req_.query = redirect_args_;
    target.resize(q);
  } else {
    req_.query = {};
  }
  req_.has_query = q != std::string::npos;
  // The path as a request's: percent-decoded, dot segments resolved (a variable may have brought "../").
  if (NormalizeResult nr = normalize_path(target, uri_); !nr.ok()) {
    err_status_ = 0;
    respond(nr.http_status, {}, {});
    return;
  }
  uri_origin_ = UriOrigin::kChangedInLocation;  // kChanged once the location is chosen for it
  run_from_server_rewrite();
}

}  // namespace kosoku::http
