#include "core/certs/host_name.hh"

namespace kosoku::certs {

bool normalize_cert_host(std::string_view in, std::string* out) {
  if (!in.empty() && in.back() == '.') in.remove_suffix(1);
  if (in.empty() || in.size() > kMaxHostBytes) return false;
  out->assign(in);
  for (char& c : *out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  std::string_view h = *out;
  if (h.substr(0, 2) == "*.") h.remove_prefix(2);
  if (h.empty()) return false;
  size_t label = 0;
  for (char c : h) {
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    if (!ok || ++label > 63) return false;
  }
  return label != 0;
}

std::string_view wildcard_of(std::string_view name, std::string& scratch) {
  scratch.clear();
  if (name.substr(0, 2) == "*.") return {};
  const size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot + 1 >= name.size()) return {};
  scratch.append("*");
  scratch.append(name.substr(dot));
  return scratch;
}

}  // namespace kosoku::certs
