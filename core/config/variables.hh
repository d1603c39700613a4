// Strings with nginx variables (`$uri`, `${host}`), compiled once at load and expanded per request.
//
// Used by `log_format`, `add_header`, `return` and `try_files`. The loader compiles and validates every such
// string (unknown variable → `unknown "foo" variable`, as nginx); the HTTP engine expands them with its own
// VariableSource. Expansion appends to a caller-owned string and allocates nothing beyond that string's
// growth (reserve it once per connection).
//
// Variables known to kosoku (nginx meanings, ngx_http_variables.c / ngx_http_log_module.c):
//   $remote_addr $remote_user $time_local $time_iso8601 $request $request_method $request_uri $uri $args
//   $query_string $status $body_bytes_sent $bytes_sent $http_NAME $sent_http_NAME $host $server_name
//   $server_port $server_protocol $scheme $request_time $request_length $msec $connection
//   $connection_requests $upstream_cache_status $document_root $realpath_root $content_type
//   $content_length $is_args $pid $hostname
//   $proxy_host $proxy_port $proxy_add_x_forwarded_for (set only while proxying)
//   $cache_rule (core/rules/cache_rule.hh: rules::cache_rule_value)
//   $upstream_addr $upstream_status $upstream_response_time $upstream_connect_time $upstream_header_time
//   $upstream_response_length (http/variables.cc, from what the proxy recorded)
//   $arg_NAME $cookie_NAME, and module-declared names (split_clients; declare_variable) — expanded by the proxy
//   cache's source (core/cache/cache_variables.hh); elsewhere they are not set
// Names are case-insensitive (nginx hashes them lower-cased). `$http_NAME` / `$sent_http_NAME` carry NAME
// (lower-cased, as written, e.g. "user_agent") as the suffix; http_var_name_matches() compares it with a
// header field name the nginx way ('-' and '_' equal, case-insensitive).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"

namespace kosoku::config {

enum class VarId : uint8_t {
  kRemoteAddr,
  kRemoteUser,
  kTimeLocal,
  kTimeIso8601,
  kRequest,
  kRequestMethod,
  kRequestUri,
  kUri,
  kArgs,
  kQueryString,
  kStatus,
  kBodyBytesSent,
  kBytesSent,
  kHttp,      // $http_NAME: request header NAME
  kSentHttp,  // $sent_http_NAME: response header NAME
  kHost,
  kServerName,
  kServerPort,
  kServerProtocol,
  kScheme,
  kRequestTime,
  kRequestLength,
  kMsec,
  kConnection,
  kConnectionRequests,
  kUpstreamCacheStatus,
  kDocumentRoot,
  kRealpathRoot,
  kContentType,
  kContentLength,
  kIsArgs,
  kPid,
  kHostname,
  // ngx_http_proxy_module (proxy/proxy_handler.cc expands them; elsewhere they are not set)
  kProxyHost,              // $proxy_host: proxy_pass host[:port] or upstream name
  kProxyPort,              // $proxy_port
  kProxyAddXForwardedFor,  // $proxy_add_x_forwarded_for: X-Forwarded-For + ", " + $remote_addr
  kCacheRule,  // $cache_rule (core/rules): "1" when the request must not be cached, else ""
  // core/cache (cache/cache_variables.hh expands them for the proxy cache's templates)
  kArg,       // $arg_NAME: query argument NAME (suffix = NAME, as written)
  kCookie,    // $cookie_NAME: cookie NAME of the Cookie field (suffix = NAME, as written)
  kDeclared,  // a variable declared by a module while loading (split_clients): suffix = its name
  // ngx_http_upstream_module: from http::ResponseHead::upstream (set by core/proxy), one value per try joined
  // by ", "; "-" for an unknown value
  kUpstreamAddr,            // $upstream_addr
  kUpstreamStatus,          // $upstream_status
  kUpstreamResponseTime,    // $upstream_response_time (seconds, ms resolution: "0.012")
  kUpstreamConnectTime,     // $upstream_connect_time
  kUpstreamHeaderTime,      // $upstream_header_time
  kUpstreamResponseLength,  // $upstream_response_length (body bytes)
};

/// The variable's nginx name without `$` ("remote_addr"; "http_" / "sent_http_" for the prefixed ones).
std::string_view var_name(VarId id);

/// One piece of a compiled template.
struct TemplateSegment {
  bool is_variable = false;
  VarId id = VarId::kUri;  // is_variable only
  std::string text;        // literal text; for kHttp / kSentHttp the NAME suffix (lower-case); else empty
};

/// A compiled string. `escape` applies to variable values only (literal text is copied as is):
///   kNone     values copied verbatim; a missing variable expands to nothing (return's body text, try_files,
///             cache and hash keys, log_format escape=none);
///   kDefault  nginx's log escaping (base::log_escapes): `"`, `\`, bytes < 0x20 and >= 0x7f become `\xHH`
///             (upper-case hex); a missing variable prints `-` (log_format default);
///   kJson     JSON string escaping (`\"`, `\\`, `\n` `\r` `\t` `\b` `\f`, other bytes < 0x20 as `\u00hh`);
///             a missing variable expands to nothing (log_format escape=json);
///   kField    a header field value (add_header, proxy_set_header): every byte < 0x20 but HTAB, and DEL,
///             becomes SP; a missing variable expands to nothing;
///   kUri      a URI that is a header value (the URL of a `return` redirect, proxy_redirect's replacement,
///             add_header Location / Content-Location): bytes <= 0x20 and >= 0x7f are percent-encoded
///             (`%0D%0A`, upper-case hex); '%' and the rest are kept, so an already encoded value
///             ($request_uri, $args) is not encoded twice; a missing variable expands to nothing.
///
/// Why the two header modes: a variable can carry a client's bytes that the request grammar kept out of the
/// raw request but decoding let in ($uri is percent-decoded: `/a%0d%0aSet-Cookie:x` holds CR LF). No CR,
/// LF or NUL may ever reach a header value through a variable, or the client writes our response (or the
/// request we send upstream). A URI is percent-encoded, which keeps it the same URI (nginx escapes $uri the
/// same way in its directory redirect); any other field value gets SP in place of each control byte, which
/// is what RFC 9110 §5.5 asks a recipient to do with CR, LF and NUL (a sender must not generate any CTL).
/// Every template compiled for a header value carries one of the two (the directive setters choose it); the
/// engine's send_head additionally percent-encodes control bytes in whatever Location it sends, whatever
/// its source. Literal text with CR, LF or NUL in a header value is refused at load.
struct Template {
  std::vector<TemplateSegment> segments;
  LogEscape escape = LogEscape::kNone;
  SourceLoc loc;  // where the string was written

  bool has_variables() const;
  bool uses(VarId id) const;
};

/// Compiles `s` (`$name` and `${name}`; a name is [A-Za-z0-9_]+). On error returns an empty Template and
/// sets *error (if non-null) to `FILE:LINE:COL: message` at `loc`: `unknown "foo" variable`,
/// `invalid variable name in "..."`, `the closing bracket in "name" variable is missing`.
Template compile(std::string_view s, const SourceLoc& loc, std::string* error);

/// What the HTTP engine implements per request to expand templates.
class VariableSource {
 public:
  /// Appends the value of variable `id` to `out` and returns true; returns false (appending nothing) when
  /// the variable is not set for this request (nginx's "not found": e.g. $remote_user without
  /// credentials, $http_NAME for an absent header). `name_suffix` is the NAME of $http_NAME /
  /// $sent_http_NAME, empty for the others. Must not throw.
  virtual bool get(VarId id, std::string_view name_suffix, std::string& out) const = 0;

 protected:
  ~VariableSource() = default;
};

/// Declares `$name` (lower-case, without `$`) for compile(): it then compiles to VarId::kDeclared with `name`
/// as the segment text (nginx's ngx_http_add_variable for module variables such as split_clients'). Called by
/// directive setters while a configuration loads (single-threaded); the set only grows. False if `name` is
/// already a built-in or declared variable.
bool declare_variable(std::string_view name);

/// Appends the expansion of `t` to `out` (escaping variable values per t.escape). Allocation-free apart
/// from the growth of `out`.
void expand(const Template& t, const VariableSource& vars, std::string& out);
/// Appends the expansion of segment `i` of `t` alone (expand() is this for every segment in turn), for a caller
/// that needs to know which bytes of the result each segment produced.
void expand_segment(const Template& t, size_t i, const VariableSource& vars, std::string& out);

/// nginx's $http_NAME rule: `header_name` (as received) matches `suffix` when they have the same length
/// and each byte is equal case-insensitively, with '-' in the header equal to '_' in the suffix.
bool http_var_name_matches(std::string_view header_name, std::string_view suffix);

}  // namespace kosoku::config
