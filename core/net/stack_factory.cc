#include "core/net/stack_factory.hh"

#include "core/net/kernel_stack.hh"

namespace kosoku::net {

namespace {
const char* kind_name(config::NetworkBackend kind) {
  return kind == config::NetworkBackend::kDpdk ? "dpdk" : "kernel";
}
}  // namespace

std::unique_ptr<Stack> KernelBackend::make_stack(reactor::Reactor& reactor, stats::CoreStats& stats,
                                                 const config::MainConf& conf, int core, std::string* err) {
  return std::make_unique<KernelStack>(reactor, stats, conf.worker_connections);
}

StackFactory::StackFactory() { add(config::NetworkBackend::kKernel, &kernel_); }

void StackFactory::add(config::NetworkBackend kind, Backend* backend) {
  backends_[static_cast<size_t>(kind)] = backend;
}

Backend* StackFactory::find(config::NetworkBackend kind) const {
  auto i = static_cast<size_t>(kind);
  return i < backends_.size() ? backends_[i] : nullptr;
}

std::unique_ptr<Stack> StackFactory::make(reactor::Reactor& reactor, stats::CoreStats& stats,
                                          const config::MainConf& conf, int core, std::string* err) const {
  Backend* b = find(conf.network.backend);
  if (b == nullptr) {
    if (err) *err = std::string("network ") + kind_name(conf.network.backend) + ": the backend was not started";
    return nullptr;
  }
  return b->make_stack(reactor, stats, conf, core, err);
}

}  // namespace kosoku::net
