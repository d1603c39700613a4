// Per-core cache of open file descriptors and their metadata, with nginx's open_file_cache semantics
// (https://nginx.org/en/docs/http/ngx_http_core_module.html#open_file_cache):
//   max=N        at most N entries; the least recently used is evicted when full
//   inactive=T   an entry not used for T ms is removed
//   valid=T      (open_file_cache_valid) after T ms an entry is re-validated: the path is stat'ed again and
//                the fd replaced if the file changed (inode, size or mtime) — a file renamed over is noticed
//   min_uses=N   an entry is kept only after N uses within `inactive`
//   errors=on    ENOENT/EACCES/ENOTDIR lookups are cached too
// With the cache disabled every lookup opens (and the last FileRef closes) the file.
// Every open and stat goes through the core's DiskQueue (disk_queue.hh). Not thread-safe: one per core.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/config/conf.hh"
#include "core/disk/disk_queue.hh"
#include "core/stats/counters.hh"

namespace kosoku::disk {

/// An open file (or directory) with its metadata. Reference-counted (per core, non-atomic); the fd stays
/// open until the last reference is dropped, even if the cache evicted the entry.
class OpenFile {
 public:
  int fd() const { return fd_; }
  const struct stat& st() const { return st_; }
  bool is_dir() const { return S_ISDIR(st_.st_mode); }
  uint64_t size() const { return static_cast<uint64_t>(st_.st_size); }

  void ref() { ++refs_; }
  void unref();

  // Construction and refcount are the cache's business.
  OpenFile(int fd, const struct stat& st) : fd_(fd), st_(st) {}
  ~OpenFile();

 private:
  int fd_;
  struct stat st_;
  uint32_t refs_ = 1;
};

/// Intrusive smart pointer to an OpenFile.
class FileRef {
 public:
  FileRef() = default;
  explicit FileRef(OpenFile* f) : f_(f) {}  // adopts one reference
  FileRef(const FileRef& o) : f_(o.f_) { if (f_) f_->ref(); }
  FileRef(FileRef&& o) noexcept : f_(o.f_) { o.f_ = nullptr; }
  FileRef& operator=(FileRef o) noexcept { std::swap(f_, o.f_); return *this; }
  ~FileRef() { if (f_) f_->unref(); }
  OpenFile* get() const { return f_; }
  OpenFile* operator->() const { return f_; }
  explicit operator bool() const { return f_ != nullptr; }
  void reset() { if (f_) f_->unref(); f_ = nullptr; }

 private:
  OpenFile* f_ = nullptr;
};

/// A lookup in progress, owned by the caller (e.g. the static handler's request state).
class OpenRequest {
 public:
  class Callback {
   public:
    virtual void on_open_done(OpenRequest& req) = 0;

   protected:
    ~Callback() = default;
  };
  // outputs
  FileRef file;   // set on success
  int error = 0;  // errno on failure (ENOENT, EACCES, ENOTDIR, ELOOP, ENAMETOOLONG, ...); 0 on success
                 // EAGAIN after kQueued: the disk queue overflowed in a later step (answer 503, like kOverflow)
  Callback* callback = nullptr;

  // Internal to OpenFileCache.
  OpenRequest* next_waiter_ = nullptr;  // another request waiting for the same lookup
  void* entry_ = nullptr;               // the cache entry this request fills, if any
  DiskOp op_;
  std::string key_;
  class OpenFileCache* cache_ = nullptr;
  const config::OpenFileCacheConf* conf_ = nullptr;
};

class OpenFileCache {
 public:
  enum class Result { kDone, kQueued, kOverflow };

  OpenFileCache(reactor::Reactor& reactor, stats::CoreStats& stats);
  ~OpenFileCache();

  /// Look up `path` (absolute filesystem path) and open it read-only, following symlinks.
  /// kDone: `req.file` / `req.error` are set now. kQueued: `req.callback->on_open_done(req)` runs later on
  /// this core (req must stay alive until then). kOverflow: the disk queue is full (answer 503).
  Result open(std::string_view path, const config::OpenFileCacheConf& conf, DiskQueue& queue,
              config::AioMode mode, OpenRequest& req);

  /// Drop entries unused for longer than their `inactive` (called from a per-core timer, about 1/s).
  void expire();

  size_t size() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kosoku::disk
