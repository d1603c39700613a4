// NIC binding table, IPv4 parsing and ioctl(2) interface configuration. See nic.hh.
#include "image/nic.hh"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <net/if.h>
#include <net/route.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace kosoku::appliance {
namespace {

std::string read_small_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

int write_file(const std::string& path, std::string_view data) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  const ssize_t n = ::write(fd, data.data(), data.size());
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return -err;
}

// "0x1af4\n" → 0x1af4.
std::optional<uint32_t> read_hex_id(const std::string& path) {
  std::string s = read_small_file(path);
  std::string_view v = absl::StripAsciiWhitespace(s);
  if (!absl::ConsumePrefix(&v, "0x")) return std::nullopt;
  uint32_t id = 0;
  if (!absl::SimpleHexAtoi(v, &id)) return std::nullopt;
  return id;
}

// The basename of BDF's `driver` link, or "" when unbound.
std::string bound_driver(const std::string& dev) {
  char target[512];
  const ssize_t n = ::readlink((dev + "/driver").c_str(), target, sizeof(target) - 1);
  if (n <= 0) return "";
  std::string_view t(target, static_cast<size_t>(n));
  const size_t slash = t.rfind('/');
  return std::string(slash == std::string_view::npos ? t : t.substr(slash + 1));
}

std::string ioctl_error(std::string_view what, std::string_view ifname) {
  return absl::StrCat(what, " ", ifname, ": ", std::strerror(errno));
}

void fill_ifname(ifreq* ifr, const std::string& ifname) {
  std::memset(ifr, 0, sizeof(*ifr));
  std::strncpy(ifr->ifr_name, ifname.c_str(), IFNAMSIZ - 1);
}

sockaddr_in make_sin(in_addr a) {
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr = a;
  return sin;
}

}  // namespace

const NicMode* find_nic_mode(std::string_view name) {
  for (const NicMode& m : kNicModes) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::vector<std::string> bind_nics(const NicMode& mode, std::string* error, std::string_view sysfs_pci) {
  std::vector<std::string> bound;
  error->clear();
  if (mode.override_driver.empty()) return bound;
  const std::string devices = absl::StrCat(sysfs_pci, "/devices");
  DIR* dir = ::opendir(devices.c_str());
  if (dir == nullptr) {
    *error = absl::StrCat("opendir ", devices, ": ", std::strerror(errno));
    return bound;
  }
  std::vector<std::string> matches;
  while (const dirent* de = ::readdir(dir)) {
    if (de->d_name[0] == '.') continue;
    const std::string dev = absl::StrCat(devices, "/", de->d_name);
    const auto vendor = read_hex_id(dev + "/vendor");
    const auto device = read_hex_id(dev + "/device");
    if (!vendor || !device) continue;
    for (const PciId& id : kNicPciIds) {
      if (id.vendor == *vendor && id.device == *device) matches.emplace_back(de->d_name);
    }
  }
  ::closedir(dir);
  if (matches.empty()) {
    *error = "no virtio-net PCI device found";
    return bound;
  }
  const std::string driver(mode.override_driver);
  for (const std::string& bdf : matches) {
    const std::string dev = absl::StrCat(devices, "/", bdf);
    if (int rc = write_file(dev + "/driver_override", driver); rc != 0) {
      *error = absl::StrCat(bdf, ": driver_override: ", std::strerror(-rc));
      return {};
    }
    if (std::string cur = bound_driver(dev); !cur.empty() && cur != driver) {
      write_file(dev + "/driver/unbind", bdf);  // best effort; the check below reports a failure
    }
    if (bound_driver(dev).empty()) write_file(absl::StrCat(sysfs_pci, "/drivers_probe"), bdf);
    if (std::string now = bound_driver(dev); now != driver) {
      *error = absl::StrCat(bdf, " is bound to ", now.empty() ? "no driver" : now, ", not ", driver,
                            " (is its module in the \"nic\" phase?)");
      return {};
    }
    bound.push_back(bdf);
  }
  return bound;
}

std::optional<in_addr> parse_ipv4(std::string_view text) {
  if (text.empty() || text.size() > 15) return std::nullopt;
  char buf[16];
  std::memcpy(buf, text.data(), text.size());
  buf[text.size()] = '\0';
  in_addr a{};
  if (::inet_pton(AF_INET, buf, &a) != 1) return std::nullopt;
  return a;
}

std::optional<Ipv4Cidr> parse_ipv4_cidr(std::string_view text) {
  Ipv4Cidr c;
  const size_t slash = text.find('/');
  const auto addr = parse_ipv4(text.substr(0, slash));
  if (!addr) return std::nullopt;
  c.addr = *addr;
  if (slash != std::string_view::npos) {
    int prefix = -1;
    const std::string_view p = text.substr(slash + 1);
    if (p.empty() || p.size() > 2 || !absl::SimpleAtoi(p, &prefix) || prefix < 0 || prefix > 32) {
      return std::nullopt;
    }
    c.prefix = prefix;
  }
  return c;
}

in_addr prefix_to_netmask(int prefix) {
  in_addr m{};
  m.s_addr = prefix <= 0 ? 0 : htonl(prefix >= 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1));
  return m;
}

std::string ipv4_to_string(in_addr addr) {
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &addr, buf, sizeof(buf));
  return buf;
}

std::string interface_up(const std::string& ifname) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return absl::StrCat("socket: ", std::strerror(errno));
  ifreq ifr;
  fill_ifname(&ifr, ifname);
  std::string err;
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    err = ioctl_error("SIOCGIFFLAGS", ifname);
  } else {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) err = ioctl_error("SIOCSIFFLAGS", ifname);
  }
  ::close(s);
  return err;
}

std::string configure_interface(const std::string& ifname, const Ipv4Cidr& cidr,
                                const std::optional<in_addr>& gateway) {
  const int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return absl::StrCat("socket: ", std::strerror(errno));
  std::string err;
  ifreq ifr;
  fill_ifname(&ifr, ifname);
  sockaddr_in sin = make_sin(cidr.addr);
  std::memcpy(&ifr.ifr_addr, &sin, sizeof(sin));
  if (::ioctl(s, SIOCSIFADDR, &ifr) != 0) err = ioctl_error("SIOCSIFADDR", ifname);
  if (err.empty()) {
    fill_ifname(&ifr, ifname);
    sin = make_sin(prefix_to_netmask(cidr.prefix));
    std::memcpy(&ifr.ifr_netmask, &sin, sizeof(sin));
    if (::ioctl(s, SIOCSIFNETMASK, &ifr) != 0) err = ioctl_error("SIOCSIFNETMASK", ifname);
  }
  ::close(s);
  if (err.empty()) err = interface_up(ifname);
  if (err.empty() && gateway) {
    const int r = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    rtentry rt{};
    sockaddr_in any = make_sin(in_addr{});
    sockaddr_in gw = make_sin(*gateway);
    std::memcpy(&rt.rt_dst, &any, sizeof(any));
    std::memcpy(&rt.rt_genmask, &any, sizeof(any));
    std::memcpy(&rt.rt_gateway, &gw, sizeof(gw));
    rt.rt_flags = RTF_UP | RTF_GATEWAY;
    std::string dev = ifname;
    rt.rt_dev = dev.data();
    if (r < 0 || (::ioctl(r, SIOCADDRT, &rt) != 0 && errno != EEXIST)) {
      err = absl::StrCat("SIOCADDRT default via ", ipv4_to_string(*gateway), " dev ", ifname, ": ",
                         std::strerror(errno));
    }
    if (r >= 0) ::close(r);
  }
  return err;
}

}  // namespace kosoku::appliance
