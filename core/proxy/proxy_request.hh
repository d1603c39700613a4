// What the proxy sends and passes back (nginx's ngx_http_proxy_create_request and the upstream header
// filters), as functions over an Exchange: no I/O, so the rules are testable on their own.
//
// Request to the upstream:
//   - request line: the client's method; the target per proxy_pass (nginx): without a URI part the client's
//     request-target as received (path and query, undecoded); with a URI part the normalised URI with the
//     matched location prefix replaced by that part, escaped again (ngx_escape_uri, NGX_ESCAPE_URI), plus
//     "?args"; version HTTP/1.0 or HTTP/1.1 (proxy_http_version).
//   - the proxy's fields first: proxy_set_header lines, then nginx's defaults for names they do not set
//     (Host $proxy_host, Connection close; TE, Keep-Alive, Expect and Upgrade empty = removed); a field whose
//     value expands to "" is not sent;
//   - body framing chosen by the handler: Content-Length or Transfer-Encoding: chunked, never both
//     (RFC 9112 §6.1): the client's own Content-Length / Transfer-Encoding are never copied;
//   - then the client's fields (proxy_pass_request_headers on), except: hop-by-hop fields (Connection,
//     Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade, Proxy-*; RFC 9110 §7.6.1), every field named in
//     the client's Connection header, Content-Length, Expect, and any name a proxy field sets.
// Response to the client: the upstream's status and fields, minus hop-by-hop ones, fields named in its
// Connection header, and the hidden ones (nginx: Date, Server, X-Pad, X-Accel-*; proxy_hide_header /
// proxy_pass_header adjust the list). Framing is the client connection's business (Content-Length passed
// when the upstream gave one, else chunked to HTTP/1.1 clients).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/config/variables.hh"
#include "core/http/exchange.hh"
#include "core/http/response_parser.hh"
#include "core/proxy/proxy_conf.hh"

namespace kosoku::proxy {

/// How the request body is framed towards the upstream.
enum class BodyFraming : uint8_t { kNone, kLength, kChunked };

/// Appends s with nginx's NGX_ESCAPE_URI escaping: SP, '#', '%', '?', CTLs, DEL and bytes >= 0x80 become %XX.
void append_escaped_uri(std::string_view s, std::string& out);

/// Appends the upstream request-target for the exchange (rules above).
void append_upstream_target(const http::Exchange& ex, const ProxyLocationConf& conf, std::string& out);

/// What a fetch for the proxy cache changes in the request it sends (nginx's ngx_http_proxy_cache_headers and
/// proxy_cache_convert_head; RFC 9111 §4.3.1 for the revalidation fields).
struct RequestEdits {
  std::string_view method;        // sent instead of the client's (GET for a HEAD with proxy_cache_convert_head)
  bool drop_conditionals = false; // If-Modified-Since, If-Unmodified-Since, If-None-Match, If-Match, Range and
                                  // If-Range of the client are not sent: the cache answers them itself
  std::string_view extra_fields;  // "Name: value\r\n" lines added after the client's (revalidation)
};

/// Builds the whole request head (request line, fields, final CRLF) into `out` (replaced).
/// `content_length` is used with BodyFraming::kLength; `edits` (may be null) are the cache's changes.
void build_request_head(const http::Exchange& ex, const ProxyLocationConf& conf, BodyFraming framing,
                        uint64_t content_length, std::string& out, const RequestEdits* edits = nullptr);

/// Fills `head` (status, content type, length, ETag, Location, extra fields) from the upstream response.
/// Views in `head` point into `resp`'s buffer, which must outlive the response's send_head().
void build_response_head(const http::ParsedResponse& resp, const ProxyLocationConf& conf, http::ResponseHead& head);

/// proxy_redirect (nginx's ngx_http_proxy_rewrite_redirect / _refresh): rewrites head.location and the URL of a
/// Refresh field in head.extra ("5; url=..."), with the first proxy_redirect line that applies (proxy_conf.hh:
/// ProxyRedirect). Variables expand against the request (http::RequestVariables). Nothing changes when no line applies.
void rewrite_redirects(const http::Exchange& ex, const ProxyLocationConf& conf, http::ResponseHead& head);

/// One value through the proxy_redirect lines: the part from `prefix` on is rewritten into `out` (whole value).
/// False (out untouched) when no line applies.
bool rewrite_redirect_value(const http::Exchange& ex, const ProxyLocationConf& conf, std::string_view value,
                            size_t prefix, std::string& out);

/// nginx's rule for retrying after the request was sent: POST, PATCH and LOCK are not idempotent
/// (RFC 9110 §9.2.2 lists the idempotent ones; nginx treats unknown methods as idempotent too).
bool idempotent(const http::Request& req);

/// The proxy_next_upstream condition an upstream status stands for (kNextHttp500, ...), or 0.
uint32_t next_upstream_flag(int status);

/// The context nginx appends to a proxy's error-log line: ", client: ADDR, server: NAME, request: "LINE",
/// upstream: "UPSTREAM", host: "HOST"" (`upstream`: "http://ADDR:PORT" of the server tried, or proxy_pass's URL).
std::string upstream_log_context(const http::Exchange& ex, std::string_view upstream);
/// The same context in two parts, for a request that outlives its exchange: before ("..., request: \"LINE\"")
/// and after (", host: \"HOST\"") the upstream; upstream_log_context() is before + ", upstream: \"U\"" + after.
std::string log_context_before_upstream(const http::Exchange& ex);
std::string log_context_after_upstream(const http::Exchange& ex);

}  // namespace kosoku::proxy
