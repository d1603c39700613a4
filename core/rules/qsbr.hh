// Quiescent-state-based reclamation (QSBR, as in Linux RCU / liburcu-qsbr) for the rule set's shards.
//
// Readers (the per-core loops) read published pointers with plain acquire loads and hold them only inside
// one piece of work (one request's decision). Once per loop iteration, at a point where the loop holds no
// such pointer, it announces a quiescent state: it copies the global epoch into its own cache-line-sized
// slot — a load and, only when the epoch moved, a store; never a lock or an atomic read-modify-write.
// A writer that unpublishes an object advances the epoch to E and retires the object tagged E; the object
// may be freed once every online reader has announced an epoch >= E (each has passed a quiescent point
// after the unpublication, so none can still see it).
//
// Ordering: the writer's store of the new pointer precedes its epoch increment (seq_cst RMW); a reader that
// loads (acquire) an epoch >= E afterwards sees the new pointer; its release store of `seen` orders all its
// earlier reads of the old object before the writer's acquire load of `seen`, and so before the free.
// A thread that blocks for a long time (not a loop) goes offline() and comes back online() with a seq_cst
// store + fence (the Dekker pair with the writer's seq_cst epoch increment and `seen` load).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>

namespace kosoku::rules {

class Qsbr {
 public:
  static constexpr uint64_t kOffline = UINT64_MAX;

  /// A reader's slot (one per thread).
  struct alignas(64) Reader {
    std::atomic<uint64_t> seen{kOffline};
    bool used = false;
  };

  /// Registers a reader, online at the current epoch. Any thread; not on the request path.
  Reader* enroll();
  /// Unregisters (the slot is reused). The reader must hold no protected pointer.
  void leave(Reader* r);

  /// The quiescent point: `r` holds no protected pointer now. Hot path (once per loop iteration).
  void quiescent(Reader* r) const {
    uint64_t e = epoch_.load(std::memory_order_acquire);
    if (r->seen.load(std::memory_order_relaxed) != e) r->seen.store(e, std::memory_order_release);
  }
  /// Around a blocking section: the reader holds nothing while offline.
  void offline(Reader* r) const { r->seen.store(kOffline, std::memory_order_release); }
  void online(Reader* r) const {
    r->seen.store(epoch_.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  /// Writer: call after unpublishing; returns the epoch E to tag the retired objects with.
  uint64_t advance() { return epoch_.fetch_add(1, std::memory_order_seq_cst) + 1; }
  /// Smallest epoch announced by an online reader (kOffline if none is online): every object retired with
  /// an epoch <= this may be freed.
  uint64_t min_seen() const;
  uint64_t epoch() const { return epoch_.load(std::memory_order_acquire); }

 private:
  alignas(64) std::atomic<uint64_t> epoch_{1};
  mutable std::mutex mu_;  // readers_ membership (enroll/leave/min_seen): never on the request path
  std::deque<Reader> readers_;
};

}  // namespace kosoku::rules
