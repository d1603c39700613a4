#include "core/config/eal_args.hh"

#include <sched.h>

#include <bitset>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace kosoku::config {

namespace {

enum class Has : uint8_t { kNone, kRequired, kOptional };
enum class Check : uint8_t {
  kAny, kNonEmpty, kPci, kCoreMask, kLcoreList, kLcores, kVdev, kNumber, kNumberList, kProcType, kIovaMode, kLcore,
};

struct Option {
  std::string_view name;  // without dashes
  Has has;
  Check check;
};

// DPDK 22.11 eal_short_options / eal_long_options.
constexpr Option kShort[] = {
    {"a", Has::kRequired, Check::kPci},       {"b", Has::kRequired, Check::kPci},
    {"c", Has::kRequired, Check::kCoreMask},  {"s", Has::kRequired, Check::kCoreMask},
    {"d", Has::kRequired, Check::kNonEmpty},  {"h", Has::kNone, Check::kAny},
    {"l", Has::kRequired, Check::kLcoreList}, {"S", Has::kRequired, Check::kLcoreList},
    {"m", Has::kRequired, Check::kNumber},    {"n", Has::kRequired, Check::kNumber},
    {"r", Has::kRequired, Check::kNumber},    {"v", Has::kNone, Check::kAny},
};
constexpr Option kLong[] = {
    {"allow", Has::kRequired, Check::kPci},
    {"block", Has::kRequired, Check::kPci},
    {"base-virtaddr", Has::kRequired, Check::kNonEmpty},
    {"create-uio-dev", Has::kNone, Check::kAny},
    {"file-prefix", Has::kRequired, Check::kNonEmpty},
    {"force-max-simd-bitwidth", Has::kRequired, Check::kNumber},
    {"help", Has::kNone, Check::kAny},
    {"huge-dir", Has::kRequired, Check::kNonEmpty},
    {"huge-unlink", Has::kOptional, Check::kAny},
    {"huge-worker-stack", Has::kOptional, Check::kAny},
    {"in-memory", Has::kNone, Check::kAny},
    {"iova-mode", Has::kRequired, Check::kIovaMode},
    {"lcores", Has::kRequired, Check::kLcores},
    {"legacy-mem", Has::kNone, Check::kAny},
    {"log-level", Has::kRequired, Check::kNonEmpty},
    {"main-lcore", Has::kRequired, Check::kLcore},
    {"match-allocations", Has::kNone, Check::kAny},
    {"mbuf-pool-ops-name", Has::kRequired, Check::kNonEmpty},
    {"no-hpet", Has::kNone, Check::kAny},
    {"no-huge", Has::kNone, Check::kAny},
    {"no-pci", Has::kNone, Check::kAny},
    {"no-shconf", Has::kNone, Check::kAny},
    {"no-telemetry", Has::kNone, Check::kAny},
    {"proc-type", Has::kRequired, Check::kProcType},
    {"single-file-segments", Has::kNone, Check::kAny},
    {"socket-limit", Has::kRequired, Check::kNumberList},
    {"socket-mem", Has::kRequired, Check::kNumberList},
    {"syslog", Has::kOptional, Check::kAny},
    {"telemetry", Has::kNone, Check::kAny},
    {"trace", Has::kRequired, Check::kNonEmpty},
    {"trace-bufsz", Has::kRequired, Check::kNonEmpty},
    {"trace-dir", Has::kRequired, Check::kNonEmpty},
    {"trace-mode", Has::kRequired, Check::kNonEmpty},
    {"vdev", Has::kRequired, Check::kVdev},
    {"vfio-intr", Has::kRequired, Check::kNonEmpty},
    {"vfio-vf-token", Has::kRequired, Check::kNonEmpty},
    {"vmware-tsc-map", Has::kNone, Check::kAny},
};

// Virtual device drivers linked into kosoku (CMakeLists.txt DPDK_WHOLE_ARCHIVE) and their registered aliases.
constexpr std::string_view kVdevDrivers[] = {
    "net_tap", "net_tun", "net_af_packet", "eth_af_packet", "net_memif", "net_ring", "eth_ring",
    "net_null", "eth_null", "net_virtio_user", "virtio_user",
};

using Lcores = std::bitset<kMaxLcores>;

// getopt_long's lookup (glibc, as rte_eal_init uses it): the exact name, else the one option `name` is a prefix
// of. Several candidates: nullptr with *candidates = "--a --b ..." (every EAL option has a value of its own, so
// glibc calls any two ambiguous). None: nullptr with *candidates empty.
const Option* find_long(std::string_view name, std::string* candidates) {
  const Option* found = nullptr;
  int matches = 0;
  for (const Option& o : kLong) {
    if (o.name == name) return &o;
    if (!o.name.starts_with(name)) continue;
    found = &o;
    ++matches;
    absl::StrAppend(candidates, candidates->empty() ? "" : " ", "--", o.name);
  }
  if (matches > 1) return nullptr;
  candidates->clear();
  return found;
}

// "0-3,5" -> ids; false with *why on a syntax error or an id >= kMaxLcores.
bool parse_lcore_list(std::string_view v, Lcores* out, std::string* why) {
  if (v.empty()) {
    *why = "empty list";
    return false;
  }
  for (std::string_view part : absl::StrSplit(v, ',')) {
    std::pair<std::string_view, std::string_view> r = absl::StrSplit(part, absl::MaxSplits('-', 1));
    bool range = part.find('-') != std::string_view::npos;
    uint32_t lo = 0, hi = 0;
    if (r.first.empty() || !absl::SimpleAtoi(r.first, &lo) || !absl::ascii_isdigit(r.first[0]) ||
        (range && (r.second.empty() || !absl::ascii_isdigit(r.second[0]) || !absl::SimpleAtoi(r.second, &hi)))) {
      *why = absl::StrCat("\"", part, "\" is not an lcore id or a range N-M");
      return false;
    }
    if (!range) hi = lo;
    if (hi < lo) std::swap(lo, hi);  // EAL accepts "3-1"
    if (hi >= static_cast<uint32_t>(kMaxLcores)) {
      *why = absl::StrCat("lcore id ", hi, " is not below ", kMaxLcores, " (RTE_MAX_LCORE)");
      return false;
    }
    for (uint32_t i = lo; i <= hi; ++i) out->set(i);
  }
  return true;
}

bool parse_core_mask(std::string_view v, Lcores* out, std::string* why) {
  std::string_view hex = absl::StripPrefix(absl::StripPrefix(v, "0x"), "0X");
  if (hex.empty()) {
    *why = "empty mask";
    return false;
  }
  for (size_t i = 0; i < hex.size(); ++i) {
    char c = hex[hex.size() - 1 - i];
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      *why = absl::StrCat("\"", v, "\" is not a hexadecimal mask");
      return false;
    }
    int d = absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10;
    for (int bit = 0; bit < 4; ++bit) {
      if ((d & (1 << bit)) == 0) continue;
      size_t id = i * 4 + static_cast<size_t>(bit);
      if (id >= static_cast<size_t>(kMaxLcores)) {
        *why = absl::StrCat("lcore id ", id, " is not below ", kMaxLcores, " (RTE_MAX_LCORE)");
        return false;
      }
      out->set(id);
    }
  }
  if (out->none()) {
    *why = "the mask selects no lcore";
    return false;
  }
  return true;
}

// --lcores "0-3,(4,5)@(6,7),8@9": the lcore sets (left of '@') are counted; the CPU sets are checked for syntax.
bool parse_lcores_map(std::string_view v, Lcores* out, std::string* why) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= v.size(); ++i) {
    char c = i < v.size() ? v[i] : ',';
    if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth < 0) break;
    } else if (c == ',' && depth == 0) {
      std::string_view elem = v.substr(start, i - start);
      start = i + 1;
      std::pair<std::string_view, std::string_view> sides = absl::StrSplit(elem, absl::MaxSplits('@', 1));
      std::string_view set = absl::StripSuffix(absl::StripPrefix(sides.first, "("), ")");
      Lcores cpus;
      if (!parse_lcore_list(set, out, why)) return false;
      bool has_cpus = elem.find('@') != std::string_view::npos;
      std::string_view cpu_set = absl::StripSuffix(absl::StripPrefix(sides.second, "("), ")");
      if (has_cpus && !parse_lcore_list(cpu_set, &cpus, why)) return false;
    } else if (!absl::ascii_isdigit(c) && c != '-' && c != '@' && c != ',') {
      *why = absl::StrCat("unexpected character '", std::string(1, c), "'");
      return false;
    }
  }
  if (depth != 0) {
    *why = "unbalanced parentheses";
    return false;
  }
  return true;
}

bool is_hex(std::string_view s, size_t min, size_t max) {
  if (s.size() < min || s.size() > max) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// [DDDD:]BB:DD.F
bool is_pci_address(std::string_view a) {
  std::vector<std::string_view> p = absl::StrSplit(a, ':');
  if (p.size() == 3 && !is_hex(p[0], 4, 4)) return false;
  if (p.size() != 2 && p.size() != 3) return false;
  std::string_view bus = p[p.size() - 2];
  std::pair<std::string_view, std::string_view> df = absl::StrSplit(p.back(), absl::MaxSplits('.', 1));
  return is_hex(bus, 2, 2) && is_hex(df.first, 2, 2) && df.second.size() == 1 && df.second[0] >= '0' &&
         df.second[0] <= '7';
}

// Linux's dev_valid_name (net/core/dev.c) beyond the length (1..15 bytes, IFNAMSIZ - 1): not "." or "..", no
// '/', ':' or white space.
bool is_linux_ifname_text(std::string_view n) {
  if (n == "." || n == "..") return false;
  for (char c : n) {
    if (c == '/' || c == ':' || absl::ascii_isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// key=value[,key=value...] after a device name; false with *why.
bool check_kvargs(std::string_view device, std::string_view driver, std::span<const std::string_view> kv,
                  std::string* why) {
  for (std::string_view item : kv) {
    std::pair<std::string_view, std::string_view> p = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (p.first.empty() || item.find('=') == std::string_view::npos) {
      *why = absl::StrCat("device argument \"", item, "\" of ", device, " is not key=value");
      return false;
    }
    if ((driver == "net_tap" || driver == "net_tun") && (p.first == "iface" || p.first == "remote")) {
      if (p.second.empty() || p.second.size() > 15) {
        *why = absl::StrCat(p.first, "=", p.second, " of ", device, " is not a Linux interface name (1..15 bytes)");
        return false;
      }
      if (!is_linux_ifname_text(p.second)) {
        *why = absl::StrCat(p.first, "=", p.second, " of ", device,
                            " is not a Linux interface name (not \".\" or \"..\", no '/', ':' or white space)");
        return false;
      }
    }
  }
  return true;
}

bool check_vdev(std::string_view v, std::string* why) {
  std::vector<std::string_view> parts = absl::StrSplit(v, ',');
  std::string_view name = parts[0];
  std::string_view driver;
  for (std::string_view d : kVdevDrivers) {
    if (name.starts_with(d) && d.size() > driver.size()) driver = d;
  }
  if (driver.empty()) {
    *why = absl::StrCat("--vdev \"", name,
                        "\" names no driver linked into kosoku (net_tap, net_tun, net_af_packet, net_memif, "
                        "net_ring, net_null, net_virtio_user)");
    return false;
  }
  for (char c : name.substr(driver.size())) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      *why = absl::StrCat("--vdev device name \"", name, "\" has a '", std::string(1, c), "'");
      return false;
    }
  }
  return check_kvargs(name, driver, std::span(parts).subspan(1), why);
}

bool check_value(Check check, std::string_view v, Lcores* lcores, std::string* why) {
  switch (check) {
    case Check::kAny:
      return true;
    case Check::kNonEmpty:
      if (v.empty()) *why = "empty value";
      return !v.empty();
    case Check::kPci: {
      std::vector<std::string_view> parts = absl::StrSplit(v, ',');
      if (!is_pci_address(parts[0])) {
        *why = absl::StrCat("\"", parts[0], "\" is not a PCI address (DDDD:BB:DD.F or BB:DD.F)");
        return false;
      }
      return check_kvargs(parts[0], "", std::span(parts).subspan(1), why);
    }
    case Check::kCoreMask:
      return parse_core_mask(v, lcores, why);
    case Check::kLcoreList:
      return parse_lcore_list(v, lcores, why);
    case Check::kLcores:
      return parse_lcores_map(v, lcores, why);
    case Check::kVdev:
      return check_vdev(v, why);
    case Check::kLcore: {
      uint32_t id = 0;
      if (!absl::SimpleAtoi(v, &id) || v.empty() || !absl::ascii_isdigit(v[0]) || id >= kMaxLcores) {
        *why = absl::StrCat("\"", v, "\" is not an lcore id below ", kMaxLcores);
        return false;
      }
      return true;
    }
    case Check::kNumber:
    case Check::kNumberList:
      for (std::string_view n : absl::StrSplit(v, ',')) {
        uint64_t x = 0;
        if (n.empty() || !absl::ascii_isdigit(n[0]) || !absl::SimpleAtoi(n, &x) ||
            (check == Check::kNumber && n.size() != v.size())) {
          *why = absl::StrCat("\"", v, "\" is not a ", check == Check::kNumber ? "number" : "list of numbers");
          return false;
        }
      }
      return true;
    case Check::kProcType:
      if (v == "primary" || v == "secondary" || v == "auto") return true;
      *why = absl::StrCat("\"", v, "\" is not primary, secondary or auto");
      return false;
    case Check::kIovaMode:
      if (v == "pa" || v == "va" || v == "dc") return true;
      *why = absl::StrCat("\"", v, "\" is not pa, va or dc");
      return false;
  }
  return true;
}

int affinity_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// EAL's default lcore set (no -l/-c/--lcores): the CPUs this process may run on.
bool in_affinity(uint32_t cpu) {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpu == 0;
  return cpu < CPU_SETSIZE && CPU_ISSET(cpu, &set);
}

}  // namespace

std::optional<EalArgError> check_eal_args(std::span<const std::string> args, int worker_processes) {
  Lcores lcores;
  bool lcores_given = false;
  size_t lcores_arg = 0;
  std::string_view lcores_opt;
  std::optional<uint32_t> main_lcore;  // --main-lcore, checked against the lcore set at the end
  size_t main_arg = 0;
  std::deque<std::string> full_names;  // long options as getopt_long resolved them (stable storage for `shown`)
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    const Option* opt = nullptr;
    std::string_view shown = a;
    std::optional<std::string_view> value;
    if (a.starts_with("--") && a.size() > 2) {
      std::pair<std::string_view, std::string_view> nv = absl::StrSplit(a.substr(2), absl::MaxSplits('=', 1));
      std::string candidates;
      opt = nv.first.empty() ? nullptr : find_long(nv.first, &candidates);
      shown = a.substr(0, 2 + nv.first.size());
      if (!candidates.empty()) {
        return EalArgError{i, absl::StrCat("ambiguous EAL option \"", shown, "\" (possibilities: ", candidates,
                                           "; DPDK 22.11)")};
      }
      if (opt != nullptr) shown = full_names.emplace_back(absl::StrCat("--", opt->name));  // "--no-hu": --no-huge
      if (a.find('=') != std::string_view::npos) value = nv.second;
    } else if (a.size() >= 2 && a[0] == '-' && a[1] != '-') {
      for (const Option& o : kShort) opt = o.name == a.substr(1, 1) ? &o : opt;
      shown = a.substr(0, 2);
      if (a.size() > 2) value = a.substr(2);
    } else {
      return EalArgError{i, absl::StrCat("unexpected EAL argument \"", a, "\" (not an option)")};
    }
    if (opt == nullptr) {
      std::string hint = shown == "-w" ? " (removed in DPDK 21.11: use -a)" : "";
      return EalArgError{i, absl::StrCat("unknown EAL option \"", shown, "\"", hint, " (DPDK 22.11)")};
    }
    size_t at = i;
    if (opt->has == Has::kNone && value) {
      // "-hv" style clusters of flags are accepted; "--no-huge=1" is not.
      bool cluster = shown.size() == 2;
      for (char c : *value) cluster = cluster && (c == 'h' || c == 'v');
      if (!cluster) return EalArgError{i, absl::StrCat("EAL option \"", shown, "\" takes no value")};
      continue;
    }
    if (opt->has == Has::kRequired && !value) {
      if (i + 1 >= args.size()) return EalArgError{i, absl::StrCat("EAL option \"", shown, "\" needs a value")};
      value = args[++i];
      at = i;
    }
    if (!value) continue;
    Lcores scratch;
    bool counts = opt->check == Check::kLcoreList && opt->name == "l";
    counts = counts || (opt->check == Check::kCoreMask && opt->name == "c") || opt->check == Check::kLcores;
    std::string why;
    if (!check_value(opt->check, *value, counts ? &lcores : &scratch, &why)) {
      return EalArgError{at, absl::StrCat("invalid value of EAL option \"", shown, "\": ", why)};
    }
    if (opt->check == Check::kLcore && opt->name == "main-lcore") {
      uint32_t id = 0;
      if (absl::SimpleAtoi(*value, &id)) main_lcore = id;
      main_arg = at;
    }
    if (counts) {
      if (lcores_given) {
        return EalArgError{i, absl::StrCat("EAL option \"", shown, "\" repeats the lcores \"", lcores_opt,
                                           "\" already set (use one of -l, -c, --lcores)")};
      }
      lcores_given = true;
      lcores_arg = at;
      lcores_opt = shown;
    }
  }
  // EAL refuses a main lcore outside its lcore set ("Main lcore is not enabled for DPDK").
  if (main_lcore && (lcores_given ? !lcores.test(*main_lcore) : !in_affinity(*main_lcore))) {
    return EalArgError{main_arg, absl::StrCat("--main-lcore ", *main_lcore, " is not one of the EAL lcores (",
                                              lcores_given ? absl::StrCat("set by \"", lcores_opt, "\"")
                                                           : std::string("the CPUs kosoku may run on"),
                                              "): EAL refuses it")};
  }
  int eal_lcores = lcores_given ? static_cast<int>(lcores.count()) : affinity_cpus();
  if (eal_lcores + worker_processes > kMaxLcores) {
    return EalArgError{lcores_arg, absl::StrCat("the EAL lcores (", eal_lcores, ") plus worker_processes (",
                                                worker_processes, ") exceed ", kMaxLcores,
                                                " (RTE_MAX_LCORE): every worker registers an lcore of its own")};
  }
  return std::nullopt;
}

}  // namespace kosoku::config
