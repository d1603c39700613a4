// A small reader of JSON text (RFC 8259) for the admin APIs' request bodies and the files kosoku writes itself:
// strings with every escape (\uXXXX surrogate pairs decoded to UTF-8), numbers checked and skipped, any value
// skipped (nesting bounded by kJsonMaxDepth), arrays of strings, booleans. The caller walks its object member by
// member; every method reports the first error in error_ as "invalid JSON at byte N: what".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kosoku::base {

/// How deeply skip() follows nested values.
inline constexpr int kJsonMaxDepth = 64;

class JsonReader {
 public:
  explicit JsonReader(std::string_view s) : s_(s) {}

  bool fail(std::string_view what) {
    if (error_.empty()) error_ = absl::StrCat("invalid JSON at byte ", pos_, ": ", what);
    return false;
  }
  void ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool at_end() {
    ws();
    return pos_ == s_.size();
  }
  char peek() {
    ws();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  bool hex4(uint32_t* v) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      uint32_t d;
      if (c >= '0' && c <= '9') {
        d = static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        d = static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        d = static_cast<uint32_t>(c - 'A' + 10);
      } else {
        return fail("bad hex digit in \\u escape");
      }
      *v = *v << 4 | d;
    }
    return true;
  }
  // A string; `out` may be null (skip).
  bool string(std::string* out) {
    if (!eat('"')) return fail("expected a string");
    for (;;) {
      if (pos_ >= s_.size()) return fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return fail("control character in string");
      if (c != '\\') {
        if (out) out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return fail("unterminated string");
      char e = s_[pos_++];
      char plain = 0;
      switch (e) {
        case '"': plain = '"'; break;
        case '\\': plain = '\\'; break;
        case '/': plain = '/'; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!hex4(&cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (pos_ + 2 > s_.size() || s_[pos_] != '\\' || s_[pos_ + 1] != 'u') return fail("lone surrogate");
            pos_ += 2;
            if (!hex4(&lo)) return false;
            if (lo < 0xDC00 || lo > 0xDFFF) return fail("bad surrogate pair");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail("lone surrogate");
          }
          if (out) put_utf8(*out, cp);
          continue;
        }
        default:
          return fail("bad escape");
      }
      if (out) out->push_back(plain);
    }
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return fail("unexpected token");
    pos_ += word.size();
    return true;
  }
  bool number() {
    size_t start = pos_;
    if (pos_ < s_.size() && s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t b = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > b;
    };
    if (!digits()) return fail("bad number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) return fail("bad number");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) return fail("bad number");
    }
    return pos_ > start;
  }
  // Any value, discarded.
  bool skip(int depth) {
    if (depth > kJsonMaxDepth) return fail("nested too deeply");
    char c = peek();
    if (c == '"') return string(nullptr);
    if (c == '{') {
      ++pos_;
      if (eat('}')) return true;
      do {
        if (!string(nullptr) || !expect(':') || !skip(depth + 1)) return false;
      } while (eat(','));
      return expect('}');
    }
    if (c == '[') {
      ++pos_;
      if (eat(']')) return true;
      do {
        if (!skip(depth + 1)) return false;
      } while (eat(','));
      return expect(']');
    }
    if (c == 't') return literal("true");
    if (c == 'f') return literal("false");
    if (c == 'n') return literal("null");
    return number();
  }
  bool expect(char c) {
    if (eat(c)) return true;
    return fail(absl::StrCat("expected '", std::string(1, c), "'"));
  }
  /// An array of strings; `member` names it in the error ("\"patterns\" must be an array of strings").
  bool string_array(std::string_view member, std::vector<std::string>* out) {
    if (!expect('[')) return false;
    if (eat(']')) return true;
    do {
      std::string v;
      if (peek() != '"') return fail(absl::StrCat("\"", member, "\" must be an array of strings"));
      if (!string(&v)) return false;
      out->push_back(std::move(v));
    } while (eat(','));
    return expect(']');
  }

  /// true or false.
  bool boolean(bool* out) {
    const char c = peek();
    if (c == 't' && literal("true")) {
      *out = true;
      return true;
    }
    if (c == 'f' && literal("false")) {
      *out = false;
      return true;
    }
    return fail("expected true or false");
  }

  /// One whole JSON text that is an object: calls `member(key)` at each member's value, which must read (or
  /// skip()) that value; nothing may follow the object but whitespace.
  template <typename F>
  bool object(F&& member) {
    if (!expect('{')) return false;
    if (!eat('}')) {
      do {
        std::string key;
        if (!string(&key) || !expect(':') || !member(key)) return false;
      } while (eat(','));
      if (!expect('}')) return false;
    }
    if (!at_end()) return fail("trailing data after the object");
    return true;
  }

  /// The first error ("invalid JSON at byte N: what"), or "".
  std::string error_;

 private:
  std::string_view s_;
  size_t pos_ = 0;
};


}  // namespace kosoku::base
