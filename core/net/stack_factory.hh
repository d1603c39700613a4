// The hook through which a network backend outside core/ (kernel-bypass/, linked only into the kosoku
// executable) gives each worker its net::Stack, so core/worker.cc needs no DPDK symbol at link time.
// main() installs the DPDK factory before the workers start (`network dpdk`); the worker calls it on its own
// thread, after its Reactor exists. Unset: `network dpdk` is refused by the worker with a clear error.
#pragma once

#include <memory>
#include <string>

#include "core/config/conf.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::net {

/// Creates core `core`'s stack on that core's thread, registering its pollers/timers with `reactor`.
/// Returns nullptr with *err on failure.
using StackFactory = std::unique_ptr<Stack> (*)(reactor::Reactor& reactor, stats::CoreStats& stats,
                                                const config::MainConf& conf, int core, std::string* err);

/// The DPDK backend's factory (null unless main() installed one).
inline StackFactory& dpdk_stack_factory() {
  static StackFactory factory = nullptr;
  return factory;
}

}  // namespace kosoku::net
