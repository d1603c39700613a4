// HttpRequest (http_request.hh): the request's head and server, the answers made of a status and a body
// (respond, redirect), add_header, and the access-log line. The phases are in request_phases.cc.
#include "core/http/http_request.hh"

#include "absl/strings/ascii.h"
#include "core/http/connection.hh"
#include "core/http/status.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::http {

namespace {

std::string_view rebase(std::string_view v, const char* from, size_t len, const char* to) {
  if (v.data() >= from && v.data() < from + len) return std::string_view(to + (v.data() - from), v.size());
  return v;  // static literal ("/" or "*")
}

}  // namespace

HttpRequest::HttpRequest(HttpServer& srv, const config::ServerConf& default_server)
    : srv_(srv), core_(srv.core()), fields_(srv.take_fields()), server_(&default_server),
      loc_(&default_server.base) {
  req_.fields = std::span<HeaderField>(fields_.get(), HttpServer::kMaxFields);
}

HttpRequest::~HttpRequest() {
  content_.reset();  // first: a content state's destructor may still look at its request
  replaced_content_.clear();
  if (fields_ != nullptr) srv_.give_fields(std::move(fields_));
}

void HttpRequest::release_head() {
  req_ = Request{};  // no view into the bytes freed below
  if (fields_ != nullptr) srv_.give_fields(std::move(fields_));
  // Assigning an empty string keeps the capacity: swap with one instead.
  for (std::string* s : {&head_buf_, &uri_, &host_lower_, &redirect_args_, &capture_text_}) std::string().swap(*s);
  captures_.clear();
  { ResponseHead last = std::move(head_); }  // moved from: its strings' buffers go with `last`
  head_ = ResponseHead{};
}

std::unique_ptr<RequestCtx>& HttpRequest::ctx(const config::Module& m) {
  if (m.index >= ctx_.size()) ctx_.resize(config::modules().size());
  return ctx_[m.index];
}

const RequestCtx* HttpRequest::ctx(const config::Module& m) const {
  return m.index < ctx_.size() ? ctx_[m.index].get() : nullptr;
}

void HttpRequest::begin(const config::ListenSocket& listen, std::span<const char> in, size_t head_len,
                        uint64_t now_ms) {
  // Own the head bytes: the stream's input buffer may move while the request waits for the disk.
  head_buf_.assign(in.data(), head_len);
  const char* from = in.data();
  const char* to = head_buf_.data();
  auto rb = [&](std::string_view& v) { v = rebase(v, from, head_len, to); };
  rb(req_.method_text);
  rb(req_.target);
  rb(req_.path);
  rb(req_.query);
  rb(req_.host);
  rb(req_.host_name);
  rb(req_.host_port);
  for (HeaderField& f : req_.headers()) {
    rb(f.name);
    rb(f.value);
  }
  head_bytes_ = head_len;
  start_ms_ = now_ms;
  head_only_ = req_.method == Method::kHead;
  // Virtual server by Host (lower-cased); the location follows in the phases.
  host_lower_.assign(req_.host_name.data(), req_.host_name.size());
  absl::AsciiStrToLower(&host_lower_);
  server_ = listen.find_server(host_lower_);
  loc_ = &server_->base;
}

void HttpRequest::reject(int status, uint64_t now_ms) {
  // It counts as a request, as in nginx's stub_status; its log line shows "-" for the request line.
  std::span<HeaderField> table = req_.fields;
  req_ = Request{};
  req_.fields = table;
  start_ms_ = now_ms;
  keep_alive_ = false;
  head_only_ = false;
  respond(status, {}, {});
}

void HttpRequest::respond(int status, std::string_view body, std::string_view content_type) {
  // error_page: for a request without a body only (one with a body is answered as is: its framing and the
  // handler that read part of it stay consistent; a gap against nginx, which discards the body first).
  if (body.empty() && status >= 300 && location_chosen_ && !error_redirected_ && !head_sent_ &&
      req_.body == BodyFraming::kNone && !loc_->error_pages.empty() && error_page_redirect(status)) {
    return;
  }
  // The target of an error_page redirect answers an error of its own: that status goes out (nginx: the
  // built-in page of the new error, recursive_error_pages off).
  if (error_redirected_ && status >= 300) err_status_ = 0;
  head_.status = status;
  if (body.empty() && !(status >= 200 && status < 300)) {
    body = error_page(status, loc_->server_tokens);
    if (!body.empty()) content_type = "text/html";
  }
  if (status == 304 || status == 204 || status < 200) body = {};
  head_.content_type = content_type;
  head_.content_length = static_cast<int64_t>(body.size());
  if (status >= 400) head_.etag.clear();
  send_head();
  write(body);
  finish();
}

void HttpRequest::redirect(int status, std::string_view location) {
  head_.location.assign(location);
  respond(status, {}, {});
}

void HttpRequest::append_module_fields(int status, std::string& h) {
  for (const HeadFilter& f : srv_.head_filters()) f.run(*this, status, h);
}

void HttpRequest::log(uint64_t bytes_sent, uint64_t now_ms) {
  for (const PhaseHandler& h : srv_.phase_handlers(Phase::kLog)) h.run(*this);  // their result is not asked
  if (srv_.access_log == nullptr) return;
  srv_.access_log->log(*loc_, *this, status_, bytes_sent, body_bytes_, now_ms - start_ms_);
}

}  // namespace kosoku::http
