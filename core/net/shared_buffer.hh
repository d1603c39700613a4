// A reference-counted byte buffer, shared by whoever fills it and whoever sends it, so file data goes from an
// io_uring read to the wire without being copied: the static handler reads a chunk into it, hands it to the
// stream (Stream::write_shared), and kosoku's TCP keeps the buffer itself in its send buffer as the
// retransmission queue, its segments then point into it (zero-copy TX, tcpip::PacketIO::frame_send_payload).
// The kernel-socket backend sends from it in place. It is freed when the last holder lets go.
//
// Per core, like everything on the request path: the count is a plain integer, and ref()/unref() run on the
// core that made the buffer (the stream, the TX queue and the disk queue of that core). Buffers come from a
// per-core cache of recently freed ones (power-of-two sizes from 16 KiB to 256 KiB; bigger ones are allocated
// exactly and not cached), so a long transfer does not malloc, and fault in fresh pages, per chunk.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kosoku::net {

class SharedBuffer {
 public:
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

  /// The calling core's cache: buffers held and their bytes (for tests and memory accounting).
  static size_t cached_buffers();
  static size_t cached_bytes();
  /// Frees the calling core's cache.
  static void trim_cache();

 private:
  SharedBuffer() = default;
  void release();

  SharedBuffer* next_ = nullptr;  // the cache's free list
  uint32_t refs_ = 1;
  uint32_t cap_ = 0;
  char* data_ = nullptr;          // right after this header
};

}  // namespace kosoku::net
