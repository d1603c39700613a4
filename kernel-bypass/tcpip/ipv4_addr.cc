#include "kernel-bypass/tcpip/ipv4_addr.hh"

#include <arpa/inet.h>

#include "absl/strings/str_format.h"

namespace kosoku::tcpip {

std::string Ipv4Addr::to_string() const {
  return absl::StrFormat("%u.%u.%u.%u", value >> 24, (value >> 16) & 0xff, (value >> 8) & 0xff, value & 0xff);
}

std::optional<Ipv4Addr> Ipv4Addr::parse(std::string_view text) {
  if (text.empty() || text.size() >= INET_ADDRSTRLEN) return std::nullopt;
  std::string z(text);
  in_addr a;
  if (inet_pton(AF_INET, z.c_str(), &a) != 1) return std::nullopt;
  return Ipv4Addr{ntohl(a.s_addr)};
}

std::string MacAddr::to_string() const {
  return absl::StrFormat("%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2], bytes[3], bytes[4],
                         bytes[5]);
}

}  // namespace kosoku::tcpip
