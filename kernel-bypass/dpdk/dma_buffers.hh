// DMA-able blocks for net::SharedBuffer on a port whose PMD reads frames by IOVA (a PCI NIC: virtio-net under
// uio_pci_generic in the appliance). Zero-copy TX chains a payload to its header frame by address (queue.hh);
// a device can only fetch it if the bytes are in DPDK memory with a known IOVA. One rte_mempool per core of
// `tx_zero_copy_buffers` (dpdk block, default 16: 4 MiB, a 4 MiB send buffer's worth, one fast download)
// blocks of kBlockBytes (256 KiB of data, core/static's largest read, plus the SharedBuffer header);
// mempool objects are IOVA-contiguous. When a core's pool is empty, SharedBuffer::make mallocs and those
// payloads are copied into the mbuf as before (Queue counts them in tx_payload_copied).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/net/shared_buffer.hh"

struct rte_mempool;

namespace kosoku::dpdk {

class DmaBufferPool final : public net::SharedBuffer::Source {
 public:
  static constexpr size_t kBlockBytes = 256 * 1024 + 64;

  /// Creates a pool of `blocks` blocks on `socket`; null (and *err says why) if DPDK memory is short.
  static DmaBufferPool* create(const char* name, int socket, unsigned blocks, std::string* err);
  ~DmaBufferPool();
  DmaBufferPool(const DmaBufferPool&) = delete;
  DmaBufferPool& operator=(const DmaBufferPool&) = delete;

  void* take(uint64_t* iova) override;
  void give(void* block) override;
  size_t block_bytes() const override { return kBlockBytes; }
  /// Blocks not in use now.
  unsigned available() const;

 private:
  explicit DmaBufferPool(rte_mempool* mp) : mp_(mp) {}
  rte_mempool* mp_;
};

}  // namespace kosoku::dpdk
