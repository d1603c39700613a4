// `appliance { }` (main): settings used only when kosoku runs as PID 1 of the appliance image (image/).
// A separate table shows how a module adds its own block and rows without touching the others.
#include <arpa/inet.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"

namespace kosoku::config {

namespace {

bool set_appliance(Builder& b, Scope& s, const Directive& d) {
  s.main->appliance.present = true;
  s.main->appliance.loc = d.loc;
  Scope inner;
  inner.ctx = kCtxAppliance;
  inner.main = s.main;
  inner.seen = &b.appliance_seen;
  return b.walk(inner, d.children);
}

bool is_ipv4(std::string_view v) {
  if (v.empty() || v.size() >= INET_ADDRSTRLEN) return false;
  std::string z(v);
  in_addr a;
  return inet_pton(AF_INET, z.c_str(), &a) == 1;
}

// `address A.B.C.D/N;` the interface address with its prefix length (host bits are expected here).
bool set_address(Builder& b, Scope& s, const Directive& d) {
  std::string_view v = d.args[0].value;
  size_t slash = v.find('/');
  if (slash == std::string_view::npos || !is_ipv4(v.substr(0, slash)) || !parse_number(v.substr(slash + 1), 32)) {
    return fail_invalid_value(b, d, 0, ", it must be an IPv4 address with a prefix length (10.0.2.15/24)");
  }
  s.main->appliance.address = std::string(v);
  return true;
}

// `gateway A.B.C.D;`
bool set_gateway(Builder& b, Scope& s, const Directive& d) {
  if (!is_ipv4(d.args[0].value)) return fail_invalid_value(b, d, 0);
  s.main->appliance.gateway = d.args[0].value;
  return true;
}

// `interface NAME;` a Linux interface name (at most 15 bytes, no '/' or spaces).
bool set_interface(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v.empty() || v.size() > 15 || v.find_first_of("/ \t:") != std::string::npos) return fail_invalid_value(b, d, 0);
  s.main->appliance.interface = v;
  return true;
}

// `data_disk DEV [ro|rw] [fstype=TYPE] [mount=/PATH];` DEV and PATH absolute.
bool set_data_disk(Builder& b, Scope& s, const Directive& d) {
  ApplianceConf& a = s.main->appliance;
  if (d.args[0].value.empty() || d.args[0].value[0] != '/') return fail_invalid_value(b, d, 0);
  a.data_device = d.args[0].value;
  for (size_t i = 1; i < d.args.size(); ++i) {
    std::string_view v = d.args[i].value;
    if (v == "ro" || v == "rw") {
      a.data_rw = v == "rw";
    } else if (v.rfind("fstype=", 0) == 0 && v.size() > 7) {
      a.data_fstype = std::string(v.substr(7));
    } else if (v.rfind("mount=", 0) == 0 && v.size() > 7 && v[6] == '/') {
      a.data_mount = std::string(v.substr(6));
    } else {
      return b.fail(d.args[i].loc, absl::StrCat("invalid parameter ", quoted(v)));
    }
  }
  return true;
}

// `console DEV [BAUD];` DEV as "ttyS0" or "/dev/ttyS0"; BAUD one of the standard serial rates.
bool set_console(Builder& b, Scope& s, const Directive& d) {
  std::string dev = d.args[0].value;
  if (dev.rfind("/dev/", 0) == 0) dev = dev.substr(5);
  if (dev.empty() || dev.find('/') != std::string::npos) return fail_invalid_value(b, d, 0);
  s.main->appliance.console = dev;
  if (d.args.size() == 2) {
    static constexpr uint64_t kRates[] = {9600, 19200, 38400, 57600, 115200, 230400, 460800, 921600};
    auto baud = parse_number(d.args[1].value);
    bool ok = false;
    for (uint64_t r : kRates) ok = ok || (baud && *baud == r);
    if (!ok) return fail_invalid_value(b, d, 1);
    s.main->appliance.console_baud = static_cast<uint32_t>(*baud);
  }
  return true;
}

// `on_fatal reboot|halt;`
bool set_on_fatal(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v != "reboot" && v != "halt") return fail_invalid_value(b, d, 0, ", it must be \"reboot\" or \"halt\"");
  s.main->appliance.on_fatal_reboot = v == "reboot";
  return true;
}

constexpr DirectiveSpec kApplianceDirectives[] = {
    {.name = "appliance", .contexts = kCtxMain, .args = kNoArgs, .flags = kBlock, .set = set_appliance},
    {.name = "address", .contexts = kCtxAppliance, .args = kTake1, .set = set_address},
    {.name = "gateway", .contexts = kCtxAppliance, .args = kTake1, .set = set_gateway},
    {.name = "interface", .contexts = kCtxAppliance, .args = kTake1, .set = set_interface,
     .default_value = "eth0"},
    {.name = "data_disk", .contexts = kCtxAppliance, .args = {1, 4}, .set = set_data_disk,
     .default_value = "/dev/vda ro fstype=ext4 mount=/data"},
    {.name = "hugepages", .contexts = kCtxAppliance, .args = kTake1,
     .set = set_number<&ApplianceConf::hugepages, 0>, .default_value = "0"},
    {.name = "console", .contexts = kCtxAppliance, .args = kTake12, .set = set_console,
     .default_value = "ttyS0 115200"},
    {.name = "on_fatal", .contexts = kCtxAppliance, .args = kTake1, .set = set_on_fatal, .default_value = "halt"},
};

}  // namespace

std::span<const DirectiveSpec> appliance_directives() { return kApplianceDirectives; }

}  // namespace kosoku::config
