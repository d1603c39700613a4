// Field lines shared by the request and response parsers; see field_line.hh.
#include "core/http/field_line.hh"

#include <limits>
#include <span>
#include <vector>

#include "core/http/chars.hh"

namespace kosoku::http {

std::string_view field_line_reason(FieldLineError e, std::string_view leading_whitespace) {
  switch (e) {
    case FieldLineError::kNone: break;
    case FieldLineError::kLeadingWhitespace: return leading_whitespace;
    case FieldLineError::kInvalidName: return "invalid header field name";
    case FieldLineError::kInvalidValue: return "invalid character in header field value";
  }
  return {};
}

FieldLineError append_spilled_field_line(std::string_view line, FieldLines& out, size_t max) {
  std::vector<HeaderField>& spill = out.spilled_fields;
  if (out.field_count == out.fields.size()) spill.assign(out.fields.begin(), out.fields.end());  // the first one
  if (out.field_count == spill.size()) {
    size_t n = out.field_count * 2;
    if (n < 64) n = 64;
    if (n > max) n = max;
    spill.resize(n);
  }
  return append_field_line(line, spill, out.field_count, out.first_field);
}

std::string_view merge_content_length(std::string_view value, std::optional<uint64_t>& length) {
  std::string_view rest = value;
  bool any = false;
  while (!rest.empty()) {
    const std::string_view m = chars::next_list_element(rest);
    if (m.empty()) continue;
    uint64_t v = 0;
    for (char c : m) {
      if (!chars::is_digit(c)) return "invalid Content-Length";
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) - d) / 10) {
        return "Content-Length too large";
      }
      v = v * 10 + d;
    }
    if (length && *length != v) return "conflicting Content-Length values";
    length = v;
    any = true;
  }
  return any ? std::string_view() : std::string_view("empty Content-Length");
}

void apply_transfer_encoding(std::string_view value, TransferCodings& te) {
  te.seen = true;
  std::string_view rest = value;
  while (!rest.empty()) {
    const std::string_view m = chars::next_list_element(rest);
    if (m.empty()) continue;
    size_t i = 0;
    while (i < m.size() && chars::is_tchar(m[i])) ++i;
    const std::string_view name = m.substr(0, i);
    const std::string_view params = chars::trim_ows(m.substr(i));
    if (name.empty() || (!params.empty() && params[0] != ';')) {
      te.invalid = true;
      continue;
    }
    if (chars::iequals_lower(name, "chunked")) {
      if (!params.empty()) te.invalid = true;  // chunked takes no parameters
      ++te.chunked;
      te.last_is_chunked = true;
    } else {
      te.other = true;
      te.last_is_chunked = false;
    }
  }
}

void apply_connection(std::string_view value, bool& close, bool& keep_alive, bool* upgrade) {
  std::string_view rest = value;
  while (!rest.empty()) {
    const std::string_view m = chars::next_list_element(rest);
    if (chars::iequals_lower(m, "close")) {
      close = true;
    } else if (chars::iequals_lower(m, "keep-alive")) {
      keep_alive = true;
    } else if (upgrade != nullptr && chars::iequals_lower(m, "upgrade")) {
      *upgrade = true;
    }
  }
}

}  // namespace kosoku::http
