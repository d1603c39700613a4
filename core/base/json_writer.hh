// Writing JSON text (the admin APIs' answers): a string value with its quotes and escapes.
#pragma once

#include <string>
#include <string_view>

namespace kosoku::base {

/// Appends `s` as a JSON string (RFC 8259 §7, quotes included): `"` `\` and control bytes escaped (the short
/// forms where JSON has one, else \u00XX; DEL as \u007f); other bytes as they are (callers pass UTF-8 or ASCII).
inline void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out.append("\\\""); break;
      case '\\': out.append("\\\\"); break;
      case '\n': out.append("\\n"); break;
      case '\r': out.append("\\r"); break;
      case '\t': out.append("\\t"); break;
      case '\b': out.append("\\b"); break;
      case '\f': out.append("\\f"); break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out.append("\\u00");
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 0xf]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

}  // namespace kosoku::base
