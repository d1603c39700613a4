#include "core/rules/json.hh"

#include "absl/strings/str_cat.h"
#include "core/rules/shard.hh"

namespace kosoku::rules {

namespace {

constexpr int kMaxDepth = 64;

class Reader {
 public:
  explicit Reader(std::string_view s) : s_(s) {}

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
    if (depth > kMaxDepth) return fail("nested too deeply");
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
  bool string_array(std::vector<std::string>* out) {
    if (!expect('[')) return false;
    if (eat(']')) return true;
    do {
      std::string v;
      if (peek() != '"') return fail("\"patterns\" must be an array of strings");
      if (!string(&v)) return false;
      out->push_back(std::move(v));
    } while (eat(','));
    return expect(']');
  }

  std::string error_;

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

bool parse_rules_doc(std::string_view text, RulesDoc* out, std::string* error) {
  Reader r(text);
  *out = RulesDoc{};
  auto done = [&](bool ok) {
    if (!ok) *error = r.error_;
    return ok;
  };
  if (!r.expect('{')) return done(false);
  if (!r.eat('}')) {
    do {
      std::string key;
      if (!r.string(&key) || !r.expect(':')) return done(false);
      if (key == "host") {
        std::string v;
        if (r.peek() != '"') return done(r.fail("\"host\" must be a string"));
        if (!r.string(&v)) return done(false);
        out->host = std::move(v);
      } else if (key == "patterns") {
        std::vector<std::string> v;
        if (!r.string_array(&v)) return done(false);
        out->patterns = std::move(v);
      } else if (!r.skip(0)) {
        return done(false);
      }
    } while (r.eat(','));
    if (!r.expect('}')) return done(false);
  }
  if (!r.at_end()) return done(r.fail("trailing data after the object"));
  return true;
}

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
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

void append_host_json(std::string& out, const HostRules& r) {
  out.append("{\"host\":");
  append_json_string(out, r.host);
  out.append(",\"patterns\":[");
  bool first = true;
  r.for_each([&](std::string_view p) {
    if (!first) out.push_back(',');
    first = false;
    append_json_string(out, p);
  });
  out.append("]}");
}

void append_host_json(std::string& out, std::string_view host, std::span<const std::string> patterns) {
  out.append("{\"host\":");
  append_json_string(out, host);
  out.append(",\"patterns\":[");
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (i > 0) out.push_back(',');
    append_json_string(out, patterns[i]);
  }
  out.append("]}");
}

}  // namespace kosoku::rules
