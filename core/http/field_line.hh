// Field lines, shared by the request parser (parser.cc) and the response parser (response_parser.cc): one
// field line split into name and value (RFC 9112 §5, RFC 9110 §5.5), and the fields both parsers interpret
// the same way — Content-Length (RFC 9110 §8.6) and Transfer-Encoding (RFC 9112 §6.1), which decide the
// framing, and Connection (RFC 9110 §7.6.1). Pure functions over spans of the caller's buffer: no I/O, no
// allocation, no exceptions. What each parser does with the results (status codes, wording for an upstream,
// which codings it accepts) stays in the parser.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/http/chars.hh"
#include "core/http/parser.hh"
#include "core/http/tokens.hh"

namespace kosoku::http {

enum class FieldLineError : uint8_t {
  kNone,
  kLeadingWhitespace,  // obs-fold (RFC 9112 §5.2) or whitespace before the field name
  kInvalidName,        // not a token directly followed by ':' (no whitespace before the colon, RFC 9112 §5.1)
  kInvalidValue,       // NUL, CR, LF, another CTL than HTAB, or DEL in the value (RFC 9110 §5.5)
};

/// The log reason for a field-line error: "invalid header field name", "invalid character in header field
/// value", or `leading_whitespace` for kLeadingWhitespace (each parser words obs-fold for its peer); "" for kNone.
std::string_view field_line_reason(FieldLineError e, std::string_view leading_whitespace);

/// Splits the field line `line` (without its line terminator; not empty) into fields[count] — name as
/// received, value with leading and trailing OWS removed (spans into `line`), token — and counts it (the
/// caller checked count < fields.size()); a field whose token has no earlier line gets its index in
/// first_field (Request::kNoField = none yet). On an error neither fields[count] nor count is touched.
/// Inline: it runs for every field line of every request and response head.
inline FieldLineError append_field_line(std::string_view line, std::span<HeaderField> fields, size_t& count,
                                        std::array<uint16_t, kHeaderTokenCount>& first_field) {
  if (chars::is_ows(line[0])) return FieldLineError::kLeadingWhitespace;
  size_t i = 0;
  while (i < line.size() && chars::is_tchar(line[i])) ++i;
  if (i == 0 || i == line.size() || line[i] != ':') return FieldLineError::kInvalidName;
  size_t b = i + 1;
  size_t e = line.size();
  if (chars::find_invalid_field_byte(line.data() + b, e - b) != e - b) return FieldLineError::kInvalidValue;
  while (b < e && chars::is_ows(line[b])) ++b;
  while (e > b && chars::is_ows(line[e - 1])) --e;
  HeaderField& f = fields[count];
  f.name = line.substr(0, i);
  f.value = line.substr(b, e - b);
  f.token = lookup_header_token(f.name);
  const size_t tok = static_cast<size_t>(f.token);
  if (f.token != HeaderToken::kUnknown && first_field[tok] == Request::kNoField) {
    first_field[tok] = static_cast<uint16_t>(count);
  }
  ++count;
  return FieldLineError::kNone;
}

/// append_field_line for a head whose lines fill the caller's array (out.field_count >= out.fields.size()):
/// the first time copies them into out.spilled_fields, grows that as needed (doubling, never past `max`
/// lines) and appends there. The caller checked out.field_count < max. Out of line: only heads with more lines
/// than the caller's array take it (see "Field storage" in parser.hh).
FieldLineError append_spilled_field_line(std::string_view line, FieldLines& out, size_t max);

/// Appends `line` as the next field line of a head (request or response): into the caller's array while it has
/// room, else into the heap storage. *added is the stored field when the result is kNone. The caller checked
/// out.field_count < max.
inline FieldLineError append_head_field_line(std::string_view line, FieldLines& out, size_t max,
                                             const HeaderField** added) {
  const size_t at = out.field_count;  // the slot this line goes to
  if (at < out.fields.size()) [[likely]] {
    const FieldLineError fe = append_field_line(line, out.fields, out.field_count, out.first_field);
    if (fe == FieldLineError::kNone) *added = &out.fields[at];
    return fe;
  }
  const FieldLineError fe = append_spilled_field_line(line, out, max);  // the lines outgrew the caller's array
  if (fe == FieldLineError::kNone) *added = &out.spilled_fields[at];
  return fe;
}

/// Merges one Content-Length field value — a list of 1*DIGIT members, all equal (RFC 9110 §8.6) — into
/// `length` (set by earlier lines, or empty). Returns "" on success, else the reason: "invalid Content-Length",
/// "Content-Length too large" (> 2^63-1), "conflicting Content-Length values", "empty Content-Length".
/// Members before the one that fails are already merged.
std::string_view merge_content_length(std::string_view value, std::optional<uint64_t>& length);

/// What the Transfer-Encoding lines of one message said (RFC 9112 §6.1), accumulated over every line.
struct TransferCodings {
  bool seen = false;             // a Transfer-Encoding line was present
  bool last_is_chunked = false;  // the final coding is chunked
  int chunked = 0;               // how often chunked appears
  bool other = false;            // a coding other than chunked
  bool invalid = false;          // a member that is not token *( OWS ";" ... ), or chunked with parameters
};

/// Adds one Transfer-Encoding field value (a list of transfer-coding members) to `te`.
void apply_transfer_encoding(std::string_view value, TransferCodings& te);

/// Adds one Connection field value (a list of connection options, RFC 9110 §7.6.1) to the flags: "close",
/// "keep-alive" and, when `upgrade` is not null, "upgrade" (case-insensitive); other options are ignored.
void apply_connection(std::string_view value, bool& close, bool& keep_alive, bool* upgrade);

}  // namespace kosoku::http
