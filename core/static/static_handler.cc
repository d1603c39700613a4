#include "core/static/static_handler.hh"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/base/log.hh"
#include "core/disk/disk_queue.hh"
#include "core/disk/open_file_cache.hh"
#include "core/config/module.hh"
#include "core/http/conditional.hh"
#include "core/http/method_policy.hh"
#include "core/http/multipart.hh"
#include "core/http/response_step.hh"
#include "core/http/uri.hh"
#include "core/net/shared_buffer.hh"
#include "core/reactor/reactor.hh"
#include "core/static/static_conf.hh"

namespace kosoku::static_files {

namespace {

constexpr size_t kMaxBuffer = 256 * 1024;  // per read (sendfile_max_chunk caps it further)
constexpr size_t kMinRead = 16 * 1024;     // a read shorter than this (and than the rest) takes a fresh buffer

// One piece of the response body: literal text (multipart delimiters) or a byte range of the file.
using Piece = http::BodyPiece;

class StaticState final : public http::ContentState,
                          public disk::OpenRequest::Callback,
                          public disk::DiskCallback {
 public:
  explicit StaticState(http::Exchange& ex) : ex_(ex) {}
  ~StaticState() override { release_buffer(); }

  void start();

  // ContentState
  void on_abort() override {
    aborted_ = true;
    if (!open_in_flight_ && !read_in_flight_) ex_.release();
  }
  void on_writable() override {
    if (streaming_) pump();
  }
  /// The response is out: the file closes now unless open_file_cache keeps it, and the read buffer goes (the
  /// stream holds what it still sends), even while the request waits for the stream.
  void on_response_complete() override {
    release_buffer();   // no read buffer (nor a DMA block of the port's pool) on an idle connection
    open_.file.reset(); // nor the file's descriptor (unless open_file_cache keeps it, bounded by its max=)
  }
  // OpenRequest::Callback
  void on_open_done(disk::OpenRequest&) override {
    open_in_flight_ = false;
    if (aborted_) {
      open_.file.reset();
      ex_.release();
      return;
    }
    opened();
  }
  // DiskCallback
  void on_disk_done(disk::DiskOp& op) override {
    read_in_flight_ = false;
    if (aborted_) {
      ex_.release();
      return;
    }
    read_done(op.result);
    pump();
  }

 private:
  enum class Step { kTryFiles, kFile, kIndex };

  void lookup(std::string path);
  void opened();
  void next_try();
  void serve_file();
  void pump();
  void read_done(int32_t result);
  void send_head_if_pending() {
    if (head_pending_) {
      head_pending_ = false;
      ex_.send_head();
    }
  }
  void fail_open(int error);
  void release_buffer() {
    if (buf_ != nullptr) buf_->unref();
    buf_ = nullptr;
    buf_off_ = 0;
  }
  std::string map_uri(std::string_view uri, bool* ok) const;

  http::Exchange& ex_;
  disk::OpenRequest open_;
  disk::DiskOp read_op_;
  std::string path_;       // filesystem path being looked up
  std::string uri_;        // current URI (after try_files / index)
  Step step_ = Step::kFile;
  size_t try_index_ = 0;
  size_t index_index_ = 0;
  std::string dir_path_;   // directory of the index search
  bool try_dir_ = false;   // the current try_files entry ends with '/'

  // Streaming.
  std::string multipart_type_;
  std::vector<Piece> pieces_;
  size_t piece_ = 0;
  uint64_t piece_done_ = 0;
  // The buffer file reads go into: a shared buffer whose filled part the stream holds by reference
  // (write_shared), so the bytes read by io_uring are the bytes sent. Reads fill it from buf_off_ on until too
  // little room is left; then a fresh one is taken (the stream keeps the old one as long as it needs it).
  net::SharedBuffer* buf_ = nullptr;
  size_t buf_off_ = 0;
  size_t chunk_ = 0;
  uint32_t read_len_ = 0;
  bool streaming_ = false;
  bool head_pending_ = false;
  bool open_in_flight_ = false;
  bool read_in_flight_ = false;
  bool aborted_ = false;
};

std::string StaticState::map_uri(std::string_view uri, bool* ok) const {
  const config::LocationConf& loc = ex_.location();
  const std::string& prefix = ex_.core().prefix;
  std::string out;
  *ok = true;
  if (loc.alias.has_value()) {
    const std::string& alias = *loc.alias;
    if (alias.empty() || alias[0] != '/') out = prefix;
    out += alias;
    if (loc.match == config::LocationConf::Match::kRegex || loc.match == config::LocationConf::Match::kRegexCaseless) {
      // nginx: with a regex location, alias is the full path (captures are not supported yet).
      return out;
    }
    std::string_view rest = uri;
    if (absl::StartsWith(rest, loc.pattern)) rest.remove_prefix(loc.pattern.size());
    if (!rest.empty() && rest[0] == '/' && !out.empty() && out.back() == '/') rest.remove_prefix(1);
    out.append(rest.data(), rest.size());
    return out;
  }
  if (loc.root.empty() || loc.root[0] != '/') out = prefix;
  out += loc.root;
  if (!out.empty() && out.back() == '/') out.pop_back();
  out.append(uri.data(), uri.size());
  return out;
}

void StaticState::start() {
  uri_.assign(ex_.uri());
  const config::LocationConf& loc = ex_.location();
  if (!loc.try_files.empty()) {
    step_ = Step::kTryFiles;
    try_index_ = 0;
    next_try();
    return;
  }
  step_ = Step::kFile;
  bool ok;
  lookup(map_uri(uri_, &ok));
}

// try_files file ... uri|=code: each entry may use $uri (and $uri/ to test a directory).
void StaticState::next_try() {
  const std::vector<std::string>& tf = ex_.location().try_files;
  if (try_index_ + 1 >= tf.size()) {
    const std::string& last = tf.back();
    if (!last.empty() && last[0] == '=') {
      int code = std::atoi(last.c_str() + 1);
      ex_.respond(code > 0 ? code : 404);
      return;
    }
    // The last parameter is a URI or a named location: an internal redirect, searched as a request's (nginx's
    // try_files: `try_files $uri /index.php?$args;` reaches the location for /index.php). Nothing of this
    // state is touched after it.
    ex_.internal_redirect(absl::StrReplaceAll(last, {{"$uri", ex_.uri()}, {"$args", ex_.args()}}));
    return;
  }
  std::string entry = absl::StrReplaceAll(tf[try_index_], {{"$uri", uri_}});
  ++try_index_;
  try_dir_ = !entry.empty() && entry.back() == '/';
  if (try_dir_ && entry.size() > 1) entry.pop_back();
  bool ok;
  lookup(map_uri(entry, &ok));
}

void StaticState::lookup(std::string path) {
  path_ = std::move(path);
  const config::LocationConf& loc = ex_.location();
  disk::DiskQueue* q = ex_.core().queue(loc.aio_queue);
  open_.callback = this;
  open_.file.reset();
  open_.error = 0;
  switch (ex_.core().open_file_cache->open(path_, loc.open_file_cache, *q, loc.aio, open_)) {
    case disk::OpenFileCache::Result::kDone:
      opened();
      return;
    case disk::OpenFileCache::Result::kQueued:
      open_in_flight_ = true;
      return;
    case disk::OpenFileCache::Result::kOverflow:
      ex_.respond(503);
      return;
  }
}

void StaticState::fail_open(int error) {
  int status = 500;
  if (error == ENOENT || error == ENOTDIR || error == ENAMETOOLONG || error == ELOOP) {
    status = 404;
    if (ex_.location().module<StaticLocConf>().log_not_found) {
      KOSOKU_LOG(kError, "open() \"%s\" failed (%d: %s)", base::log_escaped(path_), error,
                 std::strerror(error));
    }
  } else if (error == EACCES || error == EPERM) {
    status = 403;
    KOSOKU_LOG(kError, "open() \"%s\" failed (%d: %s)", base::log_escaped(path_), error,
               std::strerror(error));
  } else {
    KOSOKU_LOG(kCrit, "open() \"%s\" failed (%d: %s)", base::log_escaped(path_), error,
               std::strerror(error));
  }
  ex_.respond(status);
}

void StaticState::opened() {
  if (step_ == Step::kTryFiles) {
    bool found = open_.error == 0 && open_.file && (try_dir_ ? open_.file->is_dir() : !open_.file->is_dir());
    if (!found) {
      next_try();
      return;
    }
    // A found entry is served as a file: only GET and HEAD (the fallback URI takes any method, as nginx's
    // try_files phase runs before the static module's check).
    if (http::refuse_unless_get_or_head(ex_)) return;
    // A "$uri/" entry that exists continues as a directory: index, or 301 to the slash form (as nginx).
    step_ = Step::kFile;
  }
  if (step_ == Step::kIndex) {
    if (open_.error == 0 && open_.file && !open_.file->is_dir()) {
      serve_file();
      return;
    }
    if (open_.error != 0 && open_.error != ENOENT && open_.error != ENOTDIR) {
      fail_open(open_.error);
      return;
    }
    const std::vector<std::string>& idx = ex_.location().module<StaticLocConf>().index;
    if (++index_index_ < idx.size()) {
      lookup(dir_path_ + idx[index_index_]);
      return;
    }
    KOSOKU_LOG(kError, "directory index of \"%s\" is forbidden", base::log_escaped(dir_path_));
    ex_.respond(403);
    return;
  }
  if (open_.error != 0) {
    fail_open(open_.error);
    return;
  }
  if (open_.file->is_dir()) {
    if (uri_.empty() || uri_.back() != '/') {
      // nginx: a directory without the trailing slash → 301 to the slash form (relative Location).
      std::string location;
      http::escape_path(uri_, location);
      location.push_back('/');
      if (!ex_.args().empty()) absl::StrAppend(&location, "?", ex_.args());
      ex_.redirect(301, location);
      return;
    }
    const std::vector<std::string>& idx = ex_.location().module<StaticLocConf>().index;
    if (idx.empty()) {
      ex_.respond(403);
      return;
    }
    dir_path_ = path_;
    if (dir_path_.back() != '/') dir_path_.push_back('/');
    step_ = Step::kIndex;
    index_index_ = 0;
    lookup(dir_path_ + idx[0]);
    return;
  }
  serve_file();
}

void StaticState::serve_file() {
  const disk::OpenFile& f = *open_.file.get();
  if (!S_ISREG(f.st().st_mode)) {
    ex_.respond(404);
    return;
  }
  // The index step changes $uri to the index file (nginx internal redirect); the MIME type follows it.
  std::string_view name = path_;
  size_t slash = name.rfind('/');
  if (slash != std::string_view::npos) name.remove_prefix(slash + 1);
  const config::LocationConf& loc = ex_.location();
  std::string_view type = loc.default_type;
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos && dot + 1 < name.size()) {
    char ext[32];
    std::string_view e = name.substr(dot + 1);
    if (e.size() < sizeof(ext)) {
      for (size_t i = 0; i < e.size(); ++i) ext[i] = absl::ascii_tolower(static_cast<unsigned char>(e[i]));
      auto it = loc.types->find(std::string_view(ext, e.size()));
      if (it != loc.types->end()) type = it->second;
    }
  }

  const uint64_t size = f.size();
  const int64_t mtime = f.st().st_mtim.tv_sec;
  http::ResponseHead& h = ex_.head();
  h.status = 200;
  h.content_type = type;
  h.last_modified = mtime;
  h.accept_ranges = true;
  if (loc.etag) {
    char etag[http::kEtagMaxLen];
    h.etag.assign(http::format_etag(mtime, size, etag));
  }

  const http::Request& req = ex_.request();
  http::Representation rep;
  rep.validators.etag = h.etag;
  rep.validators.last_modified = mtime;
  rep.length = static_cast<int64_t>(size);
  const http::ResponseStep step = http::evaluate_response(req, rep, loc.if_modified_since);
  pieces_.clear();
  piece_ = 0;
  piece_done_ = 0;
  http::apply_response_step(step, rep.length, static_cast<uint64_t>(ex_.core().reactor->now_ns()), h,
                            multipart_type_, pieces_);
  switch (step.outcome) {
    case http::ResponseOutcome::kPreconditionFailed:
    case http::ResponseOutcome::kRangeNotSatisfiable:
      ex_.respond(step.status());
      return;
    case http::ResponseOutcome::kNotModified:
      ex_.send_head();
      ex_.finish();
      return;
    case http::ResponseOutcome::kFull:
    case http::ResponseOutcome::kPartial:
      break;
  }
  if (req.method == http::Method::kHead || pieces_.empty()) {
    ex_.send_head();
    ex_.finish();
    return;
  }
  // The head goes out with the first body bytes: until the first read is accepted by the disk queue the
  // answer can still become a 503 (queue full), and head + first chunk leave in one send.
  head_pending_ = true;
  uint64_t chunk = loc.sendfile_max_chunk == 0 ? kMaxBuffer : loc.sendfile_max_chunk;
  if (chunk > kMaxBuffer) chunk = kMaxBuffer;
  chunk_ = static_cast<size_t>(chunk);
  streaming_ = true;
  pump();
}

// Moves the body forward: literal pieces are copied, file ranges are read by the disk queue (io_uring) into a
// shared buffer and handed to the stream by reference (write_shared): no copy on the way to the stream.
void StaticState::pump() {
  while (streaming_ && !read_in_flight_) {
    if (piece_ >= pieces_.size()) {
      streaming_ = false;
      ex_.finish();  // on_response_complete() lets go of the buffer and the file
      return;
    }
    Piece& p = pieces_[piece_];
    if (p.length == 0) {
      send_head_if_pending();
      ex_.write(p.text);
      ++piece_;
      continue;
    }
    // Read ahead at most one chunk beyond what the stream has taken: a chunk may wait in the stream while
    // the next is read, then reading waits for pending output to drop to a chunk (on_writable).
    if (ex_.pending_output() > chunk_) {
      ex_.set_low_water(chunk_);
      return;
    }
    uint64_t left = p.length - piece_done_;
    size_t want = left < chunk_ ? static_cast<size_t>(left) : chunk_;
    if (buf_ == nullptr || buf_->capacity() - buf_off_ < std::min(want, kMinRead)) {
      if (buf_ != nullptr) buf_->unref();
      buf_ = net::SharedBuffer::make(want < chunk_ && pieces_.size() == 1 ? want : chunk_);
      buf_off_ = 0;
    }
    want = std::min(want, buf_->capacity() - buf_off_);
    read_op_ = disk::DiskOp{};
    read_op_.kind = disk::DiskOp::Kind::kRead;
    read_op_.fd = open_.file->fd();
    read_op_.buf = buf_->data() + buf_off_;
    read_op_.len = static_cast<uint32_t>(want);
    read_op_.offset = p.offset + piece_done_;
    read_op_.callback = this;
    read_len_ = static_cast<uint32_t>(want);
    const config::LocationConf& loc = ex_.location();
    switch (ex_.core().queue(loc.aio_queue)->submit(read_op_, loc.aio)) {
      case disk::DiskQueue::Submit::kDone:
        read_done(read_op_.result);
        continue;
      case disk::DiskQueue::Submit::kQueued:
        read_in_flight_ = true;
        return;
      case disk::DiskQueue::Submit::kOverflow:
        streaming_ = false;
        if (head_pending_) {
          head_pending_ = false;
          ex_.head() = http::ResponseHead{};
          ex_.respond(503);
          return;
        }
        // The head is already out: the only honest answer left is to cut the connection.
        ex_.abort_response();
        return;
    }
  }
}

void StaticState::read_done(int32_t result) {
  // A short read is normal (RWF_NOWAIT returns what the page cache holds): the rest is read next. Zero means
  // the file shrank under us: the response cannot be completed honestly.
  if (result <= 0 || static_cast<uint32_t>(result) > read_len_) {
    KOSOKU_LOG(kCrit, "read() \"%s\" failed or file truncated while reading (%d)", base::log_escaped(path_),
               result);
    streaming_ = false;
    if (head_pending_) {
      head_pending_ = false;
      ex_.head() = http::ResponseHead{};
      ex_.respond(500);
      return;
    }
    ex_.abort_response();
    return;
  }
  send_head_if_pending();
  ex_.write_shared(*buf_, buf_->data() + buf_off_, static_cast<size_t>(result));
  buf_off_ += static_cast<size_t>(result);
  piece_done_ += static_cast<uint64_t>(result);
  if (piece_done_ == pieces_[piece_].length) {
    ++piece_;
    piece_done_ = 0;
  }
}

}  // namespace

void StaticHandler::handle(http::Exchange& ex) {
  // With try_files the method is checked once an entry is found (StaticState::opened).
  if (ex.location().try_files.empty() && http::refuse_unless_get_or_head(ex)) return;
  auto st = std::make_unique<StaticState>(ex);
  StaticState* s = st.get();
  ex.state() = std::move(st);
  s->start();
}

config::Module& module() {
  static config::Module m{
      .name = "static",
      .directives = directives(),
      .content = [](const config::LocationConf&) { return true; },
      .init_core = [](http::HttpServer&, std::string*) -> std::unique_ptr<http::ModuleCore> {
        return std::make_unique<StaticHandler>();
      },
  };
  return m;
}

}  // namespace kosoku::static_files
