// One request and its response as content handlers see them (Exchange), apart from the wire: the parsed head
// and the bytes it views, the server and location chosen for it, the phases (request_phases.cc), the response
// head, the content module's state and the access-log line (http_request.cc). The protocol's connection
// derives one per request and implements the wire half of Exchange — the head on the wire, body bytes out, the
// request body in, the end of the message: HTTP/1.1's Http1Request (connection_impl.hh) now, a stream of an
// HTTP/2 connection next.
//
// Lifetime: the connection creates the request when the first byte of its head arrives and owns it. It ends
// once its response is complete and the stream holds no byte of it by reference (write_ref: the content state
// owns those bytes), or, after an abort, once the content state has called release(); an idle connection
// holds no request.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/http/exchange.hh"
#include "core/http/parser.hh"
#include "core/http/phase.hh"

namespace re2 {
class RE2;
}

namespace kosoku::http {

class HttpServer;

class HttpRequest : public Exchange {
 public:
  /// Takes a field-line table from the server's pool for the head; `server` is the listen socket's default
  /// server until the head names another.
  HttpRequest(HttpServer& srv, const config::ServerConf& default_server);
  virtual ~HttpRequest();
  HttpRequest(const HttpRequest&) = delete;
  HttpRequest& operator=(const HttpRequest&) = delete;

  // ---- Exchange: the request
  const Request& request() const override { return req_; }
  std::string_view uri() const override { return uri_; }
  std::string_view args() const override { return req_.query; }
  const config::ServerConf& server() const override { return *server_; }
  const config::LocationConf& location() const override { return *loc_; }
  const CoreContext& core() const override { return core_; }
  std::string_view host() const override { return host_lower_; }
  uint64_t request_length() const override { return head_bytes_; }
  bool regex_capture(std::string_view group, std::string_view* out) const override;
  UriOrigin uri_origin() const override { return uri_origin_; }
  bool set_uri(std::string uri, const std::string* args) override;
  void use_location(const config::LocationConf& loc) override { loc_ = &loc; }
  void set_captures(const re2::RE2& re, std::string_view subject, std::span<const std::string_view> groups) override;
  void internal_redirect(std::string_view target) override { redirect_internally(std::string(target)); }
  ResponseHead& head() override { return head_; }
  const ResponseHead& head() const override { return head_; }
  std::unique_ptr<ContentState>& state() override { return content_; }
  std::unique_ptr<RequestCtx>& ctx(const config::Module& m) override;
  const RequestCtx* ctx(const config::Module& m) const override;
  void respond(int status, std::string_view body, std::string_view content_type) override;
  void redirect(int status, std::string_view location) override;
  int discard_request_body() override {
    const int status = discard_available_body();
    if (status != 0) keep_alive_ = false;
    return status;
  }

  // ---- For the connection that carries the request.
  /// The head being parsed (its field table is the request's).
  Request& parsed() { return req_; }
  /// The head is complete: its `head_len` bytes at the start of `in` are copied into the request (the views of
  /// parsed() are moved onto the copy, so the connection may consume its input) and the virtual server is
  /// chosen by the lower-cased host (config/conf.hh: nginx's order).
  void begin(const config::ListenSocket& listen, std::span<const char> in, size_t head_len, uint64_t now_ms);
  /// A head that could not be parsed: the default server's error answer (`status`), logged with "-" for the
  /// request line. The head's views are dropped first: they point into input the connection discards.
  void reject(int status, uint64_t now_ms);
  /// POST_READ through CONTENT (http/phase.hh), nginx's order; the content handler may finish at once or later.
  void run_phases();
  /// The status the response goes out with: an error_page redirect's (err_status_) in place of what its target
  /// answered (unless the target answered an error of its own), else the handler's.
  int final_status() const { return err_status_ != 0 ? err_status_ : head_.status; }
  /// The access-log line of the finished request (LOG phase): `bytes_sent` is what the wire sent for it.
  void log(uint64_t bytes_sent, uint64_t now_ms);
  /// The response is complete and logged: the head's memory goes (field table back to the pool, the head's
  /// bytes, $uri, the response head's strings). What stays is the content state and the modules' data.
  void release_head();
  /// Whether the response referenced body bytes without copying them (write_ref): the request, whose content
  /// state owns those bytes, then lives until the stream has sent them.
  bool wrote_by_ref() const { return wrote_by_ref_; }
  /// Whether the connection may carry another request after this one (HTTP/1.1 persistence, RFC 9112 §9.3):
  /// set by the connection, cleared by the phases where the request's framing can no longer be trusted.
  void set_keep_alive(bool on) { keep_alive_ = on; }

 protected:
  /// The location is chosen (FIND_CONFIG): the wire applies its limits (request body size, persistence).
  virtual void location_chosen() {}
  /// Discards the request body bytes that have already arrived (Exchange::discard_request_body); returns 0, or
  /// the status of a malformed body.
  virtual int discard_available_body() = 0;
  /// The fields the modules' head filters add to a response with `status` (HttpServer::head_filters; add_header:
  /// core/headers/), each "Name: value\r\n".
  void append_module_fields(int status, std::string& h);

  HttpServer& srv_;
  const CoreContext& core_;
  Request req_;
  std::unique_ptr<HeaderField[]> fields_;  // the pooled field table req_ views (HttpServer::take_fields)
  std::string head_buf_;                   // the head's bytes, which req_ views
  std::string uri_;
  std::string host_lower_;
  const config::ServerConf* server_;
  const config::LocationConf* loc_;
  ResponseHead head_;
  std::unique_ptr<ContentState> content_;
  /// The content state an error_page redirect took the request from: kept (inert) until the request goes, as
  /// the redirect may run inside one of its calls.
  /// The content states of the handlers an internal redirect replaced (one per redirect, at most uri_changes_):
  /// kept, inert, until the request goes, since a redirect may come from inside one of them.
  std::vector<std::unique_ptr<ContentState>> replaced_content_;
  std::vector<std::unique_ptr<RequestCtx>> ctx_;  // by Module::index; empty until a module keeps data
  uint64_t start_ms_ = 0;
  uint64_t head_bytes_ = 0;
  uint64_t body_bytes_ = 0;
  int status_ = 0;
  bool keep_alive_ = true;
  bool head_only_ = false;   // a HEAD request: no body bytes go out
  bool head_sent_ = false;
  bool wrote_by_ref_ = false;

 private:
  /// The phase's handlers in order until one answers (kDone) or asks for the location again (kFindConfig).
  PhaseResult run_module_phases(Phase phase);
  /// SERVER_REWRITE through CONTENT for the current URI (the phases after POST_READ, where an internal
  /// redirect starts again, as nginx's ngx_http_internal_redirect).
  void run_from_server_rewrite();
  /// From FIND_CONFIG's checks (loc_ chosen) through CONTENT; a named location starts here.
  void run_from_location();
  /// `error_page` for `status` (config/conf.hh: ErrorPage): an internal redirect, or a redirect to a URL.
  /// True when it answered (or will); false when no error_page applies and the caller answers as usual.
  bool error_page_redirect(int status);
  /// The internal redirect of error_page and try_files (Exchange::internal_redirect): one URI change.
  void redirect_internally(std::string target);

  bool location_chosen_ = false;  // FIND_CONFIG ran: error_page may apply
  bool error_redirected_ = false;  // an error_page redirect happened: no second one (recursive_error_pages off)
  int err_status_ = 0;             // the status of an error_page redirect's answer (0: the target's own)
  std::string redirect_args_;      // the query an error_page URI or a rewrite gave (req_.query views it)
  /// URI changes left (nginx's NGX_HTTP_MAX_URI_CHANGES + 1): a REWRITE handler's kFindConfig takes one; at 0
  /// the request is a "rewrite or internal redirection cycle" (500).
  int uri_changes_ = 11;
  UriOrigin uri_origin_ = UriOrigin::kAsReceived;
  /// FIND_CONFIG: the location for uri_ (and its captures); a changed URI is then kChanged.
  void find_config();
  /// The groups of the last regex match with captures (a regex location at FIND_CONFIG, a rewrite, an `if`):
  /// offset and length in capture_text_, -1: none.
  std::vector<std::pair<int32_t, int32_t>> captures_;
  std::string capture_text_;              // the string that regex matched
  const re2::RE2* capture_re_ = nullptr;  // the regex captures_ come from (its named groups)
  /// FIND_CONFIG's captures for a regex location (a second match, with groups, of the one find_location
  /// made; none for a regex without groups); any other location keeps the captures an earlier match (a
  /// rewrite's) made, as nginx does.
  void match_captures();
};

}  // namespace kosoku::http
