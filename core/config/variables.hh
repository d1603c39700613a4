// Strings with nginx variables (`$uri`, `${host}`), compiled once at load and expanded per request.
//
// Used by `log_format`, `add_header`, `return`, `try_files`, proxy_set_header, proxy_redirect, the cache key
// and predicates, split_clients and upstream hash keys. The loader compiles and validates every such string
// (unknown variable → `unknown "foo" variable`, as nginx). Expansion appends to a caller-owned string and
// allocates nothing beyond that string's growth (reserve it once per connection).
//
// Variables are registered by the module that gives their value (config/module.hh: Module::variables), as
// nginx's modules add theirs to one hash: the HTTP core's ($uri, $host, $http_NAME, $status, ...:
// http/variables.cc), the proxy's ($proxy_host, $proxy_port, $proxy_add_x_forwarded_for), the rules'
// ($cache_rule), and names declared while loading (split_clients: declare_variable). Every variable resolves in
// every template: a template is expanded against one request (VariableSource), and each variable's getter
// reads what it needs from it. Names are case-insensitive (nginx hashes them lower-cased). A prefix variable
// (`$http_NAME`, `$sent_http_NAME`, `$arg_NAME`, `$cookie_NAME`) carries NAME (lower-cased, as written, e.g.
// "user_agent") as its suffix; http_var_name_matches() compares it with a header field name the nginx way
// ('-' and '_' equal, case-insensitive).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"

namespace kosoku::http {
class Exchange;
}
namespace kosoku::reactor {
class Reactor;
}

namespace kosoku::config {

class VariableSource;

/// A variable templates may name, registered by the module that gives its value.
struct Variable {
  std::string_view name;  // lower-case, without '$'; for a prefix variable the prefix ("http_")
  /// Appends the variable's value for the request `src` describes and returns true; returns false,
  /// appending nothing, when the variable is not set for it (nginx's "not found": $remote_user without
  /// credentials, $http_NAME for an absent field, $status before the response). `suffix`: the NAME of a prefix
  /// variable, the name of a declared one, else empty. Called only with a source that has a request.
  bool (*get)(const VariableSource& src, std::string_view suffix, std::string& out) = nullptr;
  bool prefix = false;  // the name is "<prefix>NAME"
};

/// One piece of a compiled template.
struct TemplateSegment {
  bool is_variable = false;
  const Variable* var = nullptr;  // is_variable only; registry-owned, lives as long as the process
  std::string text;               // literal text; for a variable its suffix (the NAME of $http_NAME, ...)
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
  /// Whether the template names variable `name` (a prefix variable by its prefix: "http_").
  bool uses(std::string_view name) const;
};

/// Compiles `s` (`$name` and `${name}`; a name is [A-Za-z0-9_]+). On error returns an empty Template and
/// sets *error (if non-null) to `FILE:LINE:COL: message` at `loc`: `unknown "foo" variable`,
/// `invalid variable name in "..."`, `the closing bracket in "name" variable is missing`.
Template compile(std::string_view s, const SourceLoc& loc, std::string* error);

/// The request a template is expanded for, and what is known of its response (http::RequestVariables).
/// Module getters read it; a test may derive its own source and override get().
class VariableSource {
 public:
  /// What is known of the response: the values of $status, $bytes_sent, $body_bytes_sent, $request_time.
  struct Response {
    int status = 0;
    uint64_t bytes_sent = 0;
    uint64_t body_bytes_sent = 0;
    uint64_t request_time_ms = 0;
  };

  /// Appends the value of `v` (with its suffix) and returns true, or returns false appending nothing.
  /// Default: the variable's getter. Must not throw.
  virtual bool get(const Variable& v, std::string_view suffix, std::string& out) const {
    return v.get != nullptr && v.get(*this, suffix, out);
  }
  /// The request (never null for the engine's sources).
  const http::Exchange& exchange() const { return *ex_; }
  /// Null while no response exists yet (building an upstream request, a cache key): the response variables
  /// ($status, $bytes_sent, $sent_http_NAME, $request_time, $upstream_cache_status) are then not set.
  const Response* response() const { return has_response_ ? &resp_ : nullptr; }
  /// The core's loop, for its cached clock; null: read the clocks directly.
  const reactor::Reactor* reactor() const { return r_; }

  /// Nesting depth of variables whose value is itself a template (split_clients' source): bounded by their
  /// getter.
  mutable int depth = 0;

 protected:
  VariableSource() = default;
  VariableSource(const http::Exchange* ex, const Response* resp, const reactor::Reactor* r)
      : ex_(ex), r_(r), has_response_(resp != nullptr) {
    if (resp != nullptr) resp_ = *resp;
  }
  ~VariableSource() = default;

 private:
  const http::Exchange* ex_ = nullptr;
  const reactor::Reactor* r_ = nullptr;
  Response resp_;
  bool has_response_ = false;
};

/// Declares `$name` (lower-case, without `$`) for compile(), with its getter (nginx's ngx_http_add_variable for
/// module variables such as split_clients'); the getter gets `name` as its suffix. Called by directive setters
/// while a configuration loads (single-threaded); the set only grows. False if `name` is already a registered
/// or declared variable.
bool declare_variable(std::string_view name, bool (*get)(const VariableSource&, std::string_view, std::string&));
/// Declares `$name` for a named group of a location regex (`(?P<name>...)`): its value is that group of the
/// regex that chose the request's location (Exchange::regex_capture). A name already known keeps its meaning.
void declare_capture_variable(std::string_view name);

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
