// The fill side of the proxy cache (cache_fill.hh): the store decision for an origin response, the rewrite
// of an entry after a 304, and background updates.
#include "core/cache/cache_fill.hh"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/cache/cache_variables.hh"
#include "core/cache/tags.hh"
#include "core/cache/freshness.hh"
#include "core/http/conditional.hh"

namespace kosoku::cache {

std::optional<int64_t> stored_last_modified(std::span<const http::HeaderField> fields) {
  for (const http::HeaderField& f : fields) {
    if (f.token == http::HeaderToken::kLastModified) return http::parse_http_date(f.value);
  }
  return std::nullopt;
}

std::string_view first_field_value(std::span<const http::HeaderField> fields, http::HeaderToken t) {
  for (const http::HeaderField& f : fields) {
    if (f.token == t) return f.value;
  }
  return {};
}

// Parses stored lines as a response head (for freshness of a merged 304).
bool parse_stored(int status, std::string_view lines, std::string& text, http::HeaderField* fields, size_t nfields,
                  http::ParsedResponse& out) {
  text = absl::StrCat("HTTP/1.1 ", status, " X\r\n", lines, "\r\n");
  out.fields = std::span<http::HeaderField>(fields, nfields);
  http::ResponseLimits lim;
  lim.max_head = text.size() + 1;
  return http::parse_response_head(text, out, lim, false).status == http::ParseStatus::kComplete;
}

namespace {

// Copies the body of an entry into a new file with an updated header (a 304 revalidation, RFC 9111 §4.3.4):
// reads through the DiskQueue, paced by the writer. Owns itself.

class EntryRewriter final : public disk::DiskCallback {
 public:
  static void start(int fd, const EntryMeta& old, EntryMeta fresh, const StoreWriter::Target& t) {
    auto* r = new EntryRewriter(fd, old, t);
    r->writer_ = StoreWriter::start(t, std::move(fresh));
    r->writer_->set_progress([r] { r->next(); });
    r->next();
  }
  void on_disk_done(disk::DiskOp& op) override {
    in_flight_ = false;
    got(op.result);
    next();
  }

 private:
  static constexpr uint32_t kChunk = 128 * 1024;
  EntryRewriter(int fd, const EntryMeta& old, const StoreWriter::Target& t)
      : fd_(fd), offset_(old.header_size), size_(old.body_size), q_(*t.queue), aio_(t.aio) {
    buf_.resize(kChunk);
    op_.callback = this;
  }
  ~EntryRewriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Hands the writer over for good (it owns itself after finish()/abort()): never touched again.
  void release_writer(bool complete) {
    StoreWriter* w = writer_;
    if (w == nullptr) return;
    writer_ = nullptr;
    w->set_progress({});
    if (complete) {
      w->finish(static_cast<int64_t>(size_));
    } else {
      w->abort();
    }
  }
  void got(int32_t res) {
    if (writer_ == nullptr) return;
    if (res <= 0) {
      release_writer(false);
      return;
    }
    done_ += static_cast<uint64_t>(res);
    writer_->append(std::string_view(buf_.data(), static_cast<size_t>(res)));
  }
  void next() {
    if (busy_) return;  // re-entered from the writer's progress callback
    busy_ = true;
    while (!in_flight_ && writer_ != nullptr) {
      if (writer_->failed()) {
        release_writer(false);
        break;
      }
      if (done_ >= size_) {
        release_writer(true);
        break;
      }
      if (writer_->pending() > 2 * kChunk) break;  // the writer calls next() when it has written
      uint64_t left = size_ - done_;
      op_.kind = disk::DiskOp::Kind::kRead;
      op_.fd = fd_;
      op_.buf = buf_.data();
      op_.len = left < kChunk ? static_cast<uint32_t>(left) : kChunk;
      op_.offset = offset_ + done_;
      switch (q_.submit(op_, aio_)) {
        case disk::DiskQueue::Submit::kQueued:
          in_flight_ = true;
          break;
        case disk::DiskQueue::Submit::kOverflow:
          got(-EAGAIN);
          break;
        case disk::DiskQueue::Submit::kDone:
          got(op_.result);
          break;
      }
    }
    busy_ = false;
    if (!in_flight_ && writer_ == nullptr) delete this;
  }

  int fd_;
  uint64_t offset_;
  uint64_t size_;
  uint64_t done_ = 0;
  disk::DiskQueue& q_;
  config::AioMode aio_;
  disk::DiskOp op_;
  std::string buf_;
  StoreWriter* writer_ = nullptr;
  bool in_flight_ = false;
  bool busy_ = false;
};

}  // namespace

void rewrite_entry(int fd, const EntryMeta& old, EntryMeta fresh, const StoreWriter::Target& t) {
  EntryRewriter::start(fd, old, std::move(fresh), t);
}


std::string entry_tags(const CacheLocConf& cc, std::span<const http::HeaderField> fields, std::string_view key) {
  TagReport report;
  std::string tags = collect_tags(fields, cc.tags_headers, &report);
  if (report.any()) {
    KOSOKU_LOG(kWarn, "cache tags of \"%s\": %zu invalid and %zu past the limits (%zu tags, %zu bytes) dropped",
               base::log_escaped(key), report.invalid, report.over, kMaxEntryTags, kMaxEntryTagBytes);
  }
  return tags;
}

// ---------------------------------------------------------------- a 304 refreshes an entry

RefreshResult refresh_entry(const CacheLocConf& cc, const http::Request& req, const EntryMeta& old, int fd,
                            std::span<const http::HeaderField> fields304, int64_t request_time,
                            const StoreWriter::Target& t, EntryMeta& served) {
  CachePath& path = *t.path;
  const Hash128& hash = t.locked;
  auto unlock = [&] {
    if (!t.holds_lock) return;
    uint64_t w = path.zone().unlock(hash);
    if (w != 0) t.hub->notify(w, hash);
  };
  served = old;
  served.head = merge_304(old.head, fields304, "set-cookie");
  std::string text;
  http::HeaderField fields[100];
  http::ParsedResponse merged;
  StoreDecision d;
  if (parse_stored(old.status, served.head, text, fields, std::size(fields), merged)) {
    StoreInput in;
    in.status = old.status;
    in.fields = merged.headers();
    in.request = &req;
    in.conf = &cc;
    in.request_time = request_time;
    in.response_time = t.now_s;
    d = decide_store(in);
    served.etag.assign(first_field_value(merged.headers(), http::HeaderToken::kEtag));
    served.last_modified = stored_last_modified(merged.headers()).value_or(-1);
    served.tags = entry_tags(cc, merged.headers(), old.key);  // a 304 may bring new tags (RFC 9111 §4.3.4)
  } else {
    d.refusal = NotStored::kNoValidity;
  }
  if (d.storable() && d.vary == old.vary && !d.freshness.fresh(t.now_s)) {
    // Fresh for no time at all (max-age=0 with validators): every request revalidates anyway, so the entry is
    // not rewritten for nothing; this answer carries the merged head.
    served.freshness = d.freshness;
    unlock();
    if (fd >= 0) ::close(fd);
    return RefreshResult::kAnswerOnly;
  }
  if (d.storable() && d.vary == old.vary) {
    served.freshness = d.freshness;
    StoreWriter::Target w = t;
    if (!old.primary.zero()) {
      w.primary = old.primary;
      w.vary_id = path.zone().vary().intern(old.vary);
    }
    // The entry is valid again at once (a soft purge's mark ends); the rewritten file follows.
    path.zone().set_expires(hash, served.freshness.expires_at());
    if (fd >= 0) {
      rewrite_entry(fd, old, served, w);
    } else {
      unlock();
    }
    return RefreshResult::kRewritten;
  }
  // No longer storable after the merge: answer this once from the entry, then forget it.
  unlock();
  if (fd >= 0) ::close(fd);
  if (std::optional<EntryView> gone = path.zone().remove(hash); gone && gone->exists()) {
    remove_file_async(*t.queue, t.aio, path.path_of(hash));
  }
  served.freshness.response_time = t.now_s;
  served.freshness.corrected_initial_age = 0;
  return RefreshResult::kForgotten;
}

// ---------------------------------------------------------------- background updates

BackgroundFill::BackgroundFill(CacheModule& m, http::Exchange& client, CachePath& path, std::string key,
                               const Hash128& locked, const EntryMeta& stale, int stale_fd, bool revalidate)
    : mod_(m), path_(path), key_(std::move(key)), locked_(locked), stale_(stale), stale_fd_(stale_fd) {
  CacheFetch::Options opts;
  opts.head_to_get = true;
  revalidate_ = revalidate && (!stale_.etag.empty() || stale_.last_modified >= 0);
  if (revalidate_) {
    char date[http::kHttpDateLen];
    std::string_view lm =
        stale_.last_modified >= 0 ? http::format_http_date(stale_.last_modified, date) : std::string_view();
    opts.extra_fields = revalidation_fields(stale_.etag, lm);
  }
  no_cache_ = any_predicate(client.location().module<cache::CacheLocConf>().no_cache, client);
  fetch_ = std::make_unique<CacheFetch>(client, opts, true);
  request_time_ = m.reactor().wall_time();
  purge_seq_ = path.recent_purges().seq();
}

BackgroundFill::BackgroundFill(CacheModule& m, Adopted a, CachePath& path, std::string key, const Hash128& locked)
    : mod_(m), path_(path), key_(std::move(key)), locked_(locked), stale_fd_(a.stale_fd) {
  if (a.stale != nullptr) {
    stale_ = *a.stale;
    revalidate_ = !a.head_seen;
  }
  holds_lock_ = a.holds_lock;
  no_cache_ = a.no_cache;
  writer_ = a.writer;
  expected_ = a.expected;
  request_time_ = a.request_time;
  purge_seq_ = a.purge_seq;
  fetch_ = std::move(a.fetch);
  fetch_->hand_over(*this, tries_);
  // The fetch may have stopped reading the origin while the client was slow: it may go on now.
  fetch_->upstream().resume();
}

BackgroundFill::~BackgroundFill() {
  if (writer_ != nullptr) writer_->abort();
  release_lock();
  if (stale_fd_ >= 0) ::close(stale_fd_);
}

void BackgroundFill::start() { fetch_->start(mod_.proxy(), *this, tries_); }

StoreWriter::Target BackgroundFill::target() const {
  StoreWriter::Target t;
  t.path = &path_;
  t.hub = &mod_.registry()->wake_hub();
  t.queue = &mod_.queue_for(path_);
  t.aio = fetch_->location().aio;
  t.core = mod_.core();
  t.now_s = mod_.reactor().wall_time();
  t.holds_lock = holds_lock_;
  t.locked = locked_;
  t.purge_seq = purge_seq_;
  return t;
}

void BackgroundFill::on_upstream_head(const http::ParsedResponse& resp) {
  StoreWriter::Target t = target();
  if (revalidate_ && resp.status == 304) {
    char date[http::kHttpDateLen];
    std::string_view lm =
        stale_.last_modified >= 0 ? http::format_http_date(stale_.last_modified, date) : std::string_view();
    if (validators_match_304(resp.headers(), stale_.etag, lm)) {
      // REVALIDATED in the background: the stored body is kept, only its head and validity change.
      ++mod_.counters().revalidated;
      EntryMeta served;
      const int fd = stale_fd_;
      stale_fd_ = -1;
      holds_lock_ = false;  // refresh_entry takes the lock over
      refresh_entry(fetch_->location().module<cache::CacheLocConf>(), fetch_->request(), stale_, fd, resp.headers(), request_time_, t,
                    served);
      return;
    }
  }
  NotStored why;
  if (no_cache_) return;
  writer_ = begin_store(fetch_->location().module<CacheLocConf>(), fetch_->request(), path_, key_, hash_key(key_), resp,
                        request_time_, t.now_s, t, &why);
  if (writer_ != nullptr) holds_lock_ = false;
  expected_ = resp.framing == http::ResponseFraming::kContentLength ? static_cast<int64_t>(resp.content_length) : -1;
}

void BackgroundFill::on_upstream_data(const std::string_view* spans, size_t count, bool) {
  if (writer_ == nullptr) return;
  for (size_t i = 0; i < count; ++i) writer_->append(spans[i]);
}

void BackgroundFill::on_upstream_end() {
  if (writer_ != nullptr) {
    writer_->finish(expected_);
    writer_ = nullptr;
  }
  end();
}

void BackgroundFill::end() {
  finished_ = true;
  if (writer_ != nullptr) {
    writer_->abort();
    writer_ = nullptr;
  }
  release_lock();
}

void BackgroundFill::release_lock() {
  if (!holds_lock_) return;
  holds_lock_ = false;
  uint64_t w = path_.zone().unlock(locked_);
  if (w != 0) mod_.registry()->wake_hub().notify(w, locked_);
}

// ---------------------------------------------------------------- storing a response


// The store decision and, when storable, the writer for an origin response (CacheState and BackgroundFill).
// `req` is the request that selected the response (Authorization, no-store, the Vary secondary key).
StoreWriter* begin_store(const CacheLocConf& cc, const http::Request& req, CachePath& path,
                         const std::string& key, const Hash128& primary, const http::ParsedResponse& resp,
                         int64_t request_time, int64_t now, const StoreWriter::Target& base, NotStored* refusal,
                         StoreWriter::Done done) {
  *refusal = NotStored::kNo;
  StoreInput in;
  in.status = resp.status;
  in.fields = resp.headers();
  in.request = &req;
  in.conf = &cc;
  in.request_time = request_time;
  in.response_time = now;
  StoreDecision d = decide_store(in);
  if (!d.storable()) {
    *refusal = d.refusal;
    return nullptr;
  }
  StoreWriter::Target t = base;
  EntryMeta m;
  m.key = key;
  m.status = resp.status;
  m.freshness = d.freshness;
  m.etag.assign(first_field_value(resp.headers(), http::HeaderToken::kEtag));
  m.last_modified = stored_last_modified(resp.headers()).value_or(-1);
  stored_head_lines(resp.headers(), d.strip, m.head);
  m.tags = entry_tags(cc, resp.headers(), key);
  if (!d.vary.empty()) {
    uint16_t id = path.zone().vary().intern(d.vary);
    if (id == 0) {
      *refusal = NotStored::kVaryTooLong;
      return nullptr;
    }
    std::string material;
    vary_key_material(d.vary, req, material);
    m.hash = hash_variant(key, material);
    m.primary = primary;
    m.vary = d.vary;
    t.primary = primary;
    t.vary_id = id;
  } else {
    m.hash = primary;
  }
  return StoreWriter::start(t, std::move(m), std::move(done));
}





}  // namespace kosoku::cache
