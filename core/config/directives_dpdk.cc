// `network kernel|dpdk;` and `dpdk { eal ...; address ...; gateway ...; idle_sleep ...; congestion_control ...;
// rto_min ...; tx_zero_copy ...; tx_zero_copy_buffers ...; }` (main context): the network backend
// (config/network_conf.hh). The dpdk block's body is its own context (kCtxDpdk) of the one table mechanism:
// `address` and `gateway` there are other rows than the appliance block's.
// finalize_dpdk checks the combinations once the whole file is read (the order of the blocks is free), and
// the `eal` arguments (config/eal_args.hh), pointing at the offending argument.
#include <arpa/inet.h>

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/eal_args.hh"

namespace kosoku::config {

namespace {

NetworkConfPos pos_of(const SourceLoc& l) { return NetworkConfPos{l.file, l.line, l.col}; }
SourceLoc loc_of(const NetworkConfPos& p) { return SourceLoc{p.file, p.line, p.col}; }

bool parse_ipv4(std::string_view v, uint32_t* out) {
  if (v.empty() || v.size() >= INET_ADDRSTRLEN) return false;
  std::string z(v);
  in_addr a;
  if (inet_pton(AF_INET, z.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

// `idle_sleep off|Nus|Nms|N;` -> microseconds (0: off), 1 us .. 10 ms. A bare number is milliseconds, as
// nginx reads its msec-valued directives (ngx_parse_time with is_sec off).
std::optional<uint32_t> parse_idle_sleep(std::string_view v) {
  if (v == "off") return 0u;
  uint64_t scale = 1000;
  if (v.ends_with("us")) {
    scale = 1;
    v.remove_suffix(2);
  } else if (v.ends_with("ms")) {
    v.remove_suffix(2);
  }
  std::optional<uint64_t> n = parse_number(v, 10'000);
  if (!n || *n == 0 || *n * scale > 10'000) return std::nullopt;
  return static_cast<uint32_t>(*n * scale);
}

// `network kernel|dpdk;`
bool set_network(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  if (v != "kernel" && v != "dpdk") return fail_invalid_value(b, d, 0, ", it must be \"kernel\" or \"dpdk\"");
  s.main->network.backend = v == "dpdk" ? NetworkBackend::kDpdk : NetworkBackend::kKernel;
  s.main->network.loc = pos_of(d.loc);
  return true;
}

// `eal ARG ...;` (may repeat: the arguments accumulate in order)
bool set_eal(Builder&, Scope& s, const Directive& d) {
  DpdkConf& c = s.main->network.dpdk;
  for (const Arg& a : d.args) {
    c.eal.push_back(a.value);
    c.eal_loc.push_back(pos_of(a.loc));
  }
  return true;
}

// `idle_sleep off|Nus|Nms|N;`
bool set_idle_sleep(Builder& b, Scope& s, const Directive& d) {
  std::optional<uint32_t> us = parse_idle_sleep(d.args[0].value);
  if (!us) return fail_invalid_value(b, d, 0, ", it must be \"off\" or 1us..10ms (\"200us\", \"1ms\", \"1\" = 1ms)");
  s.main->network.dpdk.idle_sleep_us = *us;
  return true;
}

// `congestion_control cubic|reno;`
bool set_congestion_control(Builder& b, Scope& s, const Directive& d) {
  std::string_view v = d.args[0].value;
  if (v != "cubic" && v != "reno") return fail_invalid_value(b, d, 0, ", it must be \"cubic\" or \"reno\"");
  s.main->network.dpdk.congestion_control = v == "reno" ? TcpCongestionControl::kReno : TcpCongestionControl::kCubic;
  return true;
}

// `rto_min TIME;` 1ms..60s
bool set_rto_min(Builder& b, Scope& s, const Directive& d) {
  std::optional<uint64_t> ms = parse_time_ms(d.args[0].value);
  if (!ms || *ms == 0 || *ms > 60'000) return fail_invalid_value(b, d, 0, ", it must be 1ms..60s (\"200ms\")");
  s.main->network.dpdk.rto_min_ms = static_cast<uint32_t>(*ms);
  return true;
}

// `tx_zero_copy_buffers N;` 1..4096
bool set_tx_zero_copy_buffers(Builder& b, Scope& s, const Directive& d) {
  std::optional<uint64_t> n = parse_number(d.args[0].value, 4096);
  if (!n || *n == 0) return fail_invalid_value(b, d, 0, ", it must be 1..4096");
  s.main->network.dpdk.tx_zero_copy_buffers = static_cast<uint32_t>(*n);
  return true;
}

// `gateway A.B.C.D;`
bool set_gateway(Builder& b, Scope& s, const Directive& d) {
  DpdkConf& c = s.main->network.dpdk;
  if (!parse_ipv4(d.args[0].value, &c.gateway) || c.gateway == 0) return fail_invalid_value(b, d, 0);
  return true;
}

// `address A.B.C.D/N;` (N = 1..32)
bool set_address(Builder& b, Scope& s, const Directive& d) {
  DpdkConf& c = s.main->network.dpdk;
  std::string_view v = d.args[0].value;
  size_t slash = v.find('/');
  std::optional<uint64_t> n;
  if (slash != std::string_view::npos) n = parse_number(v.substr(slash + 1), 32);
  if (slash == std::string_view::npos || !parse_ipv4(v.substr(0, slash), &c.address) || c.address == 0 || !n ||
      *n == 0) {
    return fail_invalid_value(b, d, 0, ", it must be an IPv4 address with a prefix length (10.99.0.2/24)");
  }
  c.prefix_len = static_cast<uint8_t>(*n);
  return true;
}

// `dpdk { ... }`: its body is a context of its own (kCtxDpdk) read by the generic walk.
bool set_dpdk(Builder& b, Scope& s, const Directive& d) {
  DpdkConf& c = s.main->network.dpdk;
  c.present = true;
  c.loc = pos_of(d.loc);
  Seen seen;
  Scope inner;
  inner.ctx = kCtxDpdk;
  inner.main = s.main;
  inner.seen = &seen;
  return b.walk(inner, d.children);
}

constexpr DirectiveSpec kDpdkDirectives[] = {
    {.name = "network", .contexts = kCtxMain, .args = kTake1, .set = set_network, .default_value = "kernel"},
    {.name = "dpdk", .contexts = kCtxMain, .args = kNoArgs, .flags = kBlock, .set = set_dpdk},
    {.name = "eal", .contexts = kCtxDpdk, .args = k1More, .flags = kMulti, .set = set_eal},
    {.name = "address", .contexts = kCtxDpdk, .args = kTake1, .set = set_address},
    {.name = "gateway", .contexts = kCtxDpdk, .args = kTake1, .set = set_gateway},
    {.name = "idle_sleep", .contexts = kCtxDpdk, .args = kTake1, .set = set_idle_sleep},
    {.name = "congestion_control", .contexts = kCtxDpdk, .args = kTake1, .set = set_congestion_control},
    {.name = "rto_min", .contexts = kCtxDpdk, .args = kTake1, .set = set_rto_min},
    {.name = "tx_zero_copy", .contexts = kCtxDpdk, .args = kTake1, .set = set_flag<&DpdkConf::tx_zero_copy>},
    {.name = "tx_zero_copy_buffers", .contexts = kCtxDpdk, .args = kTake1, .set = set_tx_zero_copy_buffers},
};

}  // namespace

std::span<const DirectiveSpec> dpdk_directives() { return kDpdkDirectives; }

bool finalize_dpdk(Builder& b) {
  const MainConf& m = *b.main;
  const NetworkConf& n = m.network;
  if (n.backend != NetworkBackend::kDpdk) {
    if (n.dpdk.present) {
      return b.fail(loc_of(n.dpdk.loc), "\"dpdk\" block needs \"network dpdk;\" (it would be ignored otherwise)");
    }
    return true;
  }
  SourceLoc at = loc_of(n.loc);
  if (!n.dpdk.present) return b.fail(at, "\"network dpdk\" needs a \"dpdk { eal ...; address ...; }\" block");
  if (n.dpdk.eal.empty()) return b.fail(loc_of(n.dpdk.loc), "\"dpdk\" block has no \"eal\" arguments");
  if (n.dpdk.address == 0) return b.fail(loc_of(n.dpdk.loc), "\"dpdk\" block has no \"address\"");
  if (m.worker_processes > 128) {  // kernel-bypass/dpdk/backend.cc kMaxCores (DPDK lcores)
    return b.fail(at, absl::StrCat("\"network dpdk\" supports at most 128 worker_processes, not ",
                                   m.worker_processes));
  }
  if (std::optional<EalArgError> e = check_eal_args(n.dpdk.eal, m.worker_processes)) {
    SourceLoc where = e->arg < n.dpdk.eal_loc.size() ? loc_of(n.dpdk.eal_loc[e->arg]) : loc_of(n.dpdk.loc);
    return b.fail(where, absl::StrCat("\"eal\": ", e->message));
  }
  for (const auto& srv : m.http.servers) {
    for (const ListenConf& l : srv->listen) {
      if (l.addr.ss_family != AF_INET) {
        return b.fail(at, absl::StrCat("\"network dpdk\" is IPv4 only: listen ", l.text, " is not supported yet"));
      }
      uint32_t a = ntohl(reinterpret_cast<const sockaddr_in*>(&l.addr)->sin_addr.s_addr);
      if (a != 0 && a != n.dpdk.address) {
        return b.fail(at, absl::StrCat("\"network dpdk\": listen ", l.text,
                                       " is neither 0.0.0.0 nor the dpdk address"));
      }
    }
  }
  return true;
}

}  // namespace kosoku::config
