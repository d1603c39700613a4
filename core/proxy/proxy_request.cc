#include "core/proxy/proxy_request.hh"

#include "core/http/field_names.hh"
#include "core/http/variables.hh"

#include <unistd.h>

#include <algorithm>
#include <span>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/base/log.hh"
#include "re2/re2.h"

namespace kosoku::proxy {

namespace {

using http::HeaderField;
using http::HeaderToken;

bool same_name(std::string_view a, std::string_view b) { return absl::EqualsIgnoreCase(a, b); }

// The client fields a cache fetch never forwards (RequestEdits::drop_conditionals).
bool cache_answers(HeaderToken t) {
  switch (t) {
    case HeaderToken::kIfModifiedSince:
    case HeaderToken::kIfUnmodifiedSince:
    case HeaderToken::kIfNoneMatch:
    case HeaderToken::kIfMatch:
    case HeaderToken::kRange:
    case HeaderToken::kIfRange:
      return true;
    default:
      return false;
  }
}

}  // namespace

void append_escaped_uri(std::string_view s, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f || c == '#' || c == '%' || c == '?') {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    } else {
      out.push_back(ch);
    }
  }
}

void append_upstream_target(const http::Exchange& ex, const ProxyLocationConf& conf, std::string& out) {
  const http::Request& req = ex.request();
  using Origin = http::Exchange::UriOrigin;
  const Origin origin = ex.uri_origin();
  if (!conf.pass_has_uri && origin == Origin::kAsReceived) {
    // The request-target as received (path and query, undecoded); for an absolute-form target its path.
    out.append(req.path);
    if (req.has_query) absl::StrAppend(&out, "?", req.query);
    return;
  }
  // nginx's ngx_http_proxy_create_request: the URI (changed by a rewrite or an internal redirect, or with the
  // location's prefix replaced by proxy_pass's URI), escaped; after a rewrite's `break` the whole new URI,
  // proxy_pass's URI ignored.
  std::string_view uri = ex.uri();
  if (conf.pass_has_uri && origin != Origin::kChangedInLocation) {
    const config::LocationConf& loc = ex.location();
    using Match = config::LocationConf::Match;
    const bool prefix = loc.match == Match::kPrefix || loc.match == Match::kPrefixNoRegex || loc.match == Match::kExact;
    if (prefix && absl::StartsWith(uri, loc.pattern)) uri.remove_prefix(loc.pattern.size());
    out.append(conf.pass_uri);
  }
  append_escaped_uri(uri, out);
  if (!ex.args().empty()) absl::StrAppend(&out, "?", ex.args());
}

void build_request_head(const http::Exchange& ex, const ProxyLocationConf& conf, BodyFraming framing,
                        uint64_t content_length, std::string& out, const RequestEdits* edits) {
  const http::Request& req = ex.request();
  out.clear();
  absl::StrAppend(&out, edits != nullptr && !edits->method.empty() ? edits->method : req.method_text, " ");
  append_upstream_target(ex, conf, out);
  absl::StrAppend(&out, conf.http_version_minor == 1 ? " HTTP/1.1\r\n" : " HTTP/1.0\r\n");

  http::RequestVariables vars(ex, ex.core().reactor);
  for (const ProxySetHeader& h : conf.headers) {
    const size_t mark = out.size();
    absl::StrAppend(&out, h.name, ": ");
    const size_t value_at = out.size();
    config::expand(*h.value_tpl, vars, out);
    if (out.size() == value_at) {
      out.resize(mark);  // an empty value removes the field (nginx)
      continue;
    }
    // A variable may carry a client's bytes: the templates are compiled with LogEscape::kField, so a CR, LF
    // or NUL in them arrives here as SP and cannot split the field (config/variables.hh).
    out.append("\r\n");
  }
  if (framing == BodyFraming::kLength) {
    absl::StrAppend(&out, "Content-Length: ", content_length, "\r\n");
  } else if (framing == BodyFraming::kChunked) {
    out.append("Transfer-Encoding: chunked\r\n");
  }

  if (conf.pass_request_headers) {
    const std::span<const HeaderField> fields = req.headers();
    http::FieldNameSet connection_options;  // fields the client's Connection lines make hop-by-hop
    connection_options.add_connection_options(fields);
    for (const HeaderField& f : fields) {
      if (http::header_token_flags(f.token) & http::kTokenHopByHop) continue;
      if (f.token == HeaderToken::kContentLength || f.token == HeaderToken::kExpect) continue;
      if (edits != nullptr && edits->drop_conditionals && cache_answers(f.token)) continue;
      bool overridden = false;
      for (const ProxySetHeader& h : conf.headers) {
        if (same_name(h.name, f.name)) {
          overridden = true;
          break;
        }
      }
      if (overridden || connection_options.contains(f.name)) continue;
      absl::StrAppend(&out, f.name, ": ", f.value, "\r\n");
    }
  }
  if (edits != nullptr) out.append(edits->extra_fields);
  out.append("\r\n");
}

bool rewrite_redirect_value(const http::Exchange& ex, const ProxyLocationConf& conf, std::string_view value,
                            size_t prefix, std::string& out) {
  const std::string_view tail = value.substr(prefix);
  std::string pattern;
  for (const ProxyRedirect& r : conf.redirect) {
    if (r.regex != nullptr) {
      // The regex form: searched in the value; on a match the value is replaced whole, $N from the captures.
      re2::StringPiece sub[10];
      const int n = std::min(r.regex->NumberOfCapturingGroups() + 1, 10);
      if (!r.regex->Match(re2::StringPiece(tail.data(), tail.size()), 0, tail.size(), re2::RE2::UNANCHORED, sub, n)) {
        continue;
      }
      out.assign(value.substr(0, prefix));
      const std::string& rep = r.replacement;
      for (size_t i = 0; i < rep.size(); ++i) {
        if (rep[i] == '$') {  // $N or ${N}
          size_t d = i + 1;
          const bool braced = d < rep.size() && rep[d] == '{';
          if (braced) ++d;
          if (d < rep.size() && absl::ascii_isdigit(rep[d]) && (!braced || (d + 1 < rep.size() && rep[d + 1] == '}'))) {
            const int k = rep[d] - '0';
            if (k < n) out.append(sub[k].data(), sub[k].size());
            i = braced ? d + 1 : d;
            continue;
          }
        }
        out.push_back(rep[i]);
      }
      return true;
    }
    http::RequestVariables vars(ex, ex.core().reactor);
    pattern.clear();
    config::expand(*r.redirect_tpl, vars, pattern);
    if (!absl::StartsWith(tail, pattern)) continue;
    out.assign(value.substr(0, prefix));
    config::expand(*r.replacement_tpl, vars, out);
    out.append(tail.substr(pattern.size()));
    return true;
  }
  return false;
}

void rewrite_redirects(const http::Exchange& ex, const ProxyLocationConf& conf, http::ResponseHead& head) {
  if (conf.redirect.empty()) return;
  std::string out;
  if (!head.location.empty() && rewrite_redirect_value(ex, conf, head.location, 0, out)) head.location = std::move(out);
  // Refresh: "N; url=URL" — only the URL is rewritten (nginx's ngx_http_proxy_rewrite_refresh).
  std::string_view extra = head.extra;
  for (size_t at = 0; at < extra.size();) {
    size_t eol = extra.find("\r\n", at);
    if (eol == std::string_view::npos) eol = extra.size();
    const std::string_view line = extra.substr(at, eol - at);
    const size_t colon = line.find(':');
    if (colon != std::string_view::npos && absl::EqualsIgnoreCase(line.substr(0, colon), "refresh")) {
      const size_t vstart = line.find_first_not_of(' ', colon + 1);
      const std::string_view value = vstart == std::string_view::npos ? std::string_view() : line.substr(vstart);
      const size_t url = absl::AsciiStrToLower(value).find("url=");
      if (url != std::string::npos && rewrite_redirect_value(ex, conf, value, url + 4, out)) {
        std::string rebuilt = absl::StrCat(extra.substr(0, at), line.substr(0, colon), ": ", out, extra.substr(eol));
        head.extra = std::move(rebuilt);
        return;
      }
    }
    at = eol + 2;
  }
}

void build_response_head(const http::ParsedResponse& resp, const ProxyLocationConf& conf, http::ResponseHead& head) {
  head.status = resp.status;
  head.content_type = {};
  head.etag.clear();
  head.location.clear();
  head.extra.clear();
  head.last_modified = -1;
  head.accept_ranges = false;
  head.content_length = -1;
  if (resp.has_content_length &&
      (resp.framing == http::ResponseFraming::kContentLength || resp.framing == http::ResponseFraming::kNone)) {
    head.content_length = static_cast<int64_t>(resp.content_length);
  }
  const std::span<const HeaderField> fields = resp.headers();
  http::FieldNameSet connection_options;  // fields the origin's Connection lines make hop-by-hop
  connection_options.add_connection_options(fields);
  for (const HeaderField& f : fields) {
    if (http::header_token_flags(f.token) & http::kTokenHopByHop) continue;
    switch (f.token) {
      case HeaderToken::kContentLength:
        continue;  // the client connection frames the response itself
      case HeaderToken::kContentType:
        if (head.content_type.empty()) {
          head.content_type = f.value;
          continue;
        }
        break;
      case HeaderToken::kEtag:
        if (head.etag.empty()) {
          head.etag.assign(f.value);
          continue;
        }
        break;
      case HeaderToken::kLocation:
        if (head.location.empty()) {
          head.location.assign(f.value);
          continue;
        }
        break;
      default:
        break;
    }
    bool hidden = false;
    for (const std::string& h : conf.hidden) {
      if (same_name(h, f.name)) {
        hidden = true;
        break;
      }
    }
    if (hidden || connection_options.contains(f.name)) continue;
    absl::StrAppend(&head.extra, f.name, ": ", f.value, "\r\n");
  }
}

bool idempotent(const http::Request& req) {
  return req.method != http::Method::kPost && req.method != http::Method::kPatch && req.method_text != "LOCK";
}

uint32_t next_upstream_flag(int status) {
  switch (status) {
    case 500: return kNextHttp500;
    case 502: return kNextHttp502;
    case 503: return kNextHttp503;
    case 504: return kNextHttp504;
    case 403: return kNextHttp403;
    case 404: return kNextHttp404;
    case 429: return kNextHttp429;
    default: return 0;
  }
}

std::string log_context_before_upstream(const http::Exchange& ex) {
  const http::Request& req = ex.request();
  // The client's target and Host escaped as nginx's access log does (base::log_escaped): a '"' in them
  // cannot forge the fields after it.
  return absl::StrCat(", client: ", ex.remote_addr(), ", server: ",
                      ex.server().server_names.empty() ? std::string_view() : ex.server().server_names[0],
                      ", request: \"", req.method_text, " ", base::log_escaped(req.target), " HTTP/1.",
                      req.version_minor, "\"");
}

std::string log_context_after_upstream(const http::Exchange& ex) {
  return absl::StrCat(", host: \"", base::log_escaped(ex.host()), "\"");
}

std::string upstream_log_context(const http::Exchange& ex, std::string_view upstream) {
  return absl::StrCat(log_context_before_upstream(ex), ", upstream: \"", upstream, "\"",
                      log_context_after_upstream(ex));
}

}  // namespace kosoku::proxy
