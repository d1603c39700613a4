// OpenFileCache: nginx's open_file_cache on one core (semantics: open_file_cache.hh).
//
// Structure: absl::flat_hash_map from the path (a string_view into the entry's own copy) to the entry, plus
// an intrusive LRU list (head = most recently used). No locks: one cache per core.
//
// An entry holds: the open file (a FileRef: the cache's reference), or a cached error, or neither (a file
// looked up fewer than min_uses times: its uses are counted but the fd is not kept, as nginx closes it when
// the request ends); its use count; when it was last validated and last used.
//
// Lookup (open()):
//   - no entry: create it (evicting the least recently used one if size() >= max), open the path;
//   - an entry unused for its `inactive` ms: dropped first, then as above (uses restart at 1);
//   - a fresh entry (validated less than `valid` ms ago) with a file → hit; with an error and errors=on →
//     hit (the error is returned);
//   - a stale entry with a file → revalidate: stat the path through the disk queue and compare
//     (st_dev, st_ino, st_size, st_mtim) with the cached fstat; equal → the entry is valid again (the lookup
//     is answered with the cached fd), different (e.g. a file renamed over the path, or rewritten) → the
//     path is opened again and the new file replaces the old one (holders of the old FileRef keep the old
//     fd until they drop it);
//   - anything else (error entry when errors=off or stale, entry without a kept fd) → open the path.
//   Every disk operation goes through the core's DiskQueue; an open with the cache disabled or max=0 is a
//   plain open through the queue, and the returned FileRef owns the only reference (closing the fd).
// Concurrent lookups of one path: while a lookup of a path is in progress (its entry is "pending"), later
// requests for the same path do not start their own disk ops: they wait on the entry and are answered with
// the same result, right after the first request (callbacks in arrival order). Pending entries are never
// evicted or expired.
// Errors cached with errors=on: ENOENT, ENOTDIR, EACCES (the header's list; they describe the path, not the
// moment). Others (EMFILE, EIO, ELOOP, ...) and every error with errors=off drop the entry.
// Counters: ofc_hits = lookups answered from the cache at once (including cached errors); ofc_misses =
// lookups that needed a disk op or waited for another request's (opens, revalidations, waiters, overflows);
// ofc_entries = size(). Nothing is counted while the cache is disabled for a location.
// Files are opened O_RDONLY|O_NONBLOCK|O_CLOEXEC (nginx: NGX_FILE_RDONLY|NGX_FILE_NONBLOCK): opening a FIFO
// or a device never blocks the loop (the static handler then refuses non-regular files). O_NONBLOCK is
// cleared again on regular files with one fcntl, because io_uring turns a read of an O_NONBLOCK file
// whose filesystem lacks nowait support into -EAGAIN instead of waiting for the data.
// Mixed configurations: one cache per core serves every location; max, valid, min_uses and errors are
// taken from the location of each lookup; an entry keeps the `inactive` of its last lookup for expire().
// Shutdown rule: destroy the cache after its disk queues are drained (no lookup pending); FileRefs held by
// requests stay valid after the cache is gone.
#include "core/disk/open_file_cache.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/container/flat_hash_map.h"

namespace kosoku::disk {

void OpenFile::unref() {
  if (--refs_ == 0) delete this;
}

OpenFile::~OpenFile() {
  if (fd_ >= 0) close(fd_);
}

namespace {

constexpr int kOpenFlags = O_NONBLOCK;  // DiskQueue adds O_RDONLY|O_CLOEXEC

bool cacheable_error(int err) { return err == ENOENT || err == ENOTDIR || err == EACCES; }

bool same_file(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec;
}

// Wraps a freshly opened fd (see the O_NONBLOCK note in the header comment).
FileRef adopt_fd(int fd, const struct stat& st) {
  if (S_ISREG(st.st_mode)) fcntl(fd, F_SETFL, 0);
  return FileRef(new OpenFile(fd, st));
}

struct Entry {
  std::string path;
  FileRef file;  // the cache's reference; null: error entry, or fewer than min_uses uses
  int err = 0;   // cached errno (errors=on)
  uint32_t uses = 0;
  uint64_t validated_ms = 0;
  uint64_t accessed_ms = 0;
  uint64_t inactive_ms = 0;
  Entry* prev = nullptr;  // LRU, towards the head (more recent)
  Entry* next = nullptr;  // LRU, towards the tail (older)
  // A lookup in progress: the leader's queue and mode, and the requests waiting for its result.
  bool pending = false;
  bool doomed = false;  // remove once the pending lookup completes
  DiskQueue* queue = nullptr;
  config::AioMode mode = config::AioMode::kIoUring;
  OpenRequest* waiters_head = nullptr;
  OpenRequest* waiters_tail = nullptr;
};

}  // namespace

struct OpenFileCache::Impl final : DiskCallback {
  Impl(reactor::Reactor& r, stats::CoreStats& s) : reactor(r), stats(s) {}
  ~Impl() {
    while (lru_head != nullptr) remove(lru_head);
  }

  reactor::Reactor& reactor;
  stats::CoreStats& stats;
  absl::flat_hash_map<std::string_view, std::unique_ptr<Entry>> map;
  Entry* lru_head = nullptr;
  Entry* lru_tail = nullptr;
  uint64_t min_inactive_ms = UINT64_MAX;  // smallest `inactive` ever used: bounds the expire() scan

  void lru_unlink(Entry* e) {
    (e->prev ? e->prev->next : lru_head) = e->next;
    (e->next ? e->next->prev : lru_tail) = e->prev;
    e->prev = e->next = nullptr;
  }
  void lru_push_head(Entry* e) {
    e->prev = nullptr;
    e->next = lru_head;
    (lru_head ? lru_head->prev : lru_tail) = e;
    lru_head = e;
  }
  void touch(Entry* e, uint64_t now, uint64_t inactive_ms) {
    e->accessed_ms = now;
    e->inactive_ms = inactive_ms;
    if (inactive_ms < min_inactive_ms) min_inactive_ms = inactive_ms;
    if (lru_head != e) {
      lru_unlink(e);
      lru_push_head(e);
    }
  }
  void remove(Entry* e) {
    lru_unlink(e);
    map.erase(map.find(std::string_view(e->path)));  // destroys e (and drops the cache's FileRef)
    stats.ofc_entries = map.size();
  }
  bool expired(const Entry* e, uint64_t now) const {
    return !e->pending && now - e->accessed_ms >= e->inactive_ms;
  }
  // Removes up to `limit` expired entries from the LRU tail (nginx: ngx_expire_old_cached_files).
  void expire(uint64_t now, size_t limit) {
    for (Entry* e = lru_tail; e != nullptr && limit > 0;) {
      Entry* prev = e->prev;
      if (now - e->accessed_ms < min_inactive_ms) break;  // it and every more recent entry are still active
      if (expired(e, now)) {
        remove(e);
        --limit;
      }
      e = prev;
    }
  }
  // Makes room for one entry under `max` by evicting least recently used, non-pending entries.
  void make_room(uint32_t max) {
    for (Entry* e = lru_tail; e != nullptr && map.size() >= max;) {
      Entry* prev = e->prev;
      if (!e->pending) remove(e);
      e = prev;
    }
  }

  Result open(std::string_view path, const config::OpenFileCacheConf& conf, DiskQueue& queue,
              config::AioMode mode, OpenRequest& req);
  Result open_uncached(std::string_view path, DiskQueue& queue, config::AioMode mode, OpenRequest& req);
  void finish_uncached(OpenRequest& req);
  Result drive(Entry* e, OpenRequest& req);
  bool advance(Entry* e, OpenRequest& req);
  void complete_all(Entry* e, OpenRequest& leader);
  void on_disk_done(DiskOp& op) override;
};

OpenFileCache::Result OpenFileCache::Impl::open_uncached(std::string_view path, DiskQueue& queue,
                                                         config::AioMode mode, OpenRequest& req) {
  req.op_.kind = DiskOp::Kind::kOpen;
  req.op_.path.assign(path);
  req.op_.flags = kOpenFlags;
  switch (queue.submit(req.op_, mode)) {
    case DiskQueue::Submit::kQueued:
      return Result::kQueued;
    case DiskQueue::Submit::kOverflow:
      req.error = EAGAIN;
      return Result::kOverflow;
    case DiskQueue::Submit::kDone:
      break;
  }
  finish_uncached(req);
  return Result::kDone;
}

void OpenFileCache::Impl::finish_uncached(OpenRequest& req) {
  if (req.op_.result >= 0) {
    req.file = adopt_fd(req.op_.result, req.op_.st);
  } else {
    req.error = -req.op_.result;
  }
}

OpenFileCache::Result OpenFileCache::Impl::open(std::string_view path, const config::OpenFileCacheConf& conf,
                                                DiskQueue& queue, config::AioMode mode, OpenRequest& req) {
  req.file.reset();
  req.error = 0;
  req.next_waiter_ = nullptr;
  req.entry_ = nullptr;
  req.conf_ = &conf;
  req.op_.callback = this;
  req.op_.user_data = &req;
  if (!conf.enabled || conf.max == 0) return open_uncached(path, queue, mode, req);

  const uint64_t now = reactor.now_ms();
  expire(now, 2);
  Entry* e = nullptr;
  if (auto it = map.find(path); it != map.end()) {
    e = it->second.get();
    if (expired(e, now)) {
      remove(e);
      e = nullptr;
    }
  }
  if (e != nullptr) {
    ++e->uses;
    touch(e, now, conf.inactive_ms);
    if (e->pending) {
      req.entry_ = e;
      (e->waiters_tail ? e->waiters_tail->next_waiter_ : e->waiters_head) = &req;
      e->waiters_tail = &req;
      ++stats.ofc_misses;
      return Result::kQueued;
    }
    if (now - e->validated_ms < conf.valid_ms) {
      if (e->file) {
        req.file = e->file;
        ++stats.ofc_hits;
        return Result::kDone;
      }
      if (e->err != 0 && conf.errors) {
        req.error = e->err;
        ++stats.ofc_hits;
        return Result::kDone;
      }
    }
    // Stale, or nothing usable cached: revalidate a cached file with a stat, otherwise open.
    req.op_.kind = e->file ? DiskOp::Kind::kStat : DiskOp::Kind::kOpen;
  } else {
    make_room(conf.max);
    auto owned = std::make_unique<Entry>();
    e = owned.get();
    e->path.assign(path);
    e->uses = 1;
    map.emplace(std::string_view(e->path), std::move(owned));
    lru_push_head(e);
    touch(e, now, conf.inactive_ms);
    stats.ofc_entries = map.size();
    req.op_.kind = DiskOp::Kind::kOpen;
  }
  ++stats.ofc_misses;
  req.op_.path.assign(path);
  req.op_.flags = kOpenFlags;
  req.entry_ = e;
  e->pending = true;
  e->queue = &queue;
  e->mode = mode;
  Result r = drive(e, req);
  // Finished inline: no request can have joined (the entry was pending only inside this call).
  if (r != Result::kQueued && e->doomed) remove(e);
  return r;
}

// Submits req.op_ and processes inline completions until the lookup is queued or finished. On kDone and
// kOverflow the entry is no longer pending (kOverflow: req.error = EAGAIN); a doomed entry is left for the
// caller to remove.
OpenFileCache::Result OpenFileCache::Impl::drive(Entry* e, OpenRequest& req) {
  for (;;) {
    switch (e->queue->submit(req.op_, e->mode)) {
      case DiskQueue::Submit::kQueued:
        return Result::kQueued;
      case DiskQueue::Submit::kOverflow:
        req.file.reset();
        req.error = EAGAIN;
        e->pending = false;
        return Result::kOverflow;
      case DiskQueue::Submit::kDone:
        break;
    }
    if (advance(e, req)) {
      e->pending = false;
      return Result::kDone;
    }
  }
}

// Consumes the result of req.op_. Returns true when the lookup is finished (req.file / req.error set),
// false when req.op_ was set up for the next step (reopen after a changed stat).
bool OpenFileCache::Impl::advance(Entry* e, OpenRequest& req) {
  const config::OpenFileCacheConf& conf = *req.conf_;
  const DiskOp& op = req.op_;
  const uint64_t now = reactor.now_ms();
  int err;
  if (op.kind == DiskOp::Kind::kStat) {
    if (op.result == 0) {
      if (e->file && same_file(op.st, e->file->st())) {
        e->validated_ms = now;
        req.file = e->file;
        return true;
      }
      e->file.reset();  // replaced (or rewritten): open the path again
      req.op_.kind = DiskOp::Kind::kOpen;
      return false;
    }
    err = -op.result;
  } else if (op.result >= 0) {
    req.file = adopt_fd(op.result, op.st);
    e->err = 0;
    e->validated_ms = now;
    e->file = e->uses >= conf.min_uses ? req.file : FileRef();
    return true;
  } else {
    err = -op.result;
  }
  req.error = err;
  e->file.reset();
  if (conf.errors && cacheable_error(err)) {
    e->err = err;
    e->validated_ms = now;
  } else {
    e->doomed = true;
  }
  return true;
}

// The lookup of `e` finished (leader.file / leader.error set): answer the leader and every waiter.
void OpenFileCache::Impl::complete_all(Entry* e, OpenRequest& leader) {
  e->pending = false;
  OpenRequest* w = e->waiters_head;
  e->waiters_head = e->waiters_tail = nullptr;
  if (e->doomed) remove(e);
  for (OpenRequest* r = w; r != nullptr; r = r->next_waiter_) {
    r->file = leader.file;
    r->error = leader.error;
    r->entry_ = nullptr;
  }
  leader.entry_ = nullptr;
  leader.callback->on_open_done(leader);  // may free `leader`
  while (w != nullptr) {
    OpenRequest* next = w->next_waiter_;
    w->next_waiter_ = nullptr;
    w->callback->on_open_done(*w);  // may free `w`
    w = next;
  }
}

void OpenFileCache::Impl::on_disk_done(DiskOp& op) {
  OpenRequest& req = *static_cast<OpenRequest*>(op.user_data);
  Entry* e = static_cast<Entry*>(req.entry_);
  if (e == nullptr) {
    finish_uncached(req);
    req.callback->on_open_done(req);
    return;
  }
  if (!advance(e, req)) {
    Result r = drive(e, req);
    if (r == Result::kQueued) return;
    // kDone or kOverflow: drive() cleared pending; answer everyone below.
  }
  complete_all(e, req);
}

OpenFileCache::OpenFileCache(reactor::Reactor& reactor, stats::CoreStats& stats)
    : impl_(std::make_unique<Impl>(reactor, stats)) {}

OpenFileCache::~OpenFileCache() = default;

OpenFileCache::Result OpenFileCache::open(std::string_view path, const config::OpenFileCacheConf& conf,
                                          DiskQueue& queue, config::AioMode mode, OpenRequest& req) {
  req.cache_ = this;
  return impl_->open(path, conf, queue, mode, req);
}

void OpenFileCache::expire() { impl_->expire(impl_->reactor.now_ms(), SIZE_MAX); }

size_t OpenFileCache::size() const { return impl_->map.size(); }

}  // namespace kosoku::disk
