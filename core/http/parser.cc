// HTTP/1.1 request-head parser; see parser.hh for the contract and the choices made.
#include "core/http/parser.hh"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>  // memrchr (GNU)

#include <cstring>

#include "core/http/chars.hh"
#include "core/http/field_line.hh"

namespace kosoku::http {
namespace {

using chars::is_tchar;

constexpr std::string_view kRootPath = "/";

ParseResult fail(uint16_t status, std::string_view reason) {
  return ParseResult{ParseStatus::kError, status, 0, reason};
}

ParseResult partial() { return ParseResult{}; }

/// Whether a line without its LF yet (`tail_len` bytes buffered, last byte `last`) already has more than
/// `max` content bytes. A trailing CR may still be the start of the CRLF, so it does not count yet.
bool tail_exceeds(size_t tail_len, char last, size_t max) {
  if (tail_len == 0) return false;
  const size_t content = last == '\r' ? tail_len - 1 : tail_len;
  return content > max;
}

struct Line {
  bool found = false;     // an LF was found in the window
  bool too_long = false;  // content exceeds the limit (found or not)
  bool crlf = false;      // terminated by CRLF (else a bare LF)
  size_t end = 0;         // index one past the content (the CR or LF)
  size_t next = 0;        // index of the first byte after the LF
};

/// Finds the line starting at `start`, looking at most max_content + 2 bytes ahead.
Line find_line(std::string_view buf, size_t start, size_t max_content) {
  Line l;
  const size_t avail = buf.size() - start;
  const size_t window = avail < max_content + 2 ? avail : max_content + 2;
  const void* lf = window ? std::memchr(buf.data() + start, '\n', window) : nullptr;
  if (lf == nullptr) {
    l.too_long = window > 0 && tail_exceeds(window, buf[start + window - 1], max_content);
    return l;
  }
  const size_t q = static_cast<size_t>(static_cast<const char*>(lf) - buf.data());
  l.found = true;
  l.next = q + 1;
  l.end = q;
  if (q > start && buf[q - 1] == '\r') {
    l.end = q - 1;
    l.crlf = true;
  }
  l.too_long = l.end - start > max_content;
  return l;
}

/// The same for a line find_line found too long that starts within the first `initial` bytes of the head
/// (ParserLimits::initial_buffer): it is not too long if it ends within them, so its end is looked for up to
/// there. Off the common path: only long lines take it.
[[gnu::noinline]] Line find_line_in_initial(std::string_view buf, size_t start, size_t max_content, size_t initial) {
  const size_t avail = buf.size() - start;
  const size_t window = avail < initial - start ? avail : initial - start;
  const void* lf = std::memchr(buf.data() + start, '\n', window);
  if (lf == nullptr) {
    // No LF yet: too long once the bytes up to `initial` are in (the line then ends past them) and it is.
    Line l = find_line(buf, start, max_content);
    l.too_long = l.too_long && window == initial - start;
    return l;
  }
  Line l = find_line(buf.substr(0, static_cast<size_t>(static_cast<const char*>(lf) - buf.data()) + 1), start,
                     initial);
  l.too_long = false;  // ends within the first buffer
  return l;
}

/// True if `buf` may hold a complete head: an LF followed by LF or CRLF at or after `from`.
bool may_have_head_end(std::string_view buf, size_t from) {
  const char* const end = buf.data() + buf.size();
  const char* p = buf.data() + from;
  while (p < end) {
    const char* lf = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (lf == nullptr) return false;
    if (lf + 1 < end && (lf[1] == '\n' || (lf[1] == '\r' && lf + 2 < end && lf[2] == '\n'))) return true;
    p = lf + 1;
  }
  return false;
}

/// The limit checks for a head known to be incomplete (no empty line yet), without parsing it.
ParseResult check_incomplete(std::string_view buf, const ParserLimits& lim) {
  const size_t n = buf.size();
  if (n > lim.max_header_section) return fail(431, "request header section too large");
  if (n <= lim.initial_buffer) return partial();  // every line so far may still end within the first buffer
  const size_t max_line = lim.max_request_line > lim.max_field_line ? lim.max_request_line : lim.max_field_line;
  const size_t window = n < max_line + 2 ? n : max_line + 2;
  const void* lf = ::memrchr(buf.data() + n - window, '\n', window);
  size_t tail_start;
  if (lf != nullptr) {
    tail_start = static_cast<size_t>(static_cast<const char*>(lf) - buf.data()) + 1;
  } else if (window == n) {
    tail_start = 0;
  } else {
    // No LF in the last max_line + 2 bytes: the current line is too long whatever its kind.
    const bool in_request_line = std::memchr(buf.data(), '\n', n - window) == nullptr;
    return in_request_line ? fail(414, "request line too long") : fail(431, "request header field too large");
  }
  // The tail is the request-line iff everything before it is leading empty lines.
  bool request_line = true;
  for (size_t i = 0; i < tail_start; ++i) {
    if (buf[i] != '\r' && buf[i] != '\n') {
      request_line = false;
      break;
    }
  }
  const size_t limit = request_line ? lim.max_request_line : lim.max_field_line;
  if (tail_exceeds(n - tail_start, buf[n - 1], limit)) {
    return request_line ? fail(414, "request line too long") : fail(431, "request header field too large");
  }
  return partial();
}

bool parse_version(std::string_view v, uint8_t& minor, ParseResult& err) {
  if (v.size() != 8 || v.substr(0, 5) != "HTTP/" || !chars::is_digit(v[5]) || v[6] != '.' ||
      !chars::is_digit(v[7])) {
    err = fail(400, "invalid HTTP version");
    return false;
  }
  // Another major version is 505. A higher minor version of HTTP/1 is processed as HTTP/1.1 (RFC 9110 §2.5:
  // "as if it were in the highest minor version ... to which the recipient is conformant"), as nginx does.
  if (v[5] != '1') {
    err = fail(505, "HTTP version not supported");
    return false;
  }
  minor = v[7] == '0' ? 0 : 1;
  return true;
}

void split_path_query(std::string_view t, Request& out) {
  const size_t q = t.find('?');
  if (q == std::string_view::npos) {
    out.path = t;
    return;
  }
  out.path = t.substr(0, q);
  out.query = t.substr(q + 1);
  out.has_query = true;
}

/// Classifies and checks the request-target (RFC 9112 §3.2).
bool parse_target(std::string_view t, Request& out, ParseResult& err) {
  if (out.method == Method::kConnect) {
    std::string_view name, port;
    if (t[0] == '/' || !split_host(t, name, port) || name.empty() || port.empty()) {
      err = fail(400, "invalid CONNECT target");
      return false;
    }
    out.target_form = TargetForm::kAuthority;
    out.path = t;
    return true;
  }
  if (t[0] == '/') {
    out.target_form = TargetForm::kOrigin;
    split_path_query(t, out);
    return true;
  }
  if (t == "*") {
    if (out.method != Method::kOptions) {
      err = fail(400, "asterisk-form target outside OPTIONS");
      return false;
    }
    out.target_form = TargetForm::kAsterisk;
    out.path = t;
    return true;
  }
  // absolute-form: scheme "://" authority path-abempty [ "?" query ]
  const size_t colon = t.find("://");
  if (colon == std::string_view::npos) {
    err = fail(400, "invalid request-target");
    return false;
  }
  const std::string_view scheme = t.substr(0, colon);
  if (!chars::iequals_lower(scheme, "http") && !chars::iequals_lower(scheme, "https")) {
    err = fail(400, "unsupported URI scheme");
    return false;
  }
  std::string_view rest = t.substr(colon + 3);
  const size_t auth_end = rest.find_first_of("/?");
  const std::string_view authority = rest.substr(0, auth_end);
  std::string_view name, port;
  // userinfo ("user@host") is deprecated and a recipient SHOULD treat it as an error (RFC 9110 §4.2.4).
  if (authority.find('@') != std::string_view::npos || !split_host(authority, name, port) || name.empty()) {
    err = fail(400, "invalid authority in request-target");
    return false;
  }
  out.target_form = TargetForm::kAbsolute;
  out.host = authority;
  out.host_name = name;
  out.host_port = port;
  rest = auth_end == std::string_view::npos ? std::string_view() : rest.substr(auth_end);
  if (rest.empty() || rest[0] == '?') {
    out.path = kRootPath;
    if (!rest.empty()) {
      out.query = rest.substr(1);
      out.has_query = true;
    }
    return true;
  }
  split_path_query(rest, out);
  return true;
}

bool parse_request_line(std::string_view line, Request& out, ParseResult& err) {
  size_t i = 0;
  while (i < line.size() && is_tchar(line[i])) ++i;
  if (i == 0 || i == line.size() || line[i] != ' ') {
    err = fail(400, "invalid method");
    return false;
  }
  out.method_text = line.substr(0, i);
  out.method = method_from_token(out.method_text);
  const size_t t0 = ++i;
  i = t0 + chars::find_target_end(line.data() + t0, line.size() - t0);
  if (i == t0 || i == line.size() || line[i] != ' ') {
    err = fail(400, "invalid request-target");
    return false;
  }
  out.target = line.substr(t0, i - t0);
  if (!parse_version(line.substr(i + 1), out.version_minor, err)) return false;
  return parse_target(out.target, out, err);
}

void apply_expect(std::string_view value, Request& out) {
  std::string_view rest = value;
  while (!rest.empty()) {
    const std::string_view m = chars::next_list_element(rest);
    if (m.empty()) continue;
    if (chars::iequals_lower(m, "100-continue")) {
      // A server MUST ignore 100-continue in an HTTP/1.0 request (RFC 9110 §10.1.1).
      if (out.version_minor >= 1) out.expect_100_continue = true;
    } else {
      out.expect_other = true;
    }
  }
}

/// Resets every output member (field by field: cheaper than assigning a fresh Request).
void reset(Request& r) {
  r.field_count = 0;
  r.method = Method::kOther;
  r.method_text = {};
  r.target = {};
  r.target_form = TargetForm::kOrigin;
  r.path = {};
  r.query = {};
  r.has_query = false;
  r.version_minor = 1;
  r.version_major = 1;
  r.host = {};
  r.host_name = {};
  r.host_port = {};
  r.body = BodyFraming::kNone;
  r.content_length.reset();
  r.connection_close = false;
  r.connection_keep_alive = false;
  r.connection_upgrade = false;
  r.expect_100_continue = false;
  r.expect_other = false;
  r.first_field.fill(Request::kNoField);
}

}  // namespace

Method method_from_token(std::string_view t) {
  switch (t.size()) {
    case 3:
      if (t == "GET") return Method::kGet;
      if (t == "PUT") return Method::kPut;
      break;
    case 4:
      if (t == "HEAD") return Method::kHead;
      if (t == "POST") return Method::kPost;
      break;
    case 5:
      if (t == "TRACE") return Method::kTrace;
      if (t == "PATCH") return Method::kPatch;
      if (t == "PURGE") return Method::kPurge;
      break;
    case 6:
      if (t == "DELETE") return Method::kDelete;
      break;
    case 7:
      if (t == "OPTIONS") return Method::kOptions;
      if (t == "CONNECT") return Method::kConnect;
      break;
    default:
      break;
  }
  return Method::kOther;
}

std::string_view method_name(Method m) {
  switch (m) {
    case Method::kGet: return "GET";
    case Method::kHead: return "HEAD";
    case Method::kPost: return "POST";
    case Method::kPut: return "PUT";
    case Method::kDelete: return "DELETE";
    case Method::kOptions: return "OPTIONS";
    case Method::kTrace: return "TRACE";
    case Method::kPatch: return "PATCH";
    case Method::kConnect: return "CONNECT";
    case Method::kPurge: return "PURGE";
    case Method::kOther: break;
  }
  return {};
}

const HeaderField* Request::find(std::string_view name) const {
  for (const HeaderField& f : headers()) {
    if (f.name.size() != name.size()) continue;
    size_t i = 0;
    while (i < name.size() && chars::to_lower(f.name[i]) == chars::to_lower(name[i])) ++i;
    if (i == name.size()) return &f;
  }
  return nullptr;
}

bool split_host(std::string_view host, std::string_view& name, std::string_view& port) {
  name = {};
  port = {};
  if (host.empty()) return true;
  size_t i = 0;
  if (host[0] == '[') {
    // IP-literal = "[" IPv6address "]" (RFC 3986 §3.2.2): the text inet_pton accepts. IPvFuture and zone
    // identifiers (RFC 6874 "%25") name nothing a server can be reached at and are refused.
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view inner = host.substr(1, close - 1);
    char text[INET6_ADDRSTRLEN];
    if (inner.empty() || inner.size() >= sizeof(text)) return false;
    for (char c : inner) {
      if (!chars::is(c, chars::kHex) && c != ':' && c != '.') return false;
    }
    std::memcpy(text, inner.data(), inner.size());
    text[inner.size()] = '\0';
    in6_addr addr;
    if (::inet_pton(AF_INET6, text, &addr) != 1) return false;
    i = close + 1;
  } else {
    // reg-name or IPv4address as DNS names are written (RFC 3986 §3.2.2 "intended for lookup in the DNS",
    // RFC 1123 §2.1; "_" as nginx accepts it): labels of ALPHA / DIGIT / "-" / "_" joined by single dots,
    // one trailing dot allowed. The other reg-name bytes (sub-delims such as "*", pct-encoding, raw UTF-8)
    // never name an HTTP server and would reach server selection, cache keys and logs, so they are refused.
    while (i < host.size() && host[i] != ':') {
      const char c = host[i];
      if (!chars::is(c, chars::kHostChar)) return false;
      if (c == '.' && (i == 0 || host[i - 1] == '.')) return false;  // an empty label (nginx rejects "..")
      ++i;
    }
  }
  std::string_view n = host.substr(0, i);
  if (i < host.size()) {
    // port = 1*5DIGIT up to 65535: RFC 3986's *DIGIT allows an empty port, but an authority with ":" and no
    // port is a client error here (nothing a server listens on).
    if (host[i] != ':') return false;
    const std::string_view p = host.substr(i + 1);
    if (p.empty() || p.size() > 5) return false;
    uint32_t v = 0;
    for (char c : p) {
      if (!chars::is_digit(c)) return false;
      v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    if (v > 65535) return false;
    port = p;
  }
  if (!n.empty() && n.back() == '.') n.remove_suffix(1);
  if (n.empty()) return false;  // ":80" or "." name no host
  name = n;
  return true;
}

ParseResult parse_request(std::string_view buf, Request& out, const ParserLimits& lim, size_t last_len) {
  const size_t n = buf.size();
  if (last_len > 0 && last_len <= n && !may_have_head_end(buf, last_len >= 3 ? last_len - 3 : 0)) {
    return check_incomplete(buf, lim);
  }
  reset(out);
  ParseResult err;

  // Leading empty lines (RFC 9112 §2.2).
  size_t p = 0;
  while (p < n && (buf[p] == '\r' || buf[p] == '\n')) {
    if (buf[p] == '\n') {
      if (!lim.allow_bare_lf) return fail(400, "bare LF");
      ++p;
    } else {
      if (p + 1 == n) break;
      if (buf[p + 1] != '\n') return fail(400, "bare CR");
      p += 2;
    }
    if (p > lim.max_header_section) return fail(431, "request header section too large");
  }

  // Request-line.
  Line rl = find_line(buf, p, lim.max_request_line);
  if (rl.too_long && p < lim.initial_buffer) {
    rl = find_line_in_initial(buf, p, lim.max_request_line, lim.initial_buffer);
  }
  if (rl.too_long) return fail(414, "request line too long");
  if (!rl.found) return n > lim.max_header_section ? fail(431, "request header section too large") : partial();
  if (!rl.crlf && !lim.allow_bare_lf) return fail(400, "bare LF");
  if (rl.end == p) return fail(400, "invalid request line");
  if (!parse_request_line(buf.substr(p, rl.end - p), out, err)) return err;
  p = rl.next;

  // Field lines.
  const size_t max_fields = lim.max_fields < kMaxFieldLines ? lim.max_fields : kMaxFieldLines;
  bool host_seen = false;
  std::string_view host_value;
  TransferCodings te;
  for (;;) {
    Line fl = find_line(buf, p, lim.max_field_line);
    if (fl.too_long && p < lim.initial_buffer) {
      fl = find_line_in_initial(buf, p, lim.max_field_line, lim.initial_buffer);
    }
    if (fl.too_long) return fail(431, "request header field too large");
    if (!fl.found) return n > lim.max_header_section ? fail(431, "request header section too large") : partial();
    if (fl.next > lim.max_header_section) return fail(431, "request header section too large");
    if (!fl.crlf && !lim.allow_bare_lf) return fail(400, "bare LF");
    if (fl.end == p) {
      p = fl.next;
      break;  // the empty line ending the head
    }
    if (out.field_count >= max_fields) return fail(431, "too many header lines");
    const std::string_view line = buf.substr(p, fl.end - p);
    const HeaderField* added = nullptr;  // set once fe is kNone
    const FieldLineError fe = append_head_field_line(line, out, max_fields, &added);
    if (fe != FieldLineError::kNone) {
      return fail(400, field_line_reason(fe, "obsolete line folding or whitespace before field"));
    }
    const HeaderField& f = *added;
    switch (f.token) {
      case HeaderToken::kHost:
        if (host_seen) return fail(400, "multiple Host header fields");
        host_seen = true;
        host_value = f.value;
        break;
      case HeaderToken::kContentLength:
        if (std::string_view why = merge_content_length(f.value, out.content_length); !why.empty()) {
          return fail(400, why);
        }
        break;
      case HeaderToken::kTransferEncoding:
        apply_transfer_encoding(f.value, te);
        break;
      case HeaderToken::kConnection:
        apply_connection(f.value, out.connection_close, out.connection_keep_alive, &out.connection_upgrade);
        break;
      case HeaderToken::kExpect:
        apply_expect(f.value, out);
        break;
      default:
        break;
    }
    p = fl.next;
  }

  // Host (RFC 9112 §3.2, §3.2.2).
  std::string_view hname, hport;
  if (host_seen && !split_host(host_value, hname, hport)) return fail(400, "invalid Host header field");
  if (!host_seen && out.version_minor >= 1) return fail(400, "missing Host header field");
  if (out.target_form != TargetForm::kAbsolute) {
    out.host = host_value;
    out.host_name = hname;
    out.host_port = hport;
  }

  // Message body framing (RFC 9112 §6.1, §6.3).
  if (te.seen) {
    if (out.content_length) return fail(400, "both Content-Length and Transfer-Encoding");
    if (out.version_minor == 0) return fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (te.invalid) return fail(400, "invalid Transfer-Encoding");
    // A coding we do not implement is 501 (RFC 9112 §6.1 SHOULD; nginx: "unknown Transfer-Encoding"), whatever
    // its position: the body length is unknowable either way and the connection is closed.
    if (te.other) return fail(501, "unsupported transfer coding");
    if (te.chunked == 0 || !te.last_is_chunked) return fail(400, "chunked is not the final transfer coding");
    if (te.chunked > 1) return fail(400, "chunked applied more than once");
    out.body = BodyFraming::kChunked;
  } else if (out.content_length) {
    out.body = BodyFraming::kContentLength;
  }
  return ParseResult{ParseStatus::kComplete, 0, p, {}};
}

}  // namespace kosoku::http
