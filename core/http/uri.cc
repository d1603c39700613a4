// Path normalisation and escaping; see uri.hh.
#include "core/http/uri.hh"

#include "core/http/chars.hh"

namespace kosoku::http {
namespace {

NormalizeResult reject(std::string_view reason) { return NormalizeResult{400, 0, reason}; }

}  // namespace

NormalizeResult normalize_path(std::string_view raw, std::span<char> out, const NormalizeOptions& opts) {
  if (raw.empty() || raw[0] != '/') return reject("path does not start with '/'");
  if (out.size() < raw.size()) return reject("output buffer too small");
  char* const o = out.data();
  size_t len = 1;        // bytes written; o[0] is the root '/'
  size_t seg_start = 1;  // where the current segment begins in o
  o[0] = '/';

  // Ends the segment o[seg_start, len): drops "." and "..", keeps others. `more` is true if a '/' follows
  // (the segment is not the last one).
  auto end_segment = [&](bool more) -> bool {
    const size_t seg_len = len - seg_start;
    if (seg_len == 1 && o[seg_start] == '.') {
      len = seg_start;
      return true;
    }
    if (seg_len == 2 && o[seg_start] == '.' && o[seg_start + 1] == '.') {
      if (seg_start == 1) return false;  // would climb above the root
      // o[seg_start - 1] is the '/' before ".."; drop it and the previous segment, keep that one's '/'.
      size_t k = seg_start - 1;
      while (k > 0 && o[k - 1] != '/') --k;
      len = k;
      seg_start = k;
      return true;
    }
    if (seg_len == 0) {
      if (more && !opts.merge_slashes) {
        o[len++] = '/';
        seg_start = len;
      }
      return true;
    }
    if (more) {
      o[len++] = '/';
      seg_start = len;
    }
    return true;
  };

  for (size_t i = 1; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '%') {
      if (raw.size() - i < 3) return reject("truncated percent-encoding");
      const int hi = chars::hex_value(raw[i + 1]);
      const int lo = chars::hex_value(raw[i + 2]);
      if (hi < 0 || lo < 0) return reject("invalid percent-encoding");
      c = static_cast<char>(hi * 16 + lo);
      if (c == '\0') return reject("encoded NUL in path");
      i += 2;
    } else if (c == '\0') {
      return reject("NUL in path");
    }
    if (c == '/') {
      if (!end_segment(true)) return reject("path climbs above the root");
    } else {
      o[len++] = c;
    }
  }
  if (!end_segment(false)) return reject("path climbs above the root");
  return NormalizeResult{0, len, {}};
}

NormalizeResult normalize_path(std::string_view raw, std::string& out, const NormalizeOptions& opts) {
  out.resize(raw.size() > 0 ? raw.size() : 1);
  NormalizeResult r = normalize_path(raw, std::span<char>(out.data(), out.size()), opts);
  out.resize(r.ok() ? r.length : 0);
  return r;
}

TargetParts split_target(std::string_view target) {
  TargetParts t;
  const size_t q = target.find('?');
  if (q == std::string_view::npos) {
    t.path = target;
    return t;
  }
  t.path = target.substr(0, q);
  t.query = target.substr(q + 1);
  t.has_query = true;
  return t;
}

void escape_path(std::string_view path, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  static constexpr std::string_view kUnsafe = " \"#%?<>\\^`{|}";
  out.reserve(out.size() + path.size());
  for (char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || kUnsafe.find(c) != std::string_view::npos) {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    } else {
      out.push_back(c);
    }
  }
}

void append_uri_field(std::string_view uri, std::string& out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (char c : uri) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      const char e[3] = {'%', kHex[u >> 4], kHex[u & 15]};
      out.append(e, 3);
    } else {
      out.push_back(c);
    }
  }
}

}  // namespace kosoku::http
