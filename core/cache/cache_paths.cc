#include "core/cache/cache_paths.hh"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/cache/purge.hh"
#include "core/config/conf.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::cache {

namespace {

std::atomic<CacheRegistry*> g_registry{nullptr};

// mkdir -p, blocking (start-up only). 0 or -errno with *failed = the path that failed.
int make_dirs(const std::string& path, std::string* failed) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string part = path.substr(0, i);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      *failed = part;
      return -errno;
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *failed = path;
    return -ENOTDIR;
  }
  return 0;
}

}  // namespace

void CachePath::count_purge(const PurgeTarget& target, bool soft, const PurgeResult& r) {
  PurgeCounters& c = purge_counters_;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  switch (target.kind) {
    case PurgeTarget::Kind::kExact: c.exact.fetch_add(1, kRelaxed); break;
    case PurgeTarget::Kind::kPrefix:
    case PurgeTarget::Kind::kGlob: c.prefix.fetch_add(1, kRelaxed); break;
    case PurgeTarget::Kind::kAll: c.all.fetch_add(1, kRelaxed); break;
    case PurgeTarget::Kind::kTags: c.tags.fetch_add(1, kRelaxed); break;
  }
  if (soft) {
    c.soft.fetch_add(1, kRelaxed);
    c.soft_entries.fetch_add(r.removed, kRelaxed);
  } else {
    c.entries.fetch_add(r.removed, kRelaxed);
    c.bytes.fetch_add(r.bytes, kRelaxed);
  }
}

CachePath::CachePath(const CachePathConf& conf, std::string dir, int64_t now_s)
    : conf_(conf), dir_(std::move(dir)), zone_(conf.zone, conf.zone_size, now_s) {
  if (conf_.use_temp_path) temp_dir_ = dir_ + "/temp";
}

std::string CachePath::temp_path_for(const Hash128& h, int core) {
  uint64_t n = temp_seq_.fetch_add(1, std::memory_order_relaxed);
  if (conf_.use_temp_path) return absl::StrCat(temp_dir_, "/", to_hex(h), ".", core, ".", n);
  return absl::StrCat(path_of(h), ".", core, ".", n);
}

// ---- WakeHub (Vyukov's bounded MPMC queue, used with one consumer)

WakeHub::WakeHub(int cores) : cores_(cores > 0 ? cores : 1) {
  for (int i = 0; i < cores_; ++i) {
    auto in = std::make_unique<Inbox>();
    for (size_t j = 0; j < kCapacity; ++j) in->cells[j].seq.store(j, std::memory_order_relaxed);
    inboxes_.push_back(std::move(in));
  }
}

WakeHub::~WakeHub() = default;

void WakeHub::attach(int core, reactor::Reactor* r) {
  if (core >= 0 && core < cores_) inboxes_[static_cast<size_t>(core)]->reactor.store(r, std::memory_order_release);
}

bool WakeHub::push(Inbox& in, const Hash128& h) {
  size_t pos = in.head.load(std::memory_order_relaxed);
  for (;;) {
    Cell& c = in.cells[pos % kCapacity];
    size_t seq = c.seq.load(std::memory_order_acquire);
    intptr_t dif = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
    if (dif == 0) {
      if (in.head.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        c.h = h;
        c.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (dif < 0) {
      return false;  // full
    } else {
      pos = in.head.load(std::memory_order_relaxed);
    }
  }
}

bool WakeHub::pop(Inbox& in, Hash128* h) {
  size_t pos = in.tail.load(std::memory_order_relaxed);
  Cell& c = in.cells[pos % kCapacity];
  size_t seq = c.seq.load(std::memory_order_acquire);
  if (static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1) < 0) return false;  // empty
  *h = c.h;
  c.seq.store(pos + kCapacity, std::memory_order_release);
  in.tail.store(pos + 1, std::memory_order_relaxed);
  return true;
}

void WakeHub::notify(uint64_t mask, const Hash128& h) {
  for (int core = 0; core < cores_ && mask != 0; ++core) {
    uint64_t bit = 1ull << (core & 63);
    if ((mask & bit) == 0) continue;
    mask &= ~bit;
    Inbox& in = *inboxes_[static_cast<size_t>(core)];
    if (!push(in, h)) in.overflow.store(true, std::memory_order_release);
    if (reactor::Reactor* r = in.reactor.load(std::memory_order_acquire)) r->wake();
  }
}

// ---- CacheRegistry

std::unique_ptr<CacheRegistry> CacheRegistry::create(const config::MainConf& conf, std::string_view prefix,
                                                     int cores, int64_t now_s, std::string* err) {
  std::unique_ptr<CacheRegistry> reg(new CacheRegistry(cores));
  for (const CachePathConf& p : conf.http.module<cache::CacheHttpConf>().paths) {
    std::string dir = p.path;
    if (dir.empty() || dir[0] != '/') dir = absl::StrCat(prefix, dir);
    std::string failed;
    int rc = make_dirs(dir, &failed);
    if (rc == 0 && p.use_temp_path) rc = make_dirs(dir + "/temp", &failed);
    if (rc < 0) {
      if (err) *err = absl::StrCat("mkdir() \"", failed, "\" failed (", -rc, ": ", std::strerror(-rc), ")");
      return nullptr;
    }
    auto path = std::make_unique<CachePath>(p, dir, now_s);
    path->purge_log().open(dir, cores);
    reg->paths_.push_back(std::move(path));
  }
  return reg;
}

CachePath* CacheRegistry::find(std::string_view zone_name) {
  for (auto& p : paths_) {
    if (p->conf().zone == zone_name) return p.get();
  }
  return nullptr;
}

CacheRegistry* registry() { return g_registry.load(std::memory_order_acquire); }
void set_registry(CacheRegistry* r) { g_registry.store(r, std::memory_order_release); }

}  // namespace kosoku::cache
