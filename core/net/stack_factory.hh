// How a worker gets its net::Stack: one StackFactory, made by main() before the workers start and handed to
// each of them, maps the configuration's `network kernel|dpdk` (config::NetworkBackend) to the Backend that
// builds that core's stack. The kernel-socket backend (net/kernel_stack.hh) is always there; a backend outside
// core/ (the DPDK one, kernel-bypass/dpdk/backend.hh, linked only into the kosoku executable) is one object
// main() creates once and adds, so core/ names no DPDK symbol and links without DPDK.
//
// Lifetime: every Backend added outlives the workers (main() stops them first). Each worker calls make() on its
// own thread, after its Reactor exists; the factory is not changed once the workers start, so no lock is taken.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "core/config/conf.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/stats/counters.hh"

namespace kosoku::net {

/// A network backend: builds the stack of each core.
class Backend {
 public:
  virtual ~Backend() = default;
  /// Creates core `core`'s stack on that core's thread, registering its pollers/timers with `reactor`.
  /// Returns nullptr with *err on failure.
  virtual std::unique_ptr<Stack> make_stack(reactor::Reactor& reactor, stats::CoreStats& stats,
                                            const config::MainConf& conf, int core, std::string* err) = 0;
};

/// The kernel-socket backend: a KernelStack (io_uring sockets) per core.
class KernelBackend final : public Backend {
 public:
  std::unique_ptr<Stack> make_stack(reactor::Reactor& reactor, stats::CoreStats& stats,
                                    const config::MainConf& conf, int core, std::string* err) override;
};

class StackFactory {
 public:
  /// With the kernel-socket backend registered for `network kernel`.
  StackFactory();
  StackFactory(const StackFactory&) = delete;
  StackFactory& operator=(const StackFactory&) = delete;

  /// Registers `backend` (not owned; it outlives the workers) for `network <kind>`, replacing any other.
  void add(config::NetworkBackend kind, Backend* backend);
  /// The backend registered for `kind`, or null.
  Backend* find(config::NetworkBackend kind) const;
  /// Core `core`'s stack from the backend conf.network.backend names; nullptr with *err ("network dpdk: the
  /// backend was not started") when none is registered, or the backend's own error.
  std::unique_ptr<Stack> make(reactor::Reactor& reactor, stats::CoreStats& stats, const config::MainConf& conf,
                              int core, std::string* err) const;

 private:
  static constexpr size_t kKinds = 2;  // config::NetworkBackend: kKernel, kDpdk
  KernelBackend kernel_;
  std::array<Backend*, kKinds> backends_{};
};

}  // namespace kosoku::net
