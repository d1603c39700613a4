#include "kernel-bypass/dpdk/dma_buffers.hh"

#include <rte_errno.h>
#include <rte_mempool.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace kosoku::dpdk {

DmaBufferPool* DmaBufferPool::create(const char* name, int socket, unsigned blocks, std::string* err) {
  // No per-lcore cache: take/give run on the one core that owns the pool.
  rte_mempool* mp = rte_mempool_create(name, blocks, kBlockBytes, 0, 0, nullptr, nullptr, nullptr, nullptr, socket, 0);
  if (mp == nullptr) {
    if (err != nullptr) {
      *err = absl::StrCat("rte_mempool_create(", name, ", ", blocks, " x ", kBlockBytes, " B): ", rte_strerror(rte_errno),
                          " (tx_zero_copy_buffers: lower it or raise the hugepages)");
    }
    return nullptr;
  }
  return new DmaBufferPool(mp);
}

DmaBufferPool::~DmaBufferPool() { rte_mempool_free(mp_); }

void* DmaBufferPool::take(uint64_t* iova) {
  void* obj = nullptr;
  if (rte_mempool_get(mp_, &obj) != 0) return nullptr;
  *iova = rte_mempool_virt2iova(obj);
  if (*iova == RTE_BAD_IOVA) {  // no IOVA known for this memory: of no use to a device
    rte_mempool_put(mp_, obj);
    return nullptr;
  }
  return obj;
}

void DmaBufferPool::give(void* block) { rte_mempool_put(mp_, block); }

unsigned DmaBufferPool::available() const { return rte_mempool_avail_count(mp_); }

}  // namespace kosoku::dpdk
