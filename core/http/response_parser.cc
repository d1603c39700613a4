// HTTP/1.1 response-head parser; see response_parser.hh for the contract and the choices made.
#include "core/http/response_parser.hh"

#include <cstring>
#include <optional>

#include "core/http/chars.hh"
#include "core/http/field_line.hh"

namespace kosoku::http {
namespace {

ResponseParseResult fail(std::string_view reason) { return ResponseParseResult{ParseStatus::kError, 0, reason}; }

/// Index one past the LF that ends the head (an LF followed by LF or CRLF) searching from `from`, or 0.
size_t find_head_end(std::string_view buf, size_t from) {
  const char* const begin = buf.data();
  const char* const end = begin + buf.size();
  const char* p = begin + from;
  while (p < end) {
    const char* lf = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    if (lf == nullptr) return 0;
    if (lf + 1 < end && lf[1] == '\n') return static_cast<size_t>(lf + 2 - begin);
    if (lf + 2 < end && lf[1] == '\r' && lf[2] == '\n') return static_cast<size_t>(lf + 3 - begin);
    p = lf + 1;
  }
  return 0;
}

/// One line of a head known to be complete: [start, end) without terminator, next = after the LF.
struct Line {
  size_t end = 0;
  size_t next = 0;
  bool crlf = false;
};

Line line_at(std::string_view head, size_t start) {
  const void* lf = std::memchr(head.data() + start, '\n', head.size() - start);
  // The head ends with an LF, so one is always found.
  const size_t q = static_cast<size_t>(static_cast<const char*>(lf) - head.data());
  Line l;
  l.next = q + 1;
  l.end = q;
  if (q > start && head[q - 1] == '\r') {
    l.end = q - 1;
    l.crlf = true;
  }
  return l;
}

bool parse_status_line(std::string_view line, ParsedResponse& out, std::string_view& reason) {
  // "HTTP/1.1 200 OK": version (8) SP status (3) [SP reason]
  if (line.size() < 12 || line.substr(0, 5) != "HTTP/" || line[5] != '1' || line[6] != '.' ||
      (line[7] != '0' && line[7] != '1') || line[8] != ' ') {
    reason = "invalid status line";
    return false;
  }
  out.version_minor = static_cast<uint8_t>(line[7] - '0');
  uint16_t code = 0;
  for (size_t i = 9; i < 12; ++i) {
    if (!chars::is_digit(line[i])) {
      reason = "invalid status code";
      return false;
    }
    code = static_cast<uint16_t>(code * 10 + (line[i] - '0'));
  }
  if (code < 100 || code > 599) {
    reason = "invalid status code";
    return false;
  }
  out.status = code;
  if (line.size() == 12) return true;
  if (line[12] != ' ') {
    reason = "invalid status line";
    return false;
  }
  std::string_view r = line.substr(13);
  if (chars::find_invalid_field_byte(r.data(), r.size()) != r.size()) {
    reason = "invalid character in reason phrase";
    return false;
  }
  out.reason = r;
  return true;
}

void reset(ParsedResponse& r) {
  r.field_count = 0;
  r.version_minor = 1;
  r.status = 0;
  r.reason = {};
  r.framing = ResponseFraming::kClose;
  r.content_length = 0;
  r.has_content_length = false;
  r.connection_close = false;
  r.connection_keep_alive = false;
  r.first_field.fill(Request::kNoField);
}

}  // namespace

ResponseParseResult parse_response_head(std::string_view buf, ParsedResponse& out, const ResponseLimits& lim,
                                        bool request_was_head, size_t last_len) {
  const size_t from = (last_len > 0 && last_len <= buf.size()) ? (last_len >= 3 ? last_len - 3 : 0) : 0;
  const size_t head_len = find_head_end(buf, from);
  if (head_len == 0) {
    if (buf.size() > lim.max_head) return fail("upstream sent too big header");
    // An obviously wrong first byte fails at once instead of waiting for a head that never ends.
    if (!buf.empty() && buf[0] != 'H') return fail("invalid status line");
    return ResponseParseResult{};
  }
  if (head_len > lim.max_head) return fail("upstream sent too big header");
  reset(out);
  const std::string_view head = buf.substr(0, head_len);
  std::string_view reason;

  const Line sl = line_at(head, 0);
  if (!sl.crlf && !lim.allow_bare_lf) return fail("bare LF");
  if (!parse_status_line(head.substr(0, sl.end), out, reason)) return fail(reason);
  size_t p = sl.next;

  const size_t max_fields = lim.max_fields < kMaxFieldLines ? lim.max_fields : kMaxFieldLines;
  TransferCodings te;
  std::optional<uint64_t> content_length;
  for (;;) {
    const Line fl = line_at(head, p);
    if (!fl.crlf && !lim.allow_bare_lf) return fail("bare LF");
    if (fl.end == p) {
      p = fl.next;
      break;
    }
    if (out.field_count >= max_fields) return fail("too many header fields in upstream response");
    const std::string_view line = head.substr(p, fl.end - p);
    const HeaderField* added = nullptr;  // set once fe is kNone
    const FieldLineError fe = append_head_field_line(line, out, max_fields, &added);
    if (fe != FieldLineError::kNone) {
      return fail(field_line_reason(fe, "obsolete line folding in upstream response"));
    }
    const HeaderField& f = *added;
    switch (f.token) {
      case HeaderToken::kContentLength:
        if (std::string_view why = merge_content_length(f.value, content_length); !why.empty()) return fail(why);
        break;
      case HeaderToken::kTransferEncoding:
        apply_transfer_encoding(f.value, te);
        break;
      case HeaderToken::kConnection:
        apply_connection(f.value, out.connection_close, out.connection_keep_alive, nullptr);
        break;
      default:
        break;
    }
    p = fl.next;
  }
  out.has_content_length = content_length.has_value();
  out.content_length = content_length.value_or(0);

  if (te.seen) {
    if (out.has_content_length) return fail("upstream sent both Content-Length and Transfer-Encoding");
    if (out.version_minor == 0) return fail("Transfer-Encoding in an HTTP/1.0 response");
    if (te.invalid) return fail("invalid Transfer-Encoding");
    if (te.chunked == 0 || !te.last_is_chunked) return fail("upstream sent unknown Transfer-Encoding");
    if (te.chunked > 1) return fail("chunked applied more than once");
  }
  if (request_was_head || out.status < 200 || out.status == 204 || out.status == 304) {
    out.framing = ResponseFraming::kNone;
  } else if (te.seen) {
    out.framing = ResponseFraming::kChunked;
  } else if (out.has_content_length) {
    out.framing = ResponseFraming::kContentLength;
  } else {
    out.framing = ResponseFraming::kClose;
  }
  return ResponseParseResult{ParseStatus::kComplete, p, {}};
}

}  // namespace kosoku::http
