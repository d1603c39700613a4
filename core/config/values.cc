#include "core/config/values.hh"

#include <arpa/inet.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kosoku::config {

namespace {

constexpr uint64_t kMaxInt32 = 0x7fffffff;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Shared by parse_time_ms / parse_time_sec. `is_sec`: units scale to seconds and `ms` is refused.
std::optional<uint64_t> parse_time(std::string_view s, bool is_sec) {
  // Units in the only order nginx accepts, largest first. step = index of the last unit used.
  struct Unit {
    std::string_view name;
    uint64_t ms;
  };
  static constexpr Unit kUnits[] = {
      {"y", 365ull * 86400 * 1000}, {"M", 30ull * 86400 * 1000}, {"w", 7ull * 86400 * 1000},
      {"d", 86400ull * 1000},       {"h", 3600ull * 1000},       {"m", 60ull * 1000},
      {"s", 1000},                  {"ms", 1},
  };
  constexpr int kUnitCount = sizeof(kUnits) / sizeof(kUnits[0]);
  size_t i = 0;
  int step = -1;
  uint64_t total_ms = 0;
  bool any = false;
  while (i < s.size()) {
    if (!is_digit(s[i])) return std::nullopt;
    uint64_t value = 0;
    while (i < s.size() && is_digit(s[i])) {
      value = value * 10 + static_cast<uint64_t>(s[i] - '0');
      if (value > kMaxInt32 * 1000) return std::nullopt;
      ++i;
    }
    int unit = -1;
    bool bare = false;
    if (i == s.size() || s[i] == ' ') {
      unit = 6;  // bare number: seconds, and nothing may follow it
      bare = true;
    } else if (s[i] == 'm' && i + 1 < s.size() && s[i + 1] == 's') {
      unit = 7;
      i += 2;
    } else {
      for (int u = 0; u < kUnitCount; ++u) {
        if (kUnits[u].name.size() == 1 && kUnits[u].name[0] == s[i]) {
          unit = u;
          break;
        }
      }
      if (unit < 0) return std::nullopt;
      ++i;
    }
    if (unit <= step) return std::nullopt;  // repeated or out of order
    if (is_sec && unit == 7) return std::nullopt;
    step = bare ? kUnitCount : unit;
    uint64_t add = value * kUnits[unit].ms;
    if (value != 0 && add / value != kUnits[unit].ms) return std::nullopt;
    total_ms += add;
    if (total_ms > kMaxInt32 * 1000) return std::nullopt;
    any = true;
    while (i < s.size() && s[i] == ' ') ++i;
  }
  if (!any) return std::nullopt;
  if (is_sec) {
    uint64_t sec = total_ms / 1000;
    if (sec > kMaxInt32) return std::nullopt;
    return sec;
  }
  if (total_ms > kMaxInt32) return std::nullopt;
  return total_ms;
}

}  // namespace

std::optional<uint64_t> parse_time_ms(std::string_view s) { return parse_time(s, false); }

std::optional<uint64_t> parse_time_sec(std::string_view s) { return parse_time(s, true); }

std::optional<uint64_t> parse_number(std::string_view s, uint64_t max) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!is_digit(c)) return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  if (v > max) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_size(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t scale = 1;
  switch (s.back()) {
    case 'k':
    case 'K':
      scale = 1ull << 10;
      break;
    case 'm':
    case 'M':
      scale = 1ull << 20;
      break;
    case 'g':
    case 'G':
      scale = 1ull << 30;
      break;
    default:
      break;
  }
  if (scale != 1) s.remove_suffix(1);
  constexpr uint64_t kMax = 1ull << 62;
  auto v = parse_number(s, kMax / scale);
  if (!v) return std::nullopt;
  return *v * scale;
}

bool parse_access_rule(std::string_view s, AccessRule* rule, bool* host_bits_set) {
  *host_bits_set = false;
  if (s == "all") {
    rule->all = true;
    rule->family = AF_INET;
    rule->prefix = 0;
    std::memset(rule->addr, 0, sizeof(rule->addr));
    return true;
  }
  rule->all = false;
  std::string_view addr = s;
  std::optional<uint64_t> prefix;
  size_t slash = s.find('/');
  if (slash != std::string_view::npos) {
    addr = s.substr(0, slash);
    prefix = parse_number(s.substr(slash + 1), 128);
    if (!prefix) return false;
  }
  if (addr.empty() || addr.size() >= INET6_ADDRSTRLEN) return false;
  char buf[INET6_ADDRSTRLEN];
  std::memcpy(buf, addr.data(), addr.size());
  buf[addr.size()] = '\0';
  uint8_t bytes[16] = {};
  int bits;
  if (inet_pton(AF_INET, buf, bytes) == 1) {
    rule->family = AF_INET;
    bits = 32;
  } else if (inet_pton(AF_INET6, buf, bytes) == 1) {
    rule->family = AF_INET6;
    bits = 128;
  } else {
    return false;
  }
  int p = prefix ? static_cast<int>(*prefix) : bits;
  if (p > bits) return false;
  for (int i = 0; i < bits / 8; ++i) {
    int keep = p - i * 8;
    uint8_t mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
    if (bytes[i] & ~mask) *host_bits_set = true;
    bytes[i] &= mask;
  }
  std::memcpy(rule->addr, bytes, sizeof(rule->addr));
  rule->prefix = p;
  return true;
}

bool parse_listen_address(std::string_view s, ListenConf* out, std::string* error) {
  std::string_view host;
  std::string_view port;
  bool v6 = false;
  bool has_port = true;
  if (!s.empty() && s[0] == '[') {
    size_t close = s.find(']');
    if (close == std::string_view::npos) {
      *error = "the closing bracket in IPv6 address is missing";
      return false;
    }
    host = s.substr(1, close - 1);
    v6 = true;
    std::string_view rest = s.substr(close + 1);
    if (rest.empty()) {
      has_port = false;
    } else if (rest[0] == ':') {
      port = rest.substr(1);
    } else {
      *error = "invalid host";
      return false;
    }
  } else {
    size_t colon = s.rfind(':');
    if (colon != std::string_view::npos) {
      host = s.substr(0, colon);
      port = s.substr(colon + 1);
    } else if (parse_number(s, UINT32_MAX)) {
      port = s;  // `listen 8080;`
    } else {
      host = s;
      has_port = false;
    }
  }
  uint16_t port_num = 80;
  if (has_port) {
    auto p = parse_number(port, 65535);
    if (!p || *p == 0) {
      *error = "invalid port";
      return false;
    }
    port_num = static_cast<uint16_t>(*p);
  }
  out->addr = sockaddr_storage{};
  if (v6) {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&out->addr);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port_num);
    std::string h(host);
    if (h.empty() || h.size() >= INET6_ADDRSTRLEN || inet_pton(AF_INET6, h.c_str(), &sin6->sin6_addr) != 1) {
      *error = "invalid IPv6 address";
      return false;
    }
    out->addr_len = sizeof(sockaddr_in6);
  } else {
    auto* sin = reinterpret_cast<sockaddr_in*>(&out->addr);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port_num);
    if (host.empty() || host == "*") {
      sin->sin_addr.s_addr = htonl(INADDR_ANY);
      if (host.empty() && port.empty()) {
        *error = "no port";
        return false;
      }
    } else if (host == "localhost") {
      sin->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
      std::string h(host);
      if (h.size() >= INET_ADDRSTRLEN || inet_pton(AF_INET, h.c_str(), &sin->sin_addr) != 1) {
        *error = "host not found";
        return false;
      }
    }
    out->addr_len = sizeof(sockaddr_in);
  }
  out->text = format_sockaddr(out->addr);
  return true;
}

std::string format_sockaddr(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET6) {
    const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf));
    return absl::StrCat("[", buf, "]:", ntohs(sin6->sin6_port));
  }
  const auto* sin = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf));
  return absl::StrCat(buf, ":", ntohs(sin->sin_port));
}

bool same_sockaddr(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(&a);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(&b);
    return x->sin6_port == y->sin6_port && std::memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
  }
  const auto* x = reinterpret_cast<const sockaddr_in*>(&a);
  const auto* y = reinterpret_cast<const sockaddr_in*>(&b);
  return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
}

std::string re2_spelling(std::string_view pcre) {
  std::string out;
  out.reserve(pcre.size() + 4);
  for (size_t i = 0; i < pcre.size(); ++i) {
    const char c = pcre[i];
    if (c == '\\' && i + 1 < pcre.size()) {  // an escaped byte is copied with its backslash
      out.push_back(c);
      out.push_back(pcre[++i]);
      continue;
    }
    out.push_back(c);
    if (c == '(' && pcre.substr(i + 1, 2) == "?<" && i + 3 < pcre.size() && pcre[i + 3] != '=' && pcre[i + 3] != '!') {
      out.append("?P<");
      i += 2;
    }
  }
  return out;
}

}  // namespace kosoku::config
