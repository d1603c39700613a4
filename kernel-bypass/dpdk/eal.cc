#include "kernel-bypass/dpdk/eal.hh"

#include <rte_bus.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_version.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"

namespace kosoku::dpdk {

namespace {
std::atomic<bool> g_eal_started{false};

int collect_bus(const rte_bus* bus, const void* data) {
  auto* out = static_cast<std::vector<std::string>*>(const_cast<void*>(data));
  out->emplace_back(rte_bus_name(bus));
  return 1;  // "no match": keep iterating
}
}  // namespace

std::string version() { return rte_version(); }

std::vector<std::string> linked_buses() {
  std::vector<std::string> out;
  rte_bus_find(nullptr, collect_bus, &out);
  return out;
}

int init_eal(std::span<const std::string> args, std::string* err) {
  if (g_eal_started.exchange(true)) {
    if (err) *err = "rte_eal_init: EAL is already initialised in this process";
    return -EALREADY;
  }
  // rte_eal_init may permute argv; keep private copies alive for the process lifetime (EAL keeps pointers).
  static std::vector<std::string> storage;
  static std::vector<char*> argv;
  storage.assign(1, "kosoku");
  storage.insert(storage.end(), args.begin(), args.end());
  argv.clear();
  for (std::string& s : storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  int rc = rte_eal_init(static_cast<int>(storage.size()), argv.data());
  if (rc < 0) {
    int e = rte_errno;
    if (err) *err = absl::StrCat("rte_eal_init failed: ", rte_strerror(e));
    return -(e > 0 ? e : EINVAL);
  }
  return static_cast<int>(rte_eth_dev_count_avail());
}

}  // namespace kosoku::dpdk
