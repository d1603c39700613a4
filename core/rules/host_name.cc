#include "core/rules/host_name.hh"

namespace kosoku::rules {

std::string_view normalize_host(std::string_view host, std::string& scratch) {
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close != std::string_view::npos) host = host.substr(0, close + 1);
  } else {
    size_t colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(':') == colon) host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  bool upper = false;
  for (char c : host) upper |= (c >= 'A' && c <= 'Z');
  if (!upper) return host;
  scratch.assign(host);
  for (char& c : scratch) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return scratch;
}

bool valid_host(std::string_view host) {
  if (host.empty() || host.size() > kMaxHostBytes) return false;
  if (host.front() == '[') {
    if (host.size() < 4 || host.back() != ']') return false;
    for (char c : host.substr(1, host.size() - 2)) {
      bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == ':' || c == '.';
      if (!ok) return false;
    }
    return true;
  }
  if (host.front() == '.' || host.back() == '.') return false;
  for (char c : host) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

}  // namespace kosoku::rules
