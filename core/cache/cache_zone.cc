// CacheZone: the seqlock bucket table (design and memory ordering: cache_zone.hh).
//
// Memory ordering (the classic seqlock, Boehm "Can seqlocks get along with programming language memory
// models?" 2012): every slot word is a std::atomic<uint64_t> accessed with relaxed loads/stores, so concurrent
// reads and writes are not data races.
//   writer: CAS seq even→odd (acquire); fence(release); relaxed stores; seq.store(even+2, release)
//   reader: s1 = seq.load(acquire); relaxed loads; fence(acquire); s2 = seq.load(relaxed); retry if s1 odd
//           or s1 != s2
// A reader that saw s1 == s2 (even) read no store of an overlapping write section.
#include "core/cache/cache_zone.hh"

#include <sys/mman.h>

#include <cstring>
#include <new>

namespace kosoku::cache {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

constexpr uint64_t kStateEmpty = 0;
constexpr uint64_t kStateUsed = 1;

// meta word: state(8) | flags(8) | vary_id(16) | uses(32)
constexpr uint64_t pack_meta(uint64_t state, uint8_t flags, uint16_t vary_id, uint32_t uses) {
  return state | static_cast<uint64_t>(flags) << 8 | static_cast<uint64_t>(vary_id) << 16 |
         static_cast<uint64_t>(uses) << 32;
}
constexpr uint64_t meta_state(uint64_t m) { return m & 0xff; }
constexpr uint8_t meta_flags(uint64_t m) { return static_cast<uint8_t>(m >> 8); }
constexpr uint16_t meta_vary(uint64_t m) { return static_cast<uint16_t>(m >> 16); }
constexpr uint32_t meta_uses(uint64_t m) { return static_cast<uint32_t>(m >> 32); }

}  // namespace

struct CacheZone::Slot {
  std::atomic<uint64_t> lo{0};
  std::atomic<uint64_t> hi{0};
  std::atomic<uint64_t> expires{0};
  std::atomic<uint64_t> fs_size{0};
  std::atomic<uint64_t> parent{0};
  std::atomic<uint64_t> meta{0};
  std::atomic<uint64_t> last_access{0};  // written on hits without the flag (relaxed, LRU clock only)
  std::atomic<uint64_t> lock_until{0};
  std::atomic<uint64_t> waiters{0};

  EntryView view() const {
    EntryView v;
    v.hash.lo = lo.load(std::memory_order_relaxed);
    v.hash.hi = hi.load(std::memory_order_relaxed);
    v.expires_at = static_cast<int64_t>(expires.load(std::memory_order_relaxed));
    v.fs_size = fs_size.load(std::memory_order_relaxed);
    v.parent = parent.load(std::memory_order_relaxed);
    uint64_t m = meta.load(std::memory_order_relaxed);
    v.flags = meta_flags(m);
    v.vary_id = meta_vary(m);
    v.uses = meta_uses(m);
    v.last_access = static_cast<uint32_t>(last_access.load(std::memory_order_relaxed));
    v.lock_until_ms = lock_until.load(std::memory_order_relaxed);
    v.waiters = waiters.load(std::memory_order_relaxed);
    return v;
  }
  bool used() const { return meta_state(meta.load(std::memory_order_relaxed)) == kStateUsed; }
  bool is(const Hash128& h) const {
    return lo.load(std::memory_order_relaxed) == h.lo && hi.load(std::memory_order_relaxed) == h.hi && used();
  }
};

struct alignas(64) CacheZone::Bucket {
  std::atomic<uint32_t> seq{0};
  uint32_t pad = 0;
  Slot slots[kWays];
};
static_assert(sizeof(CacheZone::Bucket) == 512, "a bucket is 8 cache lines");

// ---- VaryTable

uint16_t VaryTable::intern(std::string_view names) {
  if (names.empty() || names.size() > sizeof(Item::names)) return 0;
  uint16_t n = count_.load(std::memory_order_acquire);
  for (uint16_t i = 1; i <= n; ++i) {
    if (get(i) == names) return i;
  }
  std::lock_guard<std::mutex> lk(mu_);
  n = count_.load(std::memory_order_relaxed);
  for (uint16_t i = 1; i <= n; ++i) {
    if (get(i) == names) return i;
  }
  if (n >= kMaxVaryLists) return 0;
  uint16_t id = static_cast<uint16_t>(n + 1);
  std::memcpy(items_[id].names, names.data(), names.size());
  items_[id].len.store(static_cast<uint8_t>(names.size()), std::memory_order_relaxed);
  count_.store(id, std::memory_order_release);  // publishes the bytes above
  return id;
}

std::string_view VaryTable::get(uint16_t id) const {
  if (id == 0 || id > count_.load(std::memory_order_acquire)) return {};
  return std::string_view(items_[id].names, items_[id].len.load(std::memory_order_relaxed));
}

// ---- KeyIndex

void KeyIndex::put(const Hash128& h, std::string_view key) {
  Shard& s = shards_[h.hi % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  auto [it, inserted] = s.keys.try_emplace(h);
  if (!inserted) bytes_.fetch_sub(it->second.size(), std::memory_order_relaxed);
  it->second.assign(key);
  bytes_.fetch_add(key.size(), std::memory_order_relaxed);
}

void KeyIndex::erase(const Hash128& h) {
  Shard& s = shards_[h.hi % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.keys.find(h);
  if (it == s.keys.end()) return;
  bytes_.fetch_sub(it->second.size(), std::memory_order_relaxed);
  s.keys.erase(it);
}

std::optional<std::string> KeyIndex::get(const Hash128& h) const {
  const Shard& s = shards_[h.hi % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  auto it = s.keys.find(h);
  if (it == s.keys.end()) return std::nullopt;
  return it->second;
}

void KeyIndex::for_each(const std::function<void(const Hash128&, std::string_view)>& f) const {
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lk(s.mu);
    for (const auto& [h, k] : s.keys) f(h, k);
  }
}

void KeyIndex::for_each_in_shard(size_t shard, const std::function<void(const Hash128&, std::string_view)>& f) const {
  const Shard& s = shards_[shard % kShards];
  std::lock_guard<std::mutex> lk(s.mu);
  for (const auto& [h, k] : s.keys) f(h, k);
}

size_t KeyIndex::size() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lk(s.mu);
    n += s.keys.size();
  }
  return n;
}

// ---- CacheZone

CacheZone::CacheZone(std::string name, uint64_t size_bytes, int64_t epoch_s)
    : name_(std::move(name)), epoch_s_(epoch_s) {
  tags_.set_budget(size_bytes);  // the tag index may take as much memory as the keys zone itself
  nbuckets_ = static_cast<size_t>(size_bytes / sizeof(Bucket));
  if (nbuckets_ < 1) nbuckets_ = 1;
  // mmap: zero pages on demand (a 1 GiB zone costs nothing until used), 64-byte aligned.
  void* mem = mmap(nullptr, nbuckets_ * sizeof(Bucket), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::bad_alloc();
  buckets_ = static_cast<Bucket*>(mem);
  for (size_t i = 0; i < nbuckets_; ++i) new (&buckets_[i]) Bucket();
}

CacheZone::~CacheZone() {
  for (size_t i = 0; i < nbuckets_; ++i) buckets_[i].~Bucket();
  munmap(buckets_, nbuckets_ * sizeof(Bucket));
}

CacheZone::Bucket& CacheZone::bucket_of(const Hash128& h) const { return buckets_[h.lo % nbuckets_]; }

uint32_t CacheZone::lock_bucket(Bucket& b) const {
  for (;;) {
    uint32_t s = b.seq.load(std::memory_order_relaxed);
    if ((s & 1) == 0 && b.seq.compare_exchange_weak(s, s + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      std::atomic_thread_fence(std::memory_order_release);
      return s;
    }
    cpu_relax();
  }
}

void CacheZone::unlock_bucket(Bucket& b, uint32_t seq) const { b.seq.store(seq + 2, std::memory_order_release); }

std::optional<EntryView> CacheZone::peek(const Hash128& h) const {
  const Bucket& b = bucket_of(h);
  for (;;) {
    uint32_t s1 = b.seq.load(std::memory_order_acquire);
    if (s1 & 1) {
      cpu_relax();
      continue;
    }
    std::optional<EntryView> found;
    for (const Slot& s : b.slots) {
      if (s.lo.load(std::memory_order_relaxed) == h.lo && s.hi.load(std::memory_order_relaxed) == h.hi &&
          s.used()) {
        found = s.view();
        break;
      }
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (b.seq.load(std::memory_order_relaxed) == s1) return found;
  }
}

std::optional<EntryView> CacheZone::lookup(const Hash128& h, int64_t now_s) {
  std::optional<EntryView> v = peek(h);
  if (v) {
    uint32_t now = relative_time(now_s);
    if (v->last_access != now) {
      // The LRU clock: a relaxed store outside the seqlock, only once per second per entry. If the slot was
      // reused meanwhile, the new entry merely looks used a moment ago.
      Bucket& b = bucket_of(h);
      for (Slot& s : b.slots) {
        if (s.lo.load(std::memory_order_relaxed) == h.lo && s.hi.load(std::memory_order_relaxed) == h.hi) {
          s.last_access.store(now, std::memory_order_relaxed);
          break;
        }
      }
      v->last_access = now;
    }
  }
  return v;
}

CacheZone::Slot* CacheZone::find_locked(Bucket& b, const Hash128& h) const {
  for (Slot& s : b.slots) {
    if (s.is(h)) return &s;
  }
  return nullptr;
}

void CacheZone::forget_indexes(const Hash128& h) {
  // Another core may have stored the hash again since its bucket was released: its key and tags stay.
  if (std::optional<EntryView> again = peek(h); again && (again->flags & (kEntryExists | kEntryPrimary))) return;
  keys_.erase(h);
  tags_.erase(h);
}

void CacheZone::drop_evicted_key(const std::optional<EntryView>* evicted) {
  if (evicted != nullptr && evicted->has_value()) forget_indexes((*evicted)->hash);
}

void CacheZone::clear_slot_locked(Slot& s) {
  uint64_t m = s.meta.load(std::memory_order_relaxed);
  if (meta_state(m) == kStateUsed) {
    entries_.fetch_sub(1, std::memory_order_relaxed);
    uint64_t sz = s.fs_size.load(std::memory_order_relaxed);
    if (sz > 0) bytes_.fetch_sub(sz, std::memory_order_relaxed);
  }
  s.meta.store(pack_meta(kStateEmpty, 0, 0, 0), std::memory_order_relaxed);
  s.lo.store(0, std::memory_order_relaxed);
  s.hi.store(0, std::memory_order_relaxed);
  s.expires.store(0, std::memory_order_relaxed);
  s.fs_size.store(0, std::memory_order_relaxed);
  s.parent.store(0, std::memory_order_relaxed);
  s.lock_until.store(0, std::memory_order_relaxed);
  s.waiters.store(0, std::memory_order_relaxed);
}

CacheZone::Slot* CacheZone::find_or_insert_locked(Bucket& b, const Hash128& h, int64_t now_s,
                                                  std::optional<EntryView>* evicted) {
  Slot* empty = nullptr;
  for (Slot& s : b.slots) {
    if (s.is(h)) return &s;
    if (empty == nullptr && !s.used()) empty = &s;
  }
  if (empty == nullptr) {
    // Victim: a placeholder without a lock first, then an expired entry, then the least recently used.
    // A slot holding a live lock is never evicted (its filler commits into it).
    auto rank = [&](const Slot& s) -> uint64_t {
      if (s.lock_until.load(std::memory_order_relaxed) != 0) return UINT64_MAX;
      uint8_t f = meta_flags(s.meta.load(std::memory_order_relaxed));
      uint64_t la = s.last_access.load(std::memory_order_relaxed);
      if ((f & (kEntryExists | kEntryPrimary)) == 0) return la;
      if ((f & kEntryExists) && static_cast<int64_t>(s.expires.load(std::memory_order_relaxed)) <= now_s) {
        return (1ull << 32) + la;
      }
      return (2ull << 32) + la;
    };
    Slot* victim = &b.slots[0];
    for (Slot& s : b.slots) {
      if (rank(s) < rank(*victim)) victim = &s;
    }
    if (rank(*victim) == UINT64_MAX) victim = &b.slots[0];  // every slot locked: the oldest lock loses
    if (evicted != nullptr) *evicted = victim->view();  // the caller drops its key after unlocking the bucket
    clear_slot_locked(*victim);
    empty = victim;
  }
  empty->lo.store(h.lo, std::memory_order_relaxed);
  empty->hi.store(h.hi, std::memory_order_relaxed);
  empty->last_access.store(relative_time(now_s), std::memory_order_relaxed);
  empty->meta.store(pack_meta(kStateUsed, 0, 0, 0), std::memory_order_relaxed);
  entries_.fetch_add(1, std::memory_order_relaxed);
  return empty;
}

EntryView CacheZone::count_use(const Hash128& h, int64_t now_s, std::optional<EntryView>* evicted) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_or_insert_locked(b, h, now_s, evicted);
  uint64_t m = s->meta.load(std::memory_order_relaxed);
  uint32_t uses = meta_uses(m);
  if (uses != UINT32_MAX) ++uses;
  s->meta.store(pack_meta(kStateUsed, meta_flags(m), meta_vary(m), uses), std::memory_order_relaxed);
  s->last_access.store(relative_time(now_s), std::memory_order_relaxed);
  EntryView v = s->view();
  unlock_bucket(b, seq);
  drop_evicted_key(evicted);
  return v;
}

uint64_t CacheZone::commit(const Hash128& h, const Commit& c, int64_t now_s, std::optional<EntryView>* evicted) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  if (c.only_if_absent) {
    Slot* cur = find_locked(b, h);
    if (cur != nullptr && ((meta_flags(cur->meta.load(std::memory_order_relaxed)) & (kEntryExists | kEntryPrimary)) ||
                           cur->lock_until.load(std::memory_order_relaxed) != 0)) {
      unlock_bucket(b, seq);
      return 0;
    }
  }
  Slot* s = find_or_insert_locked(b, h, now_s, evicted);
  uint64_t m = s->meta.load(std::memory_order_relaxed);
  uint64_t old = s->fs_size.load(std::memory_order_relaxed);
  s->expires.store(static_cast<uint64_t>(c.expires_at), std::memory_order_relaxed);
  s->fs_size.store(c.fs_size, std::memory_order_relaxed);
  s->parent.store(c.parent, std::memory_order_relaxed);
  uint8_t flags = static_cast<uint8_t>(kEntryExists | c.extra_flags);
  if ((meta_flags(m) & (kEntryStale | kEntryExists)) == kEntryStale && s->lock_until.load(std::memory_order_relaxed)) {
    // Purged while this fill ran (forget): stored, but stale from the start.
    flags |= kEntryStale;
    if (c.expires_at > now_s) s->expires.store(static_cast<uint64_t>(now_s), std::memory_order_relaxed);
  }
  uint16_t gen = gen_.fetch_add(1, std::memory_order_relaxed);
  if (gen == 0) gen = gen_.fetch_add(1, std::memory_order_relaxed);  // 0 never names a file version
  s->meta.store(pack_meta(kStateUsed, flags, gen, meta_uses(m)), std::memory_order_relaxed);
  s->last_access.store(relative_time(now_s), std::memory_order_relaxed);
  s->lock_until.store(0, std::memory_order_relaxed);
  uint64_t waiters = s->waiters.exchange(0, std::memory_order_relaxed);
  unlock_bucket(b, seq);
  drop_evicted_key(evicted);
  if (c.fs_size >= old) {
    bytes_.fetch_add(c.fs_size - old, std::memory_order_relaxed);
  } else {
    bytes_.fetch_sub(old - c.fs_size, std::memory_order_relaxed);
  }
  return waiters;
}

void CacheZone::set_primary(const Hash128& h, uint16_t vary_id, int64_t now_s, std::optional<EntryView>* evicted,
                            uint64_t* old_fs_size) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_or_insert_locked(b, h, now_s, evicted);
  uint64_t m = s->meta.load(std::memory_order_relaxed);
  uint64_t old = s->fs_size.load(std::memory_order_relaxed);
  if (old_fs_size != nullptr) *old_fs_size = (meta_flags(m) & kEntryExists) ? old : 0;
  s->fs_size.store(0, std::memory_order_relaxed);
  s->expires.store(0, std::memory_order_relaxed);
  s->parent.store(0, std::memory_order_relaxed);
  s->meta.store(pack_meta(kStateUsed, kEntryPrimary, vary_id, meta_uses(m)), std::memory_order_relaxed);
  s->last_access.store(relative_time(now_s), std::memory_order_relaxed);
  unlock_bucket(b, seq);
  drop_evicted_key(evicted);
  if (old > 0) bytes_.fetch_sub(old, std::memory_order_relaxed);
}

bool CacheZone::set_expires(const Hash128& h, int64_t expires_at) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, h);
  const bool complete = s != nullptr && (meta_flags(s->meta.load(std::memory_order_relaxed)) & kEntryExists);
  if (complete) {  // a placeholder (purged while revalidating) keeps its mark: the rewrite is stored stale
    s->expires.store(static_cast<uint64_t>(expires_at), std::memory_order_relaxed);
    const uint64_t m = s->meta.load(std::memory_order_relaxed);
    if (meta_flags(m) & kEntryStale) {
      s->meta.store(pack_meta(kStateUsed, static_cast<uint8_t>(meta_flags(m) & ~kEntryStale), meta_vary(m),
                              meta_uses(m)),
                    std::memory_order_relaxed);
    }
  }
  unlock_bucket(b, seq);
  return complete;
}

CacheZone::LockResult CacheZone::try_lock(const Hash128& h, uint64_t now_ms, uint64_t age_ms, int64_t now_s,
                                          std::optional<EntryView>* evicted) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_or_insert_locked(b, h, now_s, evicted);
  uint64_t until = s->lock_until.load(std::memory_order_relaxed);
  LockResult r = LockResult::kBusy;
  if (until == 0 || until <= now_ms) {
    s->lock_until.store(now_ms + (age_ms > 0 ? age_ms : 1), std::memory_order_relaxed);
    r = LockResult::kAcquired;
  }
  unlock_bucket(b, seq);
  drop_evicted_key(evicted);
  return r;
}

bool CacheZone::add_waiter(const Hash128& h, int core, uint64_t now_ms) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, h);
  bool held = s != nullptr && s->lock_until.load(std::memory_order_relaxed) > now_ms;
  if (held) s->waiters.fetch_or(1ull << (core & 63), std::memory_order_relaxed);
  unlock_bucket(b, seq);
  return held;
}

uint64_t CacheZone::unlock(const Hash128& h) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, h);
  uint64_t waiters = 0;
  if (s != nullptr) {
    s->lock_until.store(0, std::memory_order_relaxed);
    waiters = s->waiters.exchange(0, std::memory_order_relaxed);
    const uint64_t m = s->meta.load(std::memory_order_relaxed);
    if ((meta_flags(m) & (kEntryStale | kEntryExists)) == kEntryStale) {
      s->meta.store(pack_meta(kStateUsed, 0, meta_vary(m), meta_uses(m)), std::memory_order_relaxed);
    }
  }
  unlock_bucket(b, seq);
  return waiters;
}

std::optional<EntryView> CacheZone::remove(const Hash128& h) {
  Bucket& b = bucket_of(h);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, h);
  std::optional<EntryView> v;
  if (s != nullptr) {
    v = s->view();
    clear_slot_locked(*s);
  }
  unlock_bucket(b, seq);
  if (v) forget_indexes(h);
  return v;
}

std::optional<EntryView> CacheZone::remove_if_same(const EntryView& seen) {
  Bucket& b = bucket_of(seen.hash);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, seen.hash);
  std::optional<EntryView> v;
  if (s != nullptr && static_cast<int64_t>(s->expires.load(std::memory_order_relaxed)) == seen.expires_at &&
      s->fs_size.load(std::memory_order_relaxed) == seen.fs_size &&
      s->lock_until.load(std::memory_order_relaxed) == 0) {
    v = s->view();
    clear_slot_locked(*s);
  }
  unlock_bucket(b, seq);
  if (v) forget_indexes(seen.hash);
  return v;
}

std::optional<EntryView> CacheZone::forget(const EntryView& seen) {
  Bucket& b = bucket_of(seen.hash);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, seen.hash);
  std::optional<EntryView> v;
  bool cleared = false;
  if (s != nullptr) {
    const uint64_t m = s->meta.load(std::memory_order_relaxed);
    if (meta_flags(m) == seen.flags && meta_vary(m) == seen.vary_id &&
        static_cast<int64_t>(s->expires.load(std::memory_order_relaxed)) == seen.expires_at &&
        s->fs_size.load(std::memory_order_relaxed) == seen.fs_size) {
      v = s->view();
      if (s->lock_until.load(std::memory_order_relaxed) != 0) {
        if (v->fs_size > 0) bytes_.fetch_sub(v->fs_size, std::memory_order_relaxed);
        s->fs_size.store(0, std::memory_order_relaxed);
        s->expires.store(0, std::memory_order_relaxed);
        s->parent.store(0, std::memory_order_relaxed);
        s->meta.store(pack_meta(kStateUsed, kEntryStale, 0, meta_uses(m)), std::memory_order_relaxed);
      } else {
        clear_slot_locked(*s);
        cleared = true;
      }
    }
  }
  unlock_bucket(b, seq);
  if (cleared) forget_indexes(seen.hash);
  return v;
}

bool CacheZone::mark_stale(const EntryView& seen, int64_t at_s) {
  Bucket& b = bucket_of(seen.hash);
  uint32_t seq = lock_bucket(b);
  Slot* s = find_locked(b, seen.hash);
  bool marked = false;
  if (s != nullptr) {
    const uint64_t m = s->meta.load(std::memory_order_relaxed);
    const int64_t expires = static_cast<int64_t>(s->expires.load(std::memory_order_relaxed));
    if ((meta_flags(m) & ~kEntryStale) == (seen.flags & ~kEntryStale) && meta_vary(m) == seen.vary_id &&
        expires == seen.expires_at && s->fs_size.load(std::memory_order_relaxed) == seen.fs_size &&
        (meta_flags(m) & kEntryExists)) {
      s->meta.store(pack_meta(kStateUsed, static_cast<uint8_t>(meta_flags(m) | kEntryStale), meta_vary(m),
                              meta_uses(m)),
                    std::memory_order_relaxed);
      if (expires > at_s) s->expires.store(static_cast<uint64_t>(at_s), std::memory_order_relaxed);
      marked = true;
    } else if ((meta_flags(m) & (kEntryExists | kEntryPrimary)) == 0 &&
               s->lock_until.load(std::memory_order_relaxed) != 0) {
      // A fill in flight: what it stores is stale from the start (commit).
      s->meta.store(pack_meta(kStateUsed, static_cast<uint8_t>(meta_flags(m) | kEntryStale), meta_vary(m),
                              meta_uses(m)),
                    std::memory_order_relaxed);
    }
  }
  unlock_bucket(b, seq);
  return marked;
}

size_t CacheZone::sweep(size_t max_buckets, const std::function<bool(const EntryView&)>& pick,
                        std::vector<EntryView>* out) {
  size_t n = max_buckets < nbuckets_ ? max_buckets : nbuckets_;
  size_t start = sweep_hand_.fetch_add(n, std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    Bucket& b = buckets_[(start + i) % nbuckets_];
    uint32_t seq = lock_bucket(b);
    for (Slot& s : b.slots) {
      if (!s.used()) continue;
      EntryView v = s.view();
      if (v.lock_until_ms != 0) continue;  // being filled: never swept away under the filler
      if (pick(v)) {
        out->push_back(v);
        clear_slot_locked(s);
      }
    }
    unlock_bucket(b, seq);
  }
  for (const EntryView& v : *out) forget_indexes(v.hash);
  return n;
}

std::optional<EntryView> CacheZone::evict_lru(size_t window) {
  size_t n = window < nbuckets_ ? window : nbuckets_;
  size_t start = evict_hand_.load(std::memory_order_relaxed);
  // Find the oldest complete entry in the window (seqlock reads), then remove it if unchanged.
  std::optional<EntryView> best;
  for (size_t i = 0; i < n; ++i) {
    const Bucket& b = buckets_[(start + i) % nbuckets_];
    for (;;) {
      uint32_t s1 = b.seq.load(std::memory_order_acquire);
      if (s1 & 1) {
        cpu_relax();
        continue;
      }
      std::optional<EntryView> local;
      for (const Slot& s : b.slots) {
        if (!s.used()) continue;
        EntryView v = s.view();
        if (!(v.flags & kEntryExists) || v.lock_until_ms != 0) continue;
        if (!local || v.last_access < local->last_access) local = v;
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (b.seq.load(std::memory_order_relaxed) != s1) continue;
      if (local && (!best || local->last_access < best->last_access)) best = local;
      break;
    }
  }
  if (n < nbuckets_) evict_hand_.store((start + n / 2 + 1) % nbuckets_, std::memory_order_relaxed);
  if (!best) return std::nullopt;
  return remove_if_same(*best);
}

void CacheZone::for_each(const std::function<void(const EntryView&)>& f) const { for_each_in(0, nbuckets_, f); }

void CacheZone::for_each_in(size_t first, size_t last, const std::function<void(const EntryView&)>& f) const {
  std::vector<EntryView> views;
  for (size_t i = first; i < last && i < nbuckets_; ++i) {
    const Bucket& b = buckets_[i];
    for (;;) {
      views.clear();
      uint32_t s1 = b.seq.load(std::memory_order_acquire);
      if (s1 & 1) {
        cpu_relax();
        continue;
      }
      for (const Slot& s : b.slots) {
        if (s.used()) views.push_back(s.view());
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (b.seq.load(std::memory_order_relaxed) == s1) break;
    }
    for (const EntryView& v : views) f(v);
  }
}

}  // namespace kosoku::cache
