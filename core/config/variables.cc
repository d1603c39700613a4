#include "core/config/variables.hh"

#include <deque>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/config/lexer.hh"
#include "core/config/module.hh"
#include "core/http/exchange.hh"

namespace kosoku::config {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Names declared while loading (declare_variable): written only while loading, read-only afterwards. Deques:
// segments point at the Variable objects, which point at the names.
struct Declared {
  std::deque<std::string> names;
  std::deque<Variable> vars;
};
Declared& declared() {
  static Declared d;
  return d;
}

// The registered variable a lower-cased name denotes, or null: a module's exact name first, then a declared
// name, then the longest matching prefix ("$http_" alone is unknown). Sets *suffix for prefix and declared
// variables.
const Variable* lookup(std::string_view name, std::string_view* suffix) {
  *suffix = {};
  for (const Module* m : modules()) {
    for (const Variable& v : m->variables) {
      if (!v.prefix && v.name == name) return &v;
    }
  }
  for (const Variable& v : declared().vars) {
    if (v.name == name) {
      *suffix = v.name;
      return &v;
    }
  }
  const Variable* best = nullptr;
  for (const Module* m : modules()) {
    for (const Variable& v : m->variables) {
      if (v.prefix && name.size() > v.name.size() && name.substr(0, v.name.size()) == v.name &&
          (best == nullptr || v.name.size() > best->name.size())) {
        best = &v;
      }
    }
  }
  if (best != nullptr) *suffix = name.substr(best->name.size());
  return best;
}

constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kHexLower[] = "0123456789abcdef";

// kUri: the bytes a URI in a header cannot carry as they are.
bool uri_escapes(unsigned char c) { return c <= 0x20 || c >= 0x7f; }

// kField: the bytes a field value cannot carry (RFC 9110 §5.5: field-vchar, SP, HTAB).
bool field_replaces(unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; }

// Extra bytes the escaped form of `c` needs beyond 1 (kDefault, kJson, kUri; kField never grows).
size_t escape_extra(LogEscape e, unsigned char c) {
  if (e == LogEscape::kDefault) return base::log_escapes(c) ? 3 : 0;  // \xHH
  if (e == LogEscape::kUri) return uri_escapes(c) ? 2 : 0;             // %HH
  // kJson
  if (c == '"' || c == '\\') return 1;
  if (c >= 0x20) return 0;
  switch (c) {
    case '\n':
    case '\r':
    case '\t':
    case '\b':
    case '\f':
      return 1;
    default:
      return 5;  // \u00hh
  }
}

// Writes the escaped form of `c` ending just before `*w` (moving *w back).
void write_escaped_backward(LogEscape e, unsigned char c, char* base, size_t* w) {
  auto put = [&](char ch) { base[--*w] = ch; };
  if (escape_extra(e, c) == 0) {
    put(static_cast<char>(c));
    return;
  }
  if (e == LogEscape::kDefault || e == LogEscape::kUri) {
    put(kHexUpper[c & 0xf]);
    put(kHexUpper[c >> 4]);
    if (e == LogEscape::kUri) {
      put('%');
    } else {
      put('x');
      put('\\');
    }
    return;
  }
  switch (c) {
    case '"':
    case '\\':
      put(static_cast<char>(c));
      break;
    case '\n':
      put('n');
      break;
    case '\r':
      put('r');
      break;
    case '\t':
      put('t');
      break;
    case '\b':
      put('b');
      break;
    case '\f':
      put('f');
      break;
    default:
      put(kHexLower[c & 0xf]);
      put(kHexLower[c >> 4]);
      put('0');
      put('0');
      put('u');
      break;
  }
  put('\\');
}

// Escapes out[start, end) in place (the region grows; processed from the back so no copy is needed).
void escape_in_place(LogEscape e, std::string& out, size_t start) {
  if (e == LogEscape::kField) {
    for (size_t i = start; i < out.size(); ++i) {
      if (field_replaces(static_cast<unsigned char>(out[i]))) out[i] = ' ';
    }
    return;
  }
  size_t end = out.size();
  size_t extra = 0;
  for (size_t i = start; i < end; ++i) extra += escape_extra(e, static_cast<unsigned char>(out[i]));
  if (extra == 0) return;
  out.resize(end + extra);
  size_t w = end + extra;
  for (size_t i = end; i-- > start;) write_escaped_backward(e, static_cast<unsigned char>(out[i]), out.data(), &w);
}

}  // namespace

bool Template::has_variables() const {
  for (const TemplateSegment& s : segments) {
    if (s.is_variable) return true;
  }
  return false;
}

bool Template::uses(std::string_view name) const {
  for (const TemplateSegment& s : segments) {
    if (s.is_variable && s.var->name == name) return true;
  }
  return false;
}

Template compile(std::string_view s, const SourceLoc& loc, std::string* error) {
  Template t;
  t.loc = loc;
  auto fail = [&](std::string msg) {
    if (error) *error = format_diag(loc, msg);
    return Template{{}, LogEscape::kNone, loc};
  };
  std::string literal;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c != '$') {
      literal.push_back(c);
      ++i;
      continue;
    }
    ++i;
    std::string_view name;
    if (i < s.size() && s[i] == '{') {
      size_t close = s.find('}', i + 1);
      size_t stop = i + 1;
      while (stop < s.size() && is_name_char(s[stop])) ++stop;
      if (close == std::string_view::npos || close != stop) {
        if (close == std::string_view::npos) {
          return fail(absl::StrCat("the closing bracket in \"", std::string(s.substr(i + 1, stop - i - 1)),
                                   "\" variable is missing"));
        }
        return fail(absl::StrCat("invalid variable name in \"", std::string(s), "\""));
      }
      name = s.substr(i + 1, close - i - 1);
      i = close + 1;
    } else {
      size_t stop = i;
      while (stop < s.size() && is_name_char(s[stop])) ++stop;
      name = s.substr(i, stop - i);
      i = stop;
    }
    if (name.empty()) return fail(absl::StrCat("invalid variable name in \"", std::string(s), "\""));
    std::string lower = absl::AsciiStrToLower(std::string(name));
    std::string_view suffix;
    const Variable* var = lookup(lower, &suffix);
    if (var == nullptr) return fail(absl::StrCat("unknown \"", lower, "\" variable"));
    if (!literal.empty()) {
      t.segments.push_back(TemplateSegment{false, nullptr, std::move(literal)});
      literal.clear();
    }
    t.segments.push_back(TemplateSegment{true, var, std::string(suffix)});
  }
  if (!literal.empty()) t.segments.push_back(TemplateSegment{false, nullptr, std::move(literal)});
  return t;
}

void expand_segment(const Template& t, size_t i, const VariableSource& vars, std::string& out) {
  const TemplateSegment& seg = t.segments[i];
  if (!seg.is_variable) {
    out.append(seg.text);
    return;
  }
  size_t start = out.size();
  bool found = vars.get(*seg.var, seg.text, out);
  if (!found) {
    out.resize(start);  // a source that appended before failing must not leak bytes
    if (t.escape == LogEscape::kDefault) out.push_back('-');
    return;
  }
  if (t.escape != LogEscape::kNone) escape_in_place(t.escape, out, start);
}

void expand(const Template& t, const VariableSource& vars, std::string& out) {
  for (size_t i = 0; i < t.segments.size(); ++i) expand_segment(t, i, vars, out);
}

bool declare_variable(std::string_view name, bool (*get)(const VariableSource&, std::string_view, std::string&)) {
  std::string_view suffix;
  if (name.empty() || lookup(name, &suffix) != nullptr) return false;
  Declared& d = declared();
  d.names.emplace_back(name);
  d.vars.push_back(Variable{.name = d.names.back(), .get = get});
  return true;
}

namespace {

bool capture_variable(const VariableSource& src, std::string_view name, std::string& out) {
  std::string_view v;
  if (!src.exchange().regex_capture(name, &v)) return false;
  out.append(v);
  return true;
}

}  // namespace

void declare_capture_variable(std::string_view name) {
  declare_variable(absl::AsciiStrToLower(name), &capture_variable);  // false: already known, kept as it is
}

bool http_var_name_matches(std::string_view header_name, std::string_view suffix) {
  if (header_name.size() != suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i) {
    char h = absl::ascii_tolower(static_cast<unsigned char>(header_name[i]));
    if (h == '-') h = '_';
    char s = suffix[i];
    if (s == '-') s = '_';
    if (h != s) return false;
  }
  return true;
}

}  // namespace kosoku::config
