#include "core/cache/purge_key.hh"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cache/purge.hh"

namespace kosoku::cache {

namespace {

using config::Template;
using config::TemplateSegment;

constexpr size_t kNone = std::string::npos;

enum class Seg {
  kFixed,       // literal text, or a variable the configuration or the connection fixes
  kFixedHost,   // a host segment fixed by the configuration: $server_name, $proxy_host
  kClientHost,  // the request's host: $host, $http_host
  kClient,      // anything else the client chooses ($request_uri, $arg_NAME, $http_NAME, $cookie_NAME, ...)
};

Seg classify(const TemplateSegment& s) {
  if (!s.is_variable) return Seg::kFixed;
  std::string_view name = s.var->name;  // for a prefix variable, its prefix
  if (name == "server_name" || name == "proxy_host") return Seg::kFixedHost;
  if (name == "host") return Seg::kClientHost;
  if (name == "http_") return s.text == "host" ? Seg::kClientHost : Seg::kClient;
  if (name == "scheme" || name == "server_port" || name == "proxy_port" || name == "hostname") return Seg::kFixed;
  return Seg::kClient;
}

bool is_client(Seg c) { return c == Seg::kClient || c == Seg::kClientHost; }

struct Shape {
  size_t host = kNone;  // index of the host segment (header comment), or kNone
  bool client = false;  // some segment is client data (the host segments $host / $http_host included)
};

Shape shape_of(const Template& t) {
  Shape sh;
  bool fixed_so_far = true;
  for (size_t i = 0; i < t.segments.size(); ++i) {
    const Seg c = classify(t.segments[i]);
    if (sh.host == kNone && fixed_so_far && (c == Seg::kFixedHost || c == Seg::kClientHost)) sh.host = i;
    if (is_client(c)) {
      sh.client = true;
      fixed_so_far = false;
    }
  }
  return sh;
}

}  // namespace

bool host_byte(char c) {
  const unsigned char u = static_cast<unsigned char>(c);
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~' || c == '%' || c == ':' || c == '[' || c == ']' || u >= 0x80;
}

bool target_matches(const PurgeTarget& t, std::string_view key) {
  switch (t.kind) {
    case PurgeTarget::Kind::kExact:
      return key == t.key;
    case PurgeTarget::Kind::kAll:
      return true;
    case PurgeTarget::Kind::kGlob:
      return purge_match(t.key, key);
    case PurgeTarget::Kind::kTags:
      if (t.key.empty()) return true;
      [[fallthrough]];
    case PurgeTarget::Kind::kPrefix:
      if (key.substr(0, t.key.size()) != t.key) return false;
      return t.host_end == kNone || t.key.size() > t.host_end || key.size() == t.host_end ||
             !host_byte(key[t.host_end]);
  }
  return false;
}

PurgeKey build_purge_key(const Template& t, const config::VariableSource& vars, const PurgeKeyRules& rules) {
  PurgeKey out;
  std::string& key = out.target.key;
  std::vector<size_t> ends(t.segments.size());
  size_t last_nonempty = kNone;  // the segment that produced the key's last byte
  for (size_t i = 0; i < t.segments.size(); ++i) {
    const size_t before = key.size();
    config::expand_segment(t, i, vars, key);
    ends[i] = key.size();
    if (key.size() > before) last_nonempty = i;
  }
  const Shape sh = shape_of(t);
  size_t host_end = kNone;
  if (sh.host != kNone) {
    const size_t begin = sh.host == 0 ? 0 : ends[sh.host - 1];
    if (ends[sh.host] > begin) host_end = ends[sh.host];  // an empty host bounds nothing
  }
  const bool bounded = !rules.any_host && sh.client;
  const bool star = !key.empty() && key.back() == '*';
  const bool configured_star = star && !rules.method_form && !t.segments[last_nonempty].is_variable;
  if (!(star && (rules.wildcard || configured_star))) {
    // Exact. The method form's own key is always allowed (header comment).
    out.target.kind = PurgeTarget::Kind::kExact;
    if (rules.method_form || !bounded) return out;
    if (host_end == kNone) {
      out.refusal = "the key has no host of the request before the client's part";
    } else if (key.size() > host_end && host_byte(key[host_end])) {
      out.refusal = "the key continues the request's host (it would name another host's key)";
    }
    return out;
  }
  key.pop_back();
  out.target.kind = key.empty() && !bounded ? PurgeTarget::Kind::kAll : PurgeTarget::Kind::kPrefix;
  if (!bounded) return out;
  if (host_end == kNone) {
    out.refusal = "the wildcard has no host of the request to stay within";
  } else if (key.size() < host_end) {
    out.refusal = "the wildcard is inside the request's host";
  } else if (key.size() > host_end && host_byte(key[host_end])) {
    out.refusal = "the key continues the request's host (it would name other hosts' keys)";
  } else {
    out.target.host_end = host_end;
  }
  return out;
}

PurgeKey build_tag_scope(const Template& t, const config::VariableSource& vars, const PurgeKeyRules& rules) {
  PurgeKey out;
  out.target.kind = PurgeTarget::Kind::kTags;
  const Shape sh = shape_of(t);
  if (rules.any_host || !sh.client) return out;
  if (sh.host == kNone) {
    out.refusal = "the key has no host of the request to bound the tags by";
    return out;
  }
  std::string& key = out.target.key;
  for (size_t i = 0; i < sh.host; ++i) config::expand_segment(t, i, vars, key);
  const size_t begin = key.size();
  config::expand_segment(t, sh.host, vars, key);
  if (key.size() == begin) {
    out.refusal = "the request's host is empty";
    return out;
  }
  out.target.host_end = key.size();
  return out;
}

std::vector<std::string> host_prefixes(const Template& t, const config::VariableSource& vars, std::string_view host,
                                       std::string* refusal) {
  const Shape sh = shape_of(t);
  if (sh.host == kNone) {
    *refusal = "the cache key has no host variable ($host, $http_host, $server_name, $proxy_host) to purge by";
    return {};
  }
  std::vector<std::string> out(1);
  for (size_t i = 0; i < sh.host; ++i) {
    const TemplateSegment& s = t.segments[i];
    if (s.is_variable && s.var->name == "scheme") {
      std::vector<std::string> both;
      for (const std::string& p : out) {
        both.push_back(p + "http");
        both.push_back(p + "https");
      }
      out = std::move(both);
      continue;
    }
    std::string piece;
    config::expand_segment(t, i, vars, piece);
    for (std::string& p : out) p += piece;
  }
  for (std::string& p : out) p += host;
  return out;
}

std::string check_purge_template(const Template& t) {
  const Shape sh = shape_of(t);
  if (!sh.client) return {};
  if (sh.host == kNone) {
    return "takes client data before any host variable ($host, $http_host, $server_name, $proxy_host), so a "
           "request could name another host's keys";
  }
  if (sh.host + 1 < t.segments.size()) {
    const TemplateSegment& after = t.segments[sh.host + 1];
    if (!after.is_variable && !after.text.empty() && host_byte(after.text[0])) {
      return absl::StrCat("continues the host with \"", after.text.substr(0, 1),
                          "\", a byte a host may contain (use \"/\")");
    }
  }
  return {};
}

}  // namespace kosoku::cache
