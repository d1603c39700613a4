// net::SharedBuffer (core/net/shared_buffer.cc) at the end of a thread: buffers released on a thread go to that
// thread's cache; when the thread ends (a worker's loop thread at shutdown) the cache must go with it, or every
// worker leaks up to 16 buffers per size class at exit (LeakSanitizer then fails the sanitized server's exit
// code: "kosoku exited with 1 after SIGTERM" in test_conformance_static's teardown under make test).
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/net/shared_buffer.hh"

namespace kosoku::net {
namespace {

// A thread that made and released buffers (they sit in its cache) ends: its cache goes with it.
TEST(SharedBufferThreadExit, ThreadExitFreesItsCache) {
  size_t before = SharedBuffer::allocated_buffers();
  size_t cached_in_thread = 0;
  std::thread t([&] {
    std::vector<SharedBuffer*> held;
    for (size_t cap : {16u * 1024, 64u * 1024, 256u * 1024, 256u * 1024, 4u * 1024}) {
      SharedBuffer* b = SharedBuffer::make(cap);
      std::memset(b->data(), 0x5a, b->capacity());
      held.push_back(b);
    }
    for (SharedBuffer* b : held) b->unref();
    cached_in_thread = SharedBuffer::cached_buffers();
  });
  t.join();
  EXPECT_EQ(cached_in_thread, 5u);
  EXPECT_EQ(SharedBuffer::allocated_buffers(), before);
}

// A thread that never made a buffer but drops the last reference to one (it goes to that thread's cache) frees
// its cache when it ends too.
TEST(SharedBufferThreadExit, AThreadThatOnlyReleasesFreesItsCacheAtExit) {
  SharedBuffer* b = SharedBuffer::make(32 * 1024);
  size_t before = SharedBuffer::allocated_buffers();
  std::thread t([b] { b->unref(); });
  t.join();
  EXPECT_EQ(SharedBuffer::allocated_buffers(), before - 1);
}

// A buffer still referenced when its thread's cache has been freed (held by a thread_local that is destroyed
// after the cache's exit hook ran) is freed, not cached, when that last reference goes.
TEST(SharedBufferThreadExit, ReleasedAfterTheCacheIsGoneIsFreed) {
  size_t before = SharedBuffer::allocated_buffers();
  struct Holder {
    SharedBuffer* b = nullptr;
    ~Holder() {
      if (b != nullptr) b->unref();
    }
  };
  std::thread t([] {
    static thread_local Holder holder;  // constructed first: destroyed after the cache's exit hook
    holder.b = nullptr;
    SharedBuffer* b = SharedBuffer::make(64 * 1024);  // registers the exit hook
    b->unref();
    holder.b = SharedBuffer::make(128 * 1024);
  });
  t.join();
  EXPECT_EQ(SharedBuffer::allocated_buffers(), before);
}

}  // namespace
}  // namespace kosoku::net
