#include "core/cache/cache_store.hh"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_paths.hh"

namespace kosoku::cache {

namespace {

template <class T>
void put(std::string& out, size_t off, T v) {
  std::memcpy(out.data() + off, &v, sizeof(T));
}

template <class T>
T get(std::string_view in, size_t off) {
  T v;
  std::memcpy(&v, in.data() + off, sizeof(T));
  return v;
}

void put_hash(std::string& out, size_t off, const Hash128& h) {
  put(out, off, h.lo);
  put(out, off + 8, h.hi);
}

Hash128 get_hash(std::string_view in, size_t off) { return Hash128{get<uint64_t>(in, off), get<uint64_t>(in, off + 8)}; }

// nginx's line for a failed ngx_delete_file (crit); a file already gone is no failure.
void log_unlink_result(const disk::DiskOp& op) {
  if (op.result < 0 && op.result != -ENOENT) {
    KOSOKU_LOG(kCrit, "unlink() \"%s\" failed (%d: %s)", op.path, -op.result, std::strerror(-op.result));
  }
}

// A self-deleting unlink.
class Unlinker final : public disk::DiskCallback {
 public:
  void on_disk_done(disk::DiskOp& o) override {
    log_unlink_result(o);
    delete this;
  }
  disk::DiskOp op;
};

}  // namespace

std::string encode_header(EntryMeta& m) {
  size_t size = kFixedHeader + m.key.size() + m.etag.size() + m.vary.size() + m.head.size() + m.tags.size();
  std::string out(size, '\0');
  std::memcpy(out.data(), kEntryMagic, sizeof(kEntryMagic));
  put<uint32_t>(out, 8, kEntryVersion);
  put<uint32_t>(out, 12, static_cast<uint32_t>(size));
  put<uint64_t>(out, 16, m.body_size);
  put_hash(out, 24, m.hash);
  put_hash(out, 40, m.primary);
  const Freshness& f = m.freshness;
  put<int64_t>(out, 56, f.date);
  put<int64_t>(out, 64, f.request_time);
  put<int64_t>(out, 72, f.response_time);
  put<int64_t>(out, 80, f.corrected_initial_age);
  put<int64_t>(out, 88, f.lifetime);
  put<int64_t>(out, 96, f.stale_while_revalidate);
  put<int64_t>(out, 104, f.stale_if_error);
  put<int64_t>(out, 112, m.last_modified);
  put<uint32_t>(out, 120, f.flags);
  put<uint16_t>(out, 124, static_cast<uint16_t>(m.status));
  put<uint16_t>(out, 126, static_cast<uint16_t>(m.key.size()));
  put<uint16_t>(out, 128, static_cast<uint16_t>(m.etag.size()));
  put<uint16_t>(out, 130, static_cast<uint16_t>(m.vary.size()));
  put<uint32_t>(out, 132, static_cast<uint32_t>(m.head.size()));
  put<uint32_t>(out, 136, static_cast<uint32_t>(m.tags.size()));
  size_t off = kFixedHeader;
  for (const std::string* s : {&m.key, &m.etag, &m.vary, &m.head, &m.tags}) {
    std::memcpy(out.data() + off, s->data(), s->size());
    off += s->size();
  }
  m.header_size = static_cast<uint32_t>(size);
  return out;
}

DecodeStatus decode_header(std::string_view in, EntryMeta* m, size_t* needed) {
  if (in.size() < kFixedHeader) {
    *needed = kFixedHeader;
    return in.size() >= sizeof(kEntryMagic) && std::memcmp(in.data(), kEntryMagic, sizeof(kEntryMagic)) != 0
               ? DecodeStatus::kCorrupt
               : DecodeStatus::kNeedMore;
  }
  if (std::memcmp(in.data(), kEntryMagic, sizeof(kEntryMagic)) != 0 || get<uint32_t>(in, 8) != kEntryVersion) {
    return DecodeStatus::kCorrupt;
  }
  uint32_t size = get<uint32_t>(in, 12);
  size_t key_len = get<uint16_t>(in, 126), etag_len = get<uint16_t>(in, 128), vary_len = get<uint16_t>(in, 130);
  size_t head_len = get<uint32_t>(in, 132), tags_len = get<uint32_t>(in, 136);
  if (size > kMaxHeader || tags_len > kMaxHeader ||
      size != kFixedHeader + key_len + etag_len + vary_len + head_len + tags_len) {
    return DecodeStatus::kCorrupt;
  }
  if (in.size() < size) {
    *needed = size;
    return DecodeStatus::kNeedMore;
  }
  m->header_size = size;
  m->body_size = get<uint64_t>(in, 16);
  m->hash = get_hash(in, 24);
  m->primary = get_hash(in, 40);
  Freshness& f = m->freshness;
  f.date = get<int64_t>(in, 56);
  f.request_time = get<int64_t>(in, 64);
  f.response_time = get<int64_t>(in, 72);
  f.corrected_initial_age = get<int64_t>(in, 80);
  f.lifetime = get<int64_t>(in, 88);
  f.stale_while_revalidate = get<int64_t>(in, 96);
  f.stale_if_error = get<int64_t>(in, 104);
  m->last_modified = get<int64_t>(in, 112);
  f.flags = get<uint32_t>(in, 120);
  m->status = get<uint16_t>(in, 124);
  size_t off = kFixedHeader;
  m->key.assign(in.substr(off, key_len));
  off += key_len;
  m->etag.assign(in.substr(off, etag_len));
  off += etag_len;
  m->vary.assign(in.substr(off, vary_len));
  off += vary_len;
  m->head.assign(in.substr(off, head_len));
  off += head_len;
  m->tags.assign(in.substr(off, tags_len));
  if (m->status < 100 || m->status > 599) return DecodeStatus::kCorrupt;
  return DecodeStatus::kOk;
}

void remove_file_async(disk::DiskQueue& q, config::AioMode aio, std::string path) {
  auto* u = new Unlinker;
  u->op.kind = disk::DiskOp::Kind::kUnlink;
  u->op.path = std::move(path);
  u->op.callback = u;
  switch (q.submit(u->op, aio)) {
    case disk::DiskQueue::Submit::kQueued:
      return;
    case disk::DiskQueue::Submit::kDone:
      log_unlink_result(u->op);
      break;
    case disk::DiskQueue::Submit::kOverflow:
      KOSOKU_LOG(kCrit, "unlink() \"%s\" not done: disk queue \"%s\" overflow", u->op.path, q.name());
      break;
  }
  delete u;
}

// ---------------------------------------------------------------- StoreWriter
//
// One operation in flight at a time, driven by run(): open the temp file (creating the level directories on
// ENOENT), write the header placeholder and the body as it arrives, then on finish() rewrite the header with
// the final body size, close, rename into place (creating level directories on ENOENT) and commit to the zone.
// Any failure unlinks the temp file and releases the lock.

StoreWriter* StoreWriter::start(const Target& t, EntryMeta meta, Done done) {
  auto* w = new StoreWriter(t, std::move(meta), std::move(done));
  w->run();
  return w;
}

StoreWriter::StoreWriter(const Target& t, EntryMeta meta, Done done)
    : t_(t), meta_(std::move(meta)), done_(std::move(done)) {
  final_path_ = t_.path->path_of(meta_.hash);
  temp_path_ = t_.path->temp_path_for(meta_.hash, t_.core);
  meta_.body_size = 0;
  pending_ = encode_header(meta_);  // the placeholder header goes first
  op_.callback = this;
}

void StoreWriter::append(std::string_view data) {
  if (failed_ || phase_ == Phase::kFinished || finishing_) return;
  body_bytes_ += data.size();
  pending_.append(data);
  if (pending_.size() > kMaxPending) {
    fail(-ENOBUFS, "the disk is slower than the origin");
    run();
    return;
  }
  run();
}

bool StoreWriter::backlogged(const std::function<void()>& drained) {
  if (failed_ || owned_ || pending() <= kHighWater) return false;
  drained_ = drained;
  return true;
}

void StoreWriter::finish(int64_t expected_size) {
  owned_ = true;
  drained_ = nullptr;
  if (phase_ == Phase::kFinished) {
    maybe_delete();
    return;
  }
  finishing_ = true;
  expected_ = expected_size;
  if (expected_ >= 0 && static_cast<uint64_t>(expected_) != body_bytes_) {
    fail(-EIO, "the body size does not match Content-Length");
  }
  run();
}

void StoreWriter::abort() {
  owned_ = true;
  drained_ = nullptr;
  if (phase_ == Phase::kFinished) {
    maybe_delete();
    return;
  }
  if (!failed_) fail(-ECANCELED, {});
  run();
}

void StoreWriter::fail(int err, std::string_view what) {
  if (failed_) return;
  failed_ = true;
  if (!what.empty()) {
    KOSOKU_LOG(kError, "cache \"%s\": not storing \"%s\": %s (%d: %s)", t_.path->zone().name(),
               base::log_escaped(meta_.key), what, -err, std::strerror(-err));
  }
  release_lock();
}

void StoreWriter::release_lock() {
  if (!t_.holds_lock) return;
  t_.holds_lock = false;
  uint64_t waiters = t_.path->zone().unlock(t_.locked);
  if (waiters != 0 && t_.hub != nullptr) t_.hub->notify(waiters, t_.locked);
}

bool StoreWriter::next_op() {
  op_.kind = disk::DiskOp::Kind::kRead;
  if (failed_ && phase_ != Phase::kUnlink && phase_ != Phase::kFinished) {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    phase_ = created_ ? Phase::kUnlink : Phase::kFinished;
    if (phase_ == Phase::kFinished) complete(false);
  }
  switch (phase_) {
    case Phase::kOpen:
      op_.kind = disk::DiskOp::Kind::kOpen;
      op_.path = temp_path_;
      op_.flags = O_WRONLY | O_CREAT | O_EXCL;
      return true;
    case Phase::kMkdir: {
      // The next missing level directory: DIR/c, then DIR/c/29.
      std::string hex = to_hex(meta_.hash);
      const std::vector<uint8_t>& levels = t_.path->conf().levels;
      std::vector<uint8_t> first(levels.begin(), levels.begin() + static_cast<long>(mkdir_level_ + 1));
      op_.kind = disk::DiskOp::Kind::kMkdir;
      op_.path = absl::StrCat(t_.path->dir(), "/", level_dirs(first, hex));
      return true;
    }
    case Phase::kData:
      if (writing_.empty()) {
        if (pending_.empty()) {
          if (!finishing_) return false;  // wait for more body
          phase_ = Phase::kHeader;
          return next_op();
        }
        size_t n = pending_.size() < kWriteChunk ? pending_.size() : kWriteChunk;
        if (n == pending_.size()) {
          writing_.swap(pending_);
        } else {
          writing_.assign(pending_, 0, n);
          pending_.erase(0, n);
        }
      }
      op_.kind = disk::DiskOp::Kind::kWrite;
      op_.fd = fd_;
      op_.buf = writing_.data();
      op_.len = static_cast<uint32_t>(writing_.size());
      op_.offset = file_off_;
      return true;
    case Phase::kHeader:
      meta_.body_size = body_bytes_;
      header_ = encode_header(meta_);
      op_.kind = disk::DiskOp::Kind::kWrite;
      op_.fd = fd_;
      op_.buf = header_.data();
      op_.len = static_cast<uint32_t>(header_.size());
      op_.offset = 0;
      return true;
    case Phase::kRename:
      if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
      }
      op_.kind = disk::DiskOp::Kind::kRename;
      op_.path = temp_path_;
      op_.path2 = final_path_;
      return true;
    case Phase::kUnlink:
      op_.kind = disk::DiskOp::Kind::kUnlink;
      op_.path = temp_path_;
      return true;
    case Phase::kFinished:
      return false;
  }
  return false;
}

void StoreWriter::run() {
  if (running_) return;  // a callback inside the loop re-entered (inline completions are handled below)
  running_ = true;
  while (!in_flight_ && next_op()) {
    switch (t_.queue->submit(op_, t_.aio)) {
      case disk::DiskQueue::Submit::kQueued:
        in_flight_ = true;
        break;
      case disk::DiskQueue::Submit::kOverflow:
        on_result(-EAGAIN);
        break;
      case disk::DiskQueue::Submit::kDone:
        on_result(op_.result);
        break;
    }
  }
  running_ = false;
  maybe_delete();
}

void StoreWriter::on_disk_done(disk::DiskOp& op) {
  in_flight_ = false;
  on_result(op.result);
  const bool owned = owned_;
  run();
  if (owned || !drained_ || (!failed_ && pending() > kLowWater)) return;  // owned: run() may have deleted this
  std::function<void()> f = std::move(drained_);
  drained_ = nullptr;
  f();  // last: the producer may finish() or abort() (and so delete) this writer from here
}

void StoreWriter::on_result(int32_t res) {
  const size_t nlevels = t_.path->conf().levels.size();
  switch (phase_) {
    case Phase::kOpen:
      if (res >= 0) {
        fd_ = res;
        created_ = true;
        phase_ = Phase::kData;
        if (failed_) return;  // next_op() cleans up
      } else if (res == -ENOENT && !mkdir_tried_ && nlevels > 0) {
        mkdir_tried_ = true;
        after_mkdir_ = Phase::kOpen;
        mkdir_level_ = 0;
        phase_ = Phase::kMkdir;
      } else {
        fail(res, absl::StrCat("open() \"", temp_path_, "\" failed"));
        phase_ = Phase::kFinished;
        complete(false);
      }
      return;
    case Phase::kMkdir:
      if (res == 0 || res == -EEXIST) {
        if (++mkdir_level_ >= nlevels) phase_ = after_mkdir_;
      } else {
        fail(res, absl::StrCat("mkdir() \"", op_.path, "\" failed"));
        phase_ = after_mkdir_ == Phase::kOpen ? Phase::kFinished : Phase::kUnlink;
        if (phase_ == Phase::kFinished) complete(false);
      }
      return;
    case Phase::kData:
      if (res <= 0) {
        fail(res < 0 ? res : -EIO, absl::StrCat("write() \"", temp_path_, "\" failed"));
        return;
      }
      file_off_ += static_cast<uint64_t>(res);
      writing_.erase(0, static_cast<size_t>(res));
      if (progress_ && writing_.empty() && !running_) {
        std::function<void()> f = progress_;  // the callback may replace progress_ while it runs
        f();
      }
      return;
    case Phase::kHeader:
      if (res != static_cast<int32_t>(header_.size())) {
        fail(res < 0 ? res : -EIO, absl::StrCat("write() \"", temp_path_, "\" failed"));
        return;
      }
      phase_ = Phase::kRename;
      return;
    case Phase::kRename:
      if (res == 0) {
        created_ = false;
        commit();
        phase_ = Phase::kFinished;
        complete(true);
      } else if (res == -ENOENT && !mkdir_tried_ && nlevels > 0) {
        mkdir_tried_ = true;
        after_mkdir_ = Phase::kRename;
        mkdir_level_ = 0;
        phase_ = Phase::kMkdir;
      } else {
        fail(res, absl::StrCat("rename() \"", temp_path_, "\" to \"", final_path_, "\" failed"));
        phase_ = Phase::kUnlink;
      }
      return;
    case Phase::kUnlink:
      // The temp file of an abandoned entry; one left behind is removed by the next start's cache loader.
      if (res < 0 && res != -ENOENT) {
        KOSOKU_LOG(kCrit, "unlink() \"%s\" failed (%d: %s)", temp_path_, -res, std::strerror(-res));
      }
      created_ = false;
      phase_ = Phase::kFinished;
      complete(false);
      return;
    case Phase::kFinished:
      return;
  }
}

void StoreWriter::commit() {
  CacheZone& z = t_.path->zone();
  const int64_t now = t_.now_s;
  const Freshness& f = meta_.freshness;
  int64_t expires = (f.flags & kFlagAlwaysRevalidate) ? 0 : f.expires_at();
  uint64_t fs_size = meta_.header_size + meta_.body_size;
  std::optional<EntryView> evicted;
  auto drop = [&](std::optional<EntryView>& ev) {
    if (ev && ev->exists()) remove_file_async(*t_.queue, t_.aio, t_.path->path_of(ev->hash));
    ev.reset();
  };
  uint64_t waiters;
  if (t_.vary_id != 0) {
    uint64_t old_size = 0;
    z.set_primary(t_.primary, t_.vary_id, now, &evicted, &old_size);
    drop(evicted);
    if (old_size > 0) remove_file_async(*t_.queue, t_.aio, t_.path->path_of(t_.primary));
    z.keys().put(t_.primary, meta_.key);
    waiters = z.commit(meta_.hash, CacheZone::Commit{expires, fs_size, kEntryVariant, t_.primary.tag()}, now, &evicted);
  } else {
    waiters = z.commit(meta_.hash, CacheZone::Commit{expires, fs_size, 0, 0}, now, &evicted);
  }
  drop(evicted);
  z.keys().put(meta_.hash, meta_.key);
  if (!z.tags().put(meta_.hash, meta_.tags)) {
    const uint64_t n = z.tags().refused();
    if ((n & (n - 1)) == 0) {  // the 1st, 2nd, 4th, 8th... time: a full index does not flood the log
      KOSOKU_LOG(kWarn, "cache \"%s\": the tag index is full (%llu bytes), the tags of %llu entries are not indexed",
                 z.name(), static_cast<unsigned long long>(z.tags().bytes()), static_cast<unsigned long long>(n));
    }
  }
  // A purge that selects this response ran while it was fetched: what it fetched may be what the purge removed.
  if (t_.purge_seq != kNoPurgeSeq && t_.path->recent_purges().cover(meta_, t_.purge_seq)) {
    if (std::optional<EntryView> v = z.peek(meta_.hash); v && v->exists()) z.mark_stale(*v, now);
  }
  if (waiters != 0 && t_.hub != nullptr) t_.hub->notify(waiters, meta_.hash);
  if (t_.holds_lock && t_.locked == meta_.hash) t_.holds_lock = false;  // commit() released it
  release_lock();
}

void StoreWriter::complete(bool committed) {
  if (done_called_) return;
  done_called_ = true;
  if (!committed) release_lock();
  if (done_) done_(committed);
}

void StoreWriter::maybe_delete() {
  if (owned_ && !in_flight_ && !running_ && phase_ == Phase::kFinished) delete this;
}

// ---------------------------------------------------------------- EntryReader

EntryReader::~EntryReader() { close(); }

void EntryReader::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  step_ = Step::kNone;
}

void EntryReader::open(const std::string& path, const Hash128& hash, std::string_view key, disk::DiskQueue& q,
                       config::AioMode aio, Callback* cb) {
  close();
  cb_ = cb;
  q_ = &q;
  aio_ = aio;
  hash_ = hash;
  key_.assign(key);
  buf_len_ = 0;
  op_ = disk::DiskOp{};
  op_.kind = disk::DiskOp::Kind::kOpen;
  op_.path = path;
  op_.flags = O_NONBLOCK;
  op_.callback = this;
  step_ = Step::kOpen;
  submit_op();
}

void EntryReader::submit_read(char* dst, uint64_t file_off, uint32_t len) {
  op_.kind = disk::DiskOp::Kind::kRead;
  op_.fd = fd_;
  op_.buf = dst;
  op_.len = len;
  op_.offset = file_off;
  op_.callback = this;
  submit_op();
}

// Hands op_ to the disk queue: a queued op completes in on_disk_done, an inline one (page-cache hit) or an
// overflow (-EAGAIN) goes straight to step_done.
void EntryReader::submit_op() {
  switch (q_->submit(op_, aio_)) {
    case disk::DiskQueue::Submit::kQueued:
      in_flight_ = true;
      return;
    case disk::DiskQueue::Submit::kOverflow:
      step_done(-EAGAIN);
      return;
    case disk::DiskQueue::Submit::kDone:
      step_done(op_.result);
      return;
  }
}

void EntryReader::on_disk_done(disk::DiskOp& op) {
  in_flight_ = false;
  step_done(op.result);
}

void EntryReader::fail_open(int error) {
  close();
  cb_->on_entry_open(*this, error);
}

void EntryReader::step_done(int result) {
  switch (step_) {
    case Step::kOpen: {
      if (result < 0) {
        fail_open(result);
        return;
      }
      fd_ = result;
      file_size_ = static_cast<uint64_t>(op_.st.st_size);
      if (!S_ISREG(op_.st.st_mode) || file_size_ < kFixedHeader) {
        fail_open(-EINVAL);
        return;
      }
      size_t first = file_size_ < kFirstRead ? static_cast<size_t>(file_size_) : kFirstRead;
      if (buf_.size() < first) buf_.resize(kFirstRead);
      step_ = Step::kHeader;
      submit_read(buf_.data(), 0, static_cast<uint32_t>(first));
      return;
    }
    case Step::kHeader: {
      if (result <= 0) {
        fail_open(result < 0 ? result : -EINVAL);
        return;
      }
      buf_len_ += static_cast<size_t>(result);
      size_t needed = 0;
      switch (decode_header(std::string_view(buf_.data(), buf_len_), &meta_, &needed)) {
        case DecodeStatus::kCorrupt:
          fail_open(-EINVAL);
          return;
        case DecodeStatus::kNeedMore: {
          if (needed > file_size_ || needed > kMaxHeader) {
            fail_open(-EINVAL);
            return;
          }
          if (buf_.size() < needed) buf_.resize(needed);
          submit_read(buf_.data() + buf_len_, buf_len_, static_cast<uint32_t>(needed - buf_len_));
          return;
        }
        case DecodeStatus::kOk:
          break;
      }
      if (!(meta_.hash == hash_) || (!key_.empty() && meta_.key != key_) ||
          file_size_ != meta_.header_size + meta_.body_size) {
        fail_open(-EINVAL);
        return;
      }
      step_ = Step::kBody;
      cb_->on_entry_open(*this, 0);
      return;
    }
    case Step::kBody:
      step_ = Step::kBody;
      cb_->on_entry_data(*this, result > 0 ? std::string_view(dst_, static_cast<size_t>(result)) : std::string_view(),
                         result < 0 ? result : (result == 0 ? -EIO : 0));
      return;
    case Step::kNone:
      return;
  }
}

std::string_view EntryReader::prefetched() const {
  if (buf_len_ <= meta_.header_size) return {};
  size_t n = buf_len_ - meta_.header_size;
  if (n > meta_.body_size) n = static_cast<size_t>(meta_.body_size);
  return std::string_view(buf_.data() + meta_.header_size, n);
}

void EntryReader::read(uint64_t offset, char* dst, uint32_t len) {
  if (offset >= meta_.body_size || len == 0) {
    cb_->on_entry_data(*this, {}, 0);
    return;
  }
  uint64_t left = meta_.body_size - offset;
  if (len > left) len = static_cast<uint32_t>(left);
  std::string_view pre = prefetched();
  if (offset < pre.size()) {
    size_t n = pre.size() - static_cast<size_t>(offset);
    if (n > len) n = len;
    cb_->on_entry_data(*this, pre.substr(static_cast<size_t>(offset), n), 0);
    return;
  }
  dst_ = dst;
  submit_read(dst, meta_.header_size + offset, len);
}

}  // namespace kosoku::cache
