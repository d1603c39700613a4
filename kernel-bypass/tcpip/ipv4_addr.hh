// IPv4 and Ethernet addresses as small value types (host byte order for IPv4).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kosoku::tcpip {

struct Ipv4Addr {
  uint32_t value = 0;  // host order: 10.0.2.15 = 0x0a00020f
  friend bool operator==(Ipv4Addr, Ipv4Addr) = default;
  template <class H>
  friend H AbslHashValue(H h, Ipv4Addr a) {
    return H::combine(std::move(h), a.value);
  }
  /// Dotted quad "10.0.2.15".
  std::string to_string() const;
  /// Parses a dotted quad; nullopt if malformed.
  static std::optional<Ipv4Addr> parse(std::string_view text);
};

struct MacAddr {
  std::array<uint8_t, 6> bytes{};
  friend bool operator==(const MacAddr&, const MacAddr&) = default;
  static constexpr MacAddr broadcast() { return MacAddr{{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}; }
  bool is_broadcast() const { return *this == broadcast(); }
  bool is_multicast() const { return (bytes[0] & 1) != 0; }
  bool is_zero() const { return *this == MacAddr{}; }
  /// "52:54:00:12:34:56".
  std::string to_string() const;
};

}  // namespace kosoku::tcpip
