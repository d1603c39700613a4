// A reference-counted byte buffer, shared by whoever fills it and whoever sends it, so file data goes from an
// io_uring read to the wire without being copied: the static handler reads a chunk into it, hands it to the
// stream (Stream::write_shared), and kosoku's TCP keeps the buffer itself in its send buffer as the
// retransmission queue, its segments then point into it (zero-copy TX, tcpip::PacketIO::frame_send_payload).
// The kernel-socket backend sends from it in place. It is freed when the last holder lets go.
//
// Per core, like everything on the request path: the count is a plain integer, and ref()/unref() run on the
// core that made the buffer (the stream, the TX queue and the disk queue of that core). Buffers come from a
// per-core cache of recently freed ones (power-of-two sizes from 16 KiB to 256 KiB; bigger ones are allocated
// exactly and not cached), so a long transfer does not malloc, and fault in fresh pages, per chunk. A core whose
// DPDK port DMAs from memory (a PCI NIC) takes buffers over 64 KiB from the port's pool of DMA-able blocks
// first (Source), so their payloads can leave by reference there too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kosoku::net {

class SharedBuffer {
 public:
  static constexpr uint64_t kNoIova = ~uint64_t{0};

  /// Where make() takes large buffers from first on a core: memory a device can DMA from (a DPDK port's
  /// pool of IOVA-contiguous blocks, kernel-bypass/dpdk/dma_buffers.hh), so a NIC can send payloads straight
  /// out of them. Blocks of block_bytes() bytes; buffers of more than 64 KiB that fit in one come from it.
  class Source {
   public:
    /// A block and the IOVA of its first byte, or null when the source is empty (make() then mallocs).
    virtual void* take(uint64_t* iova) = 0;
    virtual void give(void* block) = 0;
    virtual size_t block_bytes() const = 0;

   protected:
    ~Source() = default;
  };
  /// Sets (or with null clears) the calling core's source.
  static void set_source(Source* source);

  /// A buffer of at least `capacity` bytes with one reference (the caller's). Aborts if memory runs out,
  /// like every allocation on the request path.
  static SharedBuffer* make(size_t capacity);

  char* data() { return data_; }
  const char* data() const { return data_; }
  /// Usable bytes at data() (>= the capacity asked for).
  size_t capacity() const { return cap_; }

  void ref() { ++refs_; }
  /// Drops one reference; the last one returns the buffer to the core's cache (or frees it).
  void unref() {
    if (--refs_ == 0) release();
  }
  uint32_t refs() const { return refs_; }
  /// The IOVA of data()[0] (the bytes are IOVA-contiguous), or kNoIova: ordinary memory, no device can DMA it.
  uint64_t iova() const { return iova_; }

  /// Counts the calling core's live buffers and their bytes (capacity) in *buffers / *bytes (the core's
  /// stats::CoreStats gauges, `shared_buffers` in the status JSON); null: not counted.
  static void set_stats(uint64_t* buffers, uint64_t* bytes);
  /// The calling core's cache: buffers held and their bytes (for tests and memory accounting).
  static size_t cached_buffers();
  static size_t cached_bytes();
  /// Heap buffers allocated and not yet freed, on all threads (held or cached): for tests and leak checks.
  static size_t allocated_buffers();
  /// Frees the calling core's cache. Also runs when the thread ends (after which buffers released on it are
  /// freed at once), so a worker's cache does not outlive its loop thread.
  static void trim_cache();

 private:
  SharedBuffer() = default;
  void release();

  SharedBuffer* next_ = nullptr;  // the cache's free list
  uint32_t refs_ = 1;
  uint32_t cap_ = 0;
  char* data_ = nullptr;          // right after this header
  Source* source_ = nullptr;      // the block came from this source (given back on release), or malloc
  uint64_t iova_ = kNoIova;
};

}  // namespace kosoku::net
