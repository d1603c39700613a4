#include "kernel-bypass/dpdk/eal.hh"

#include <rte_bus.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_version.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace kosoku::dpdk {

namespace {
std::atomic<bool> g_eal_started{false};
std::string g_init_log;

void rt_signal_taken(int) {}

// init_eal's doc (eal.hh): leaves net_tap no free realtime signal, so it polls its queues.
void take_tap_rx_trigger_signals() {
  struct sigaction sa = {};
  sa.sa_handler = rt_signal_taken;
  sigemptyset(&sa.sa_mask);
  for (int sig = SIGRTMIN + 1; sig < SIGRTMAX; ++sig) {
    struct sigaction old = {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) sigaction(sig, &sa, nullptr);
  }
}

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
  // DPDK's own log says why a device was refused (the bus probe failing is not an rte_eal_init error):
  // capture it during init, copy it to stderr where it would have gone, keep it for the error message.
  if (std::any_of(args.begin(), args.end(), [](const std::string& a) { return absl::StrContains(a, "net_tap"); })) {
    take_tap_rx_trigger_signals();
  }
  char* buf = nullptr;
  size_t len = 0;
  FILE* capture = open_memstream(&buf, &len);
  if (capture != nullptr) rte_openlog_stream(capture);
  int rc = rte_eal_init(static_cast<int>(storage.size()), argv.data());
  int e = rte_errno;
  if (capture != nullptr) {
    rte_openlog_stream(nullptr);  // back to EAL's default stream
    std::fclose(capture);
    g_init_log.assign(buf, len);
    std::free(buf);
    std::fwrite(g_init_log.data(), 1, g_init_log.size(), stderr);
  }
  if (rc < 0) {
    if (err) *err = absl::StrCat("rte_eal_init failed: ", rte_strerror(e), log_excerpt(g_init_log, {}));
    return -(e > 0 ? e : EINVAL);
  }
  return static_cast<int>(rte_eth_dev_count_avail());
}

const std::string& eal_init_log() { return g_init_log; }

std::string log_excerpt(std::string_view log, std::span<const std::string> names) {
  std::vector<std::string_view> picked;
  for (std::string_view line : absl::StrSplit(log, '\n', absl::SkipWhitespace())) {
    std::string lower = absl::AsciiStrToLower(line);
    bool relevant = absl::StrContains(lower, "fail") || absl::StrContains(lower, "error") ||
                    absl::StrContains(lower, "cannot") || absl::StrContains(lower, "unable") ||
                    absl::StrContains(lower, "invalid") || absl::StrContains(lower, "not ");
    for (const std::string& n : names) relevant = relevant || absl::StrContains(line, n);
    if (relevant && picked.size() < 6) picked.push_back(absl::StripAsciiWhitespace(line));
  }
  if (picked.empty()) return "";
  return absl::StrCat(" (DPDK: ", absl::StrJoin(picked, " | "), ")");
}

}  // namespace kosoku::dpdk
