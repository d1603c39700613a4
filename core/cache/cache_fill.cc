// The fill side of the proxy cache (cache_fill.hh): the store decision for an origin response, the rewrite
// of an entry after a 304, and background updates.
#include "core/cache/cache_fill.hh"

#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/cache/cache_variables.hh"
#include "core/cache/fetch_observer.hh"
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
  lim.max_fields = nfields;
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


// ---------------------------------------------------------------- storing a response


// The store decision and, when storable, the writer for an origin response (CacheState and BackgroundFill).
// `req` is the request that selected the response (Authorization, no-store, the Vary secondary key).
StoreWriter* begin_store(const http::Exchange& ex, const http::Request& req, CachePath& path,
                         const std::string& key, const Hash128& primary, const http::ParsedResponse& resp,
                         int64_t request_time, int64_t now, const StoreWriter::Target& base, NotStored* refusal,
                         StoreWriter::Done done) {
  const CacheLocConf& cc = ex.location().cache;
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
