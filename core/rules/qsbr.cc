#include "core/rules/qsbr.hh"

namespace kosoku::rules {

Qsbr::Reader* Qsbr::enroll() {
  std::lock_guard<std::mutex> lock(mu_);
  Reader* r = nullptr;
  for (Reader& slot : readers_) {
    if (!slot.used) {
      r = &slot;
      break;
    }
  }
  if (r == nullptr) r = &readers_.emplace_back();
  r->used = true;
  online(r);
  return r;
}

void Qsbr::leave(Reader* r) {
  std::lock_guard<std::mutex> lock(mu_);
  r->seen.store(kOffline, std::memory_order_release);
  r->used = false;
}

uint64_t Qsbr::min_seen() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t m = kOffline;
  for (const Reader& r : readers_) {
    if (!r.used) continue;
    uint64_t s = r.seen.load(std::memory_order_seq_cst);
    if (s < m) m = s;
  }
  return m;
}

}  // namespace kosoku::rules
