// libFuzzer target for HTTP/2 (core/http2/): the bytes a client sends after the connection preface, through
// the real accept path — HttpServer::on_accept makes the HTTP/1.1 connection, which reads the preface and hands
// the stream to an Http2Connection (ModuleCore::take_stream, Stream::set_handler) — and the real loop: a
// reactor::Reactor (io_uring) runs the connection's posted tasks and timers; this target is one of its pollers
// and plays the network backend from there (the role of step 2's completions), so every callback comes from
// the loop as in a worker.
//
// Input: byte 0 selects how the client behaves (flags below), byte 1 seeds the choices made along the way
// (slice sizes, when output drains, when time passes); the rest follows the 24-byte client preface as the
// client's bytes (frames), fed in slices. The configuration (below) serves `return` locations, a static file
// location (a temporary directory made at start), the `status` page and the rules admin API (PUT: a handler
// that reads the request body); small windows, chunk and receive-buffer sizes make flow control, DATA
// splitting and multi-step decoding happen with small inputs.
//
// The memory stream lends nothing early: write_ref bytes are copied only when they are "sent", SharedBuffer
// pieces are held by reference until then, and the stream is deleted right after on_closed, so a connection
// that touches the stream, or bytes it lent, too late is an ASan report. Each input ends with the peer's FIN
// (or a reset) and every object must be freed (the connection deletes itself; LeakSanitizer checks the rest).
//
// Invariants (abort with a message): what the server wrote, once it took HTTP/2, is a sequence of whole
// HTTP/2 frames starting with SETTINGS; only frame types a server sends, with valid stream ids, flags and
// lengths; HEADERS+CONTINUATION blocks that HPACK-decode (a :status first, lower-case names, no
// connection-specific fields); DATA only after a response head, never after END_STREAM, at most
// http2_chunk_size long and adding up to the Content-Length; no response started on a stream above a GOAWAY's
// last stream id; the stream's unsent output stays bounded; the connection is freed after on_closed.
//
// Seeds: tests/fuzz/corpus/http2_frames/ (made by tests/fuzz/http2_frames_seeds.py).
// Run: ./http2_frames_fuzz tests/fuzz/corpus/http2_frames -dict=tests/fuzz/http2_frames.dict
// H2FUZZ_LOG=1 sends the error log (level info) to stderr instead of /dev/null (it is formatted either way);
// H2FUZZ_TRACE=1 prints the server's frames and response fields;
// A connection still open after the peer's FIN, all output drained and every timeout fired is a failure (the
// server would hold it forever); H2FUZZ_LENIENT_CLOSE=1 resets it instead, as the kernel would after lingering.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <nghttp2/nghttp2.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/base/log.hh"
#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "core/disk/disk_queue.hh"
#include "core/disk/open_file_cache.hh"
#include "core/http/connection.hh"
#include "core/net/shared_buffer.hh"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/rules/rule_set.hh"
#include "core/rules/rules_core.hh"
#include "core/rules/shard.hh"
#include "core/stats/counters.hh"
#include "tests/fuzz/fuzz_check.hh"

namespace {

using namespace kosoku;

#define FUZZ_FAIL(...)                                                \
  do {                                                                \
    std::fprintf(stderr, "invariant failed: ");                       \
    std::fprintf(stderr, __VA_ARGS__);                                \
    std::fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);           \
    std::abort();                                                     \
  } while (0)

constexpr char kPreface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kPrefaceLen = sizeof(kPreface) - 1;
// http2_chunk_size in the configuration: no DATA frame the server sends is longer.
constexpr size_t kChunkSize = 1024;
// Http2Connection writes while the stream holds less than 256 KiB unsent: one frame more may go over it.
constexpr size_t kMaxPending = 256 * 1024 + 64 * 1024;

// Byte 0 of the input.
enum Flags : uint8_t {
  kSliceMask = 0x03,       // 0: the bytes at once; 1, 2, 3: slices of up to 16, 256, 4096 bytes
  kHoldOutput = 0x04,      // a slow client: output leaves only in pieces, now and then (back-pressure)
  kTimePasses = 0x08,      // every timeout armed so far fires, now and then between slices
  kShutdown = 0x10,        // graceful shutdown (GOAWAY) of every live connection at some point
  kReclaim = 0x20,         // worker_connections reached: idle connections are reclaimed at some point
  kResetAtEnd = 0x40,      // the input ends with a reset (on_closed ECONNRESET) instead of a FIN
  kTimeBeforeFin = 0x80,   // every timeout fires once more before the FIN
};

struct Done {};  // thrown by the driver to leave Reactor::run() (stop() is for good)

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ---- the network side

class MemStream final : public net::Stream {
 public:
  // All bytes the handler committed, in order, as they were when sent (or when dropped by an abort).
  std::string log;
  std::string in;
  net::StreamHandler* handler = nullptr;
  net::StreamHandler* first_handler = nullptr;
  bool closed = false;   // close() was called
  bool graceful = true;  // ...how
  bool hold = false;     // output leaves only when the driver drains it
  bool flushed = false;  // flush() since the last drain

  ~MemStream() { drop_all(); }

  std::span<const char> input() const override { return {in.data(), in.size()}; }
  void consume(size_t n) override {
    FUZZ_CHECK(n <= in.size());
    in.erase(0, n);
  }
  void pause_reading() override {}
  void resume_reading() override {}
  std::span<char> reserve(size_t min_bytes) override {
    scratch_.resize(std::max<size_t>(min_bytes, 4096));
    return {scratch_.data(), scratch_.size()};
  }
  void commit(size_t n) override {
    FUZZ_CHECK(n <= scratch_.size());
    if (closed || n == 0) return;
    if (pieces_.empty() || pieces_.back().kind != Piece::kCopy) pieces_.push_back(Piece{});
    pieces_.back().copy.append(scratch_.data(), n);
    added(n);
  }
  void write_ref(const char* data, size_t len) override {
    if (closed || len == 0) return;
    Piece p;
    p.kind = Piece::kRef;
    p.ref = data;
    p.len = len;
    pieces_.push_back(std::move(p));
    added(len);
  }
  void write_shared(net::SharedBuffer& buf, const char* data, size_t len) override {
    if (closed || len == 0) return;
    FUZZ_CHECK(data >= buf.data() && data + len <= buf.data() + buf.capacity());
    buf.ref();
    Piece p;
    p.kind = Piece::kShared;
    p.ref = data;
    p.len = len;
    p.shared = &buf;
    pieces_.push_back(std::move(p));
    added(len);
  }
  void flush() override { flushed = true; }
  size_t pending_output() const override { return pending_; }
  void set_low_water(size_t bytes) override { low_water_ = bytes; }
  void close(Close how) override {
    if (closed) return;
    closed = true;
    graceful = how != Close::kAbort;
    if (!graceful) drain(SIZE_MAX);  // dropped, but logged (whole frames still)
  }
  void set_handler(net::StreamHandler* h) override { handler = h; }
  const sockaddr* peer() const override { return reinterpret_cast<const sockaddr*>(&peer_); }
  std::string_view peer_text() const override { return "192.0.2.7"; }
  uint16_t local_port() const override { return 8080; }

  size_t low_water() const { return low_water_; }
  // Sends up to n bytes: copied into the log (a lent byte freed before now is an ASan report).
  size_t drain(size_t n) {
    size_t done = 0;
    while (!pieces_.empty() && done < n) {
      Piece& p = pieces_.front();
      const size_t left = p.kind == Piece::kCopy ? p.copy.size() - p.off : p.len - p.off;
      const size_t k = std::min(left, n - done);
      const char* bytes = p.kind == Piece::kCopy ? p.copy.data() : p.ref;
      log.append(bytes + p.off, k);
      p.off += k;
      done += k;
      if (p.off == (p.kind == Piece::kCopy ? p.copy.size() : p.len)) {
        if (p.shared != nullptr) p.shared->unref();
        pieces_.pop_front();
      }
    }
    pending_ -= done;
    return done;
  }

 private:
  struct Piece {
    enum Kind { kCopy, kRef, kShared } kind = kCopy;
    std::string copy;
    const char* ref = nullptr;
    size_t len = 0;
    size_t off = 0;
    net::SharedBuffer* shared = nullptr;
  };
  void added(size_t n) {
    pending_ += n;
    if (pending_ > kMaxPending) FUZZ_FAIL("unsent output %zu bytes: over the connection's high-water bound", pending_);
  }
  void drop_all() {
    for (Piece& p : pieces_) {
      if (p.shared != nullptr) p.shared->unref();
    }
    pieces_.clear();
    pending_ = 0;
  }

  std::deque<Piece> pieces_;
  size_t pending_ = 0;
  size_t low_water_ = 0;
  std::string scratch_;
  sockaddr_in peer_ = [] {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(40000);
    inet_pton(AF_INET, "192.0.2.7", &a.sin_addr);
    return a;
  }();
};

// ---- the server's output: a valid HTTP/2 frame sequence

uint32_t be24(const unsigned char* p) { return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2]; }
uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

struct StreamOut {
  bool head = false;        // a final (>= 200) response head was sent
  bool ended = false;       // END_STREAM was sent
  int status = 0;
  int64_t content_length = -1;
  uint64_t data = 0;
};

void check_field(std::string_view name, std::string_view value, bool first, StreamOut& st, bool* informational) {
  FUZZ_CHECK(!name.empty());
  if (name[0] == ':') {
    if (name != ":status" || !first) FUZZ_FAIL("response pseudo-header field \"%.*s\" (first: %d)",
                                               static_cast<int>(name.size()), name.data(), first);
    FUZZ_CHECK(value.size() == 3 && value[0] >= '1' && value[0] <= '5' && value[1] >= '0' && value[1] <= '9' &&
               value[2] >= '0' && value[2] <= '9');
    st.status = (value[0] - '0') * 100 + (value[1] - '0') * 10 + (value[2] - '0');
    *informational = st.status < 200;
    return;
  }
  FUZZ_CHECK(!first);  // :status comes first
  for (char c : name) {
    if (c >= 'A' && c <= 'Z') FUZZ_FAIL("upper-case response field name \"%.*s\"", static_cast<int>(name.size()),
                                        name.data());
  }
  if (name == "connection" || name == "keep-alive" || name == "proxy-connection" || name == "transfer-encoding" ||
      name == "upgrade") {
    FUZZ_FAIL("connection-specific response field \"%.*s\"", static_cast<int>(name.size()), name.data());
  }
  for (char c : value) FUZZ_CHECK(c != '\r' && c != '\n' && c != '\0');
  if (name == "content-length") {
    int64_t v = 0;
    FUZZ_CHECK(!value.empty() && value.size() < 19);
    for (char c : value) {
      FUZZ_CHECK(c >= '0' && c <= '9');
      v = v * 10 + (c - '0');
    }
    st.content_length = v;
  }
}

const bool kTrace = std::getenv("H2FUZZ_TRACE") != nullptr;

void check_output(std::string_view out) {
  nghttp2_hd_inflater* inflater = nullptr;
  FUZZ_CHECK(nghttp2_hd_inflate_new(&inflater) == 0);
  std::map<uint32_t, StreamOut> streams;
  uint32_t goaway_last = UINT32_MAX;
  uint32_t continuation_of = 0;  // the stream whose header block goes on
  std::string block;             // the header block being gathered
  bool block_end_stream = false;
  const auto* p = reinterpret_cast<const unsigned char*>(out.data());
  size_t at = 0;
  bool first = true;
  while (at < out.size()) {
    if (out.size() - at < 9) FUZZ_FAIL("a partial frame header at the end of the output (%zu bytes)", out.size() - at);
    const uint32_t len = be24(p + at);
    const uint8_t type = p[at + 3], flags = p[at + 4];
    const uint32_t sid = be32(p + at + 5) & 0x7fffffff;
    if (out.size() - at - 9 < len) FUZZ_FAIL("frame type %u claims %u bytes, %zu left", type, len, out.size() - at - 9);
    const unsigned char* pl = p + at + 9;
    at += 9 + len;
    if (kTrace) std::fprintf(stderr, "server frame: type %u flags 0x%02x stream %u length %u\n", type, flags, sid, len);
    if (first) {
      if (type != NGHTTP2_SETTINGS || flags != 0 || sid != 0) FUZZ_FAIL("the server preface is not SETTINGS (type %u)", type);
      first = false;
    }
    if (continuation_of != 0 && (type != NGHTTP2_CONTINUATION || sid != continuation_of)) {
      FUZZ_FAIL("frame type %u on stream %u inside the header block of stream %u", type, sid, continuation_of);
    }
    switch (type) {
      case NGHTTP2_SETTINGS:
        FUZZ_CHECK(sid == 0);
        FUZZ_CHECK((flags & ~NGHTTP2_FLAG_ACK) == 0);
        FUZZ_CHECK((flags & NGHTTP2_FLAG_ACK) ? len == 0 : len % 6 == 0);
        break;
      case NGHTTP2_PING:
        FUZZ_CHECK(sid == 0 && len == 8);
        break;
      case NGHTTP2_GOAWAY:
        FUZZ_CHECK(sid == 0 && len >= 8);
        // A later GOAWAY may only lower the last stream id (RFC 9113 §6.8).
        FUZZ_CHECK((be32(pl) & 0x7fffffff) <= goaway_last);
        goaway_last = be32(pl) & 0x7fffffff;
        break;
      case NGHTTP2_WINDOW_UPDATE:
        FUZZ_CHECK(len == 4 && (be32(pl) & 0x7fffffff) != 0);
        break;
      case NGHTTP2_RST_STREAM:
        FUZZ_CHECK(sid != 0 && len == 4);
        break;
      case NGHTTP2_HEADERS:
      case NGHTTP2_CONTINUATION: {
        FUZZ_CHECK(sid != 0 && (sid & 1) == 1);
        if (type == NGHTTP2_HEADERS) {
          FUZZ_CHECK((flags & ~(NGHTTP2_FLAG_END_STREAM | NGHTTP2_FLAG_END_HEADERS)) == 0);
          StreamOut& st = streams[sid];
          if (st.ended) FUZZ_FAIL("HEADERS on stream %u after its END_STREAM", sid);
          if (!st.head && sid > goaway_last) FUZZ_FAIL("a response on stream %u after GOAWAY (last stream %u)", sid,
                                                       goaway_last);
          block.clear();
          block_end_stream = (flags & NGHTTP2_FLAG_END_STREAM) != 0;
        } else {
          FUZZ_CHECK(continuation_of == sid);
          FUZZ_CHECK((flags & ~NGHTTP2_FLAG_END_HEADERS) == 0);
        }
        block.append(reinterpret_cast<const char*>(pl), len);
        if ((flags & NGHTTP2_FLAG_END_HEADERS) == 0) {
          continuation_of = sid;
          break;
        }
        continuation_of = 0;
        StreamOut& st = streams[sid];
        bool informational = false;
        const bool trailers = st.head;
        const auto* in = reinterpret_cast<const uint8_t*>(block.data());
        size_t inlen = block.size();
        bool first_field = true;
        for (;;) {
          nghttp2_nv nv;
          int iflags = 0;
          const ssize_t rv = nghttp2_hd_inflate_hd2(inflater, &nv, &iflags, in, inlen, 1);
          if (rv < 0) FUZZ_FAIL("the response header block of stream %u does not decode (%s)", sid,
                                nghttp2_strerror(static_cast<int>(rv)));
          in += rv;
          inlen -= static_cast<size_t>(rv);
          if (iflags & NGHTTP2_HD_INFLATE_EMIT) {
            if (kTrace) {
              std::fprintf(stderr, "    %.*s: %.*s\n", static_cast<int>(nv.namelen), nv.name, static_cast<int>(nv.valuelen),
                           nv.value);
            }
            if (!trailers) {
              check_field(std::string_view(reinterpret_cast<const char*>(nv.name), nv.namelen),
                          std::string_view(reinterpret_cast<const char*>(nv.value), nv.valuelen), first_field, st,
                          &informational);
            }
            first_field = false;
          }
          if (iflags & NGHTTP2_HD_INFLATE_FINAL) {
            nghttp2_hd_inflate_end_headers(inflater);
            break;
          }
          if ((iflags & NGHTTP2_HD_INFLATE_EMIT) == 0 && inlen == 0) FUZZ_FAIL("a header block that never ends");
        }
        if (!trailers) {
          if (first_field) FUZZ_FAIL("an empty response header block on stream %u", sid);
          if (informational) {
            FUZZ_CHECK(!block_end_stream);
          } else {
            st.head = true;
          }
        }
        if (block_end_stream) st.ended = true;
        break;
      }
      case NGHTTP2_DATA: {
        FUZZ_CHECK(sid != 0 && (sid & 1) == 1);
        FUZZ_CHECK((flags & ~NGHTTP2_FLAG_END_STREAM) == 0);  // no padding from the server
        if (len > kChunkSize) FUZZ_FAIL("DATA of %u bytes, over http2_chunk_size %zu", len, kChunkSize);
        StreamOut& st = streams[sid];
        if (!st.head) FUZZ_FAIL("DATA on stream %u before its response head", sid);
        if (st.ended) FUZZ_FAIL("DATA on stream %u after its END_STREAM", sid);
        st.data += len;
        if (flags & NGHTTP2_FLAG_END_STREAM) st.ended = true;
        break;
      }
      default:
        FUZZ_FAIL("the server sent frame type %u", type);
    }
    if (type == NGHTTP2_DATA || type == NGHTTP2_HEADERS || type == NGHTTP2_CONTINUATION) {
      StreamOut& st = streams[sid];
      // A complete response carries its Content-Length's worth of DATA (none: HEAD, or no body status).
      if (st.ended && st.head && continuation_of == 0 && st.content_length >= 0 && st.data != 0 &&
          st.data != static_cast<uint64_t>(st.content_length)) {
        FUZZ_FAIL("stream %u ended with %llu DATA bytes, content-length %lld", sid,
                  static_cast<unsigned long long>(st.data), static_cast<long long>(st.content_length));
      }
      if (st.content_length >= 0 && st.data > static_cast<uint64_t>(st.content_length)) {
        FUZZ_FAIL("stream %u: %llu DATA bytes over content-length %lld", sid,
                  static_cast<unsigned long long>(st.data), static_cast<long long>(st.content_length));
      }
    }
  }
  nghttp2_hd_inflate_del(inflater);
}

// ---- the server, once per process

char g_site[] = "/tmp/h2fuzz-site-XXXXXX";

void remove_site() {
  for (const char* name : {"a.txt", "empty", "big.txt"}) unlink((std::string(g_site) + "/" + name).c_str());
  rmdir(g_site);
}

std::string make_site() {
  char* dir = g_site;
  FUZZ_CHECK(mkdtemp(dir) != nullptr);
  std::atexit(&remove_site);
  auto put = [&](const char* name, std::string body) {
    std::string path = std::string(dir) + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    FUZZ_CHECK(f != nullptr);
    std::fwrite(body.data(), 1, body.size(), f);
    std::fclose(f);
  };
  put("a.txt", "static a\n");
  put("empty", "");
  std::string big;
  for (int i = 0; big.size() < 40000; ++i) big += "line " + std::to_string(i) + " of a static file\n";
  put("big.txt", big);
  return dir;
}

std::string config_text(const std::string& site) {
  std::string big(3000, 'x');
  return "error_log stderr info;\n"
         "events { worker_connections 64; }\n"
         "http {\n"
         "  access_log off;\n"
         "  default_type text/plain;\n"
         "  keepalive_requests 24;\n"
         "  client_max_body_size 3k;\n"
         "  client_header_buffer_size 1k;\n"
         "  large_client_header_buffers 4 2k;\n"
         "  server {\n"
         "    listen 127.0.0.1:8080;\n"
         "    server_name localhost;\n"
         "    http2 on;\n"
         "    http2_max_concurrent_streams 16;\n"
         "    http2_body_preread_size 4k;\n"
         "    http2_chunk_size 1k;\n"
         "    http2_recv_buffer_size 1k;\n"
         "    location = / { return 200 \"hello\\n\"; }\n"
         "    location /big { return 200 \"" + big + "\"; }\n"
         "    location /redirect { return 302 /; }\n"
         "    location /empty { return 204; }\n"
         "    location /s/ { alias " + site + "/; }\n"
         "    location = /status { status; }\n"
         "    location /admin/ { cache_rules_admin; }\n"
         "  }\n"
         "  server {\n"
         "    listen 127.0.0.1:8080;\n"
         "    server_name other.test;\n"
         "    location / { return 404; }\n"
         "  }\n"
         "}\n";
}

class Fixture;

// Plays one connection's client and network backend from the loop (a poller: step 2 of each iteration).
class Driver final : public reactor::Poller {
 public:
  explicit Driver(Fixture& f) : f_(f) {}
  bool poll() override;
  void start(const uint8_t* data, size_t size);
  MemStream* stream = nullptr;
  bool active = false;

 private:
  void deliver_closed(int error);
  void fire_timers();
  bool drain_some(size_t n);

  Fixture& f_;
  std::string bytes_;  // preface + the client's bytes
  size_t fed_ = 0;
  uint8_t flags_ = 0;
  uint64_t rng_ = 0;
  bool ended_ = false;
  bool shutdown_done_ = false, reclaim_done_ = false;
  unsigned quiet_ = 0;
  unsigned timer_rounds_ = 0;
  unsigned end_rounds_ = 0;  // timeouts fired after the FIN
  unsigned waits_ = 0;
  uint64_t wait_start_ms_ = 0;
};

class Fixture {
 public:
  reactor::Reactor reactor{0, 256};
  stats::CoreStats stats;
  std::unique_ptr<const config::MainConf> conf;
  std::vector<const stats::CoreStats*> all_stats{&stats};
  absl::flat_hash_map<std::string, std::unique_ptr<disk::DiskQueue>> queues;
  std::unique_ptr<disk::OpenFileCache> ofc;
  http::CoreContext ctx;
  std::unique_ptr<http::HttpServer> server;
  Driver driver{*this};
  bool strict_close = std::getenv("H2FUZZ_LENIENT_CLOSE") == nullptr;
  uint64_t forced_resets = 0;

  Fixture() {
    base::ErrorLog::global().open(std::getenv("H2FUZZ_LOG") != nullptr ? "stderr" : "/dev/null",
                                  base::LogLevel::kInfo);
    config::LoadOptions opts;
    opts.allow_include = false;
    opts.resolve_names = false;
    config::LoadResult r = config::load_from_string(config_text(make_site()), "h2fuzz.conf", opts);
    if (!r.ok()) {
      std::fprintf(stderr, "config: %s\n", r.error.message.c_str());
      std::abort();
    }
    conf = std::move(r.conf);
    FUZZ_CHECK(conf->http.listen_sockets.size() == 1);
    reactor.update_clock();
    stats.disk.resize(conf->disk_queues.size());
    for (size_t i = 0; i < conf->disk_queues.size(); ++i) {
      stats.disk[i].name = conf->disk_queues[i].name;
      queues[conf->disk_queues[i].name] =
          std::make_unique<disk::DiskQueue>(reactor, conf->disk_queues[i], stats.disk[i]);
    }
    ofc = std::make_unique<disk::OpenFileCache>(reactor, stats);
    ctx.reactor = &reactor;
    ctx.stats = &stats;
    ctx.conf = conf.get();
    ctx.open_file_cache = ofc.get();
    ctx.prefix = "/tmp/";
    ctx.find_queue = &find_queue;
    ctx.queue_owner = this;
    ctx.all_stats = &all_stats;
    server = std::make_unique<http::HttpServer>(ctx);
    std::string err;
    if (!server->init_modules(&err)) {
      std::fprintf(stderr, "init_modules: %s\n", err.c_str());
      std::abort();
    }
    FUZZ_CHECK(server->takes_streams());  // the http2 module's part is there
    reactor.add_poller(&driver);
  }

  static disk::DiskQueue* find_queue(void* self, std::string_view name) {
    auto& m = static_cast<Fixture*>(self)->queues;
    auto it = m.find(name);
    return it == m.end() ? m.find("default")->second.get() : it->second.get();
  }

  const config::ListenSocket& listen() const { return conf->http.listen_sockets[0]; }

  // The rules a PUT stored go again: each input starts from an empty rule set.
  void clear_rules() {
    auto* rc = static_cast<rules::RulesCore*>(server->module_core(rules::module()));
    if (rc == nullptr) return;
    std::vector<std::string> hosts;
    rc->store().set().list(0, SIZE_MAX, [&](const rules::HostRules& h) { hosts.emplace_back(h.host); });
    for (const std::string& h : hosts) rc->store().erase(h);
  }
};

void Driver::start(const uint8_t* data, size_t size) {
  flags_ = data[0];
  rng_ = data[1] * 0x100000001b3ull + 1;
  bytes_.assign(kPreface, kPrefaceLen);
  bytes_.append(reinterpret_cast<const char*>(data + 2), size - 2);
  fed_ = 0;
  ended_ = shutdown_done_ = reclaim_done_ = false;
  quiet_ = timer_rounds_ = end_rounds_ = waits_ = 0;
  wait_start_ms_ = 0;
  stream = new MemStream();
  stream->hold = (flags_ & kHoldOutput) != 0;
  net::StreamHandler* h = f_.server->on_accept(*stream, f_.listen());
  FUZZ_CHECK(h != nullptr);
  stream->handler = stream->first_handler = h;
  active = true;
}

void Driver::fire_timers() {
  // Time passes: every timeout armed so far is due (the wheel's clock jumps; deadlines armed later are clamped
  // to just after the jump and fire at the next jump).
  f_.reactor.timers().expire(f_.reactor.now_ms() + 24ull * 3600 * 1000 + ++timer_rounds_);
}

bool Driver::drain_some(size_t n) {
  MemStream& s = *stream;
  if (s.pending_output() == 0) return false;
  s.drain(n);
  s.flushed = false;
  if (!s.closed && s.pending_output() <= s.low_water()) s.handler->on_writable(s);
  return true;
}

void Driver::deliver_closed(int error) {
  MemStream* s = stream;
  if (s->graceful) s->drain(SIZE_MAX);
  std::string log = std::move(s->log);
  const bool h2 = s->handler != s->first_handler;
  net::StreamHandler* h = s->handler;
  h->on_closed(*s, error);
  delete s;  // the Stream pointer is invalid after on_closed: a later use is an ASan report
  stream = nullptr;
  wait_start_ms_ = f_.reactor.now_ms();
  if (h2) check_output(log);
}

bool Driver::poll() {
  if (!active) return false;
  reactor::Reactor& r = f_.reactor;
  if (r.has_tasks()) return true;
  if (stream == nullptr) {
    // The stream is gone: the connection deletes itself once its requests are done.
    if (f_.server->live.next == nullptr) {
      active = false;
      throw Done{};
    }
    if (++waits_ > 200000 || r.now_ms() - wait_start_ms_ > 5000) {
      FUZZ_FAIL("a connection is still live after on_closed (%u loop turns)", waits_);
    }
    return true;
  }
  MemStream& s = *stream;
  if (s.closed) {
    if (s.graceful && s.hold && s.pending_output() > 0 && splitmix(rng_) % 4 != 0) {
      s.drain(1 + splitmix(rng_) % 8192);  // a slow client reads what was left (no callback after close)
      return true;
    }
    deliver_closed(0);
    return true;
  }
  if (!s.hold && s.pending_output() > 0) {
    drain_some(SIZE_MAX);  // the send completes
    return true;
  }
  if (fed_ < bytes_.size()) {
    const uint64_t roll = splitmix(rng_);
    if ((flags_ & kHoldOutput) && roll % 3 == 0 && drain_some(1 + (roll >> 8) % 20000)) return true;
    if ((flags_ & kTimePasses) && (roll >> 16) % 8 == 0) {
      fire_timers();
      return true;
    }
    if ((flags_ & kShutdown) && !shutdown_done_ && (roll >> 24) % 8 == 0) {
      shutdown_done_ = true;
      for (http::HttpServer::Node* n = f_.server->live.next; n != nullptr;) {
        http::HttpServer::Node* next = n->next;
        n->shutdown_if_idle();
        n = next;
      }
      return true;
    }
    if ((flags_ & kReclaim) && !reclaim_done_ && (roll >> 32) % 8 == 0) {
      reclaim_done_ = true;
      f_.server->reclaim_idle(8);
      return true;
    }
    size_t n = bytes_.size() - fed_;
    switch (flags_ & kSliceMask) {
      case 1: n = std::min<size_t>(n, 1 + (roll >> 40) % 16); break;
      case 2: n = std::min<size_t>(n, 1 + (roll >> 40) % 256); break;
      case 3: n = std::min<size_t>(n, 1 + (roll >> 40) % 4096); break;
      default: break;
    }
    s.in.append(bytes_, fed_, n);
    fed_ += n;
    s.handler->on_readable(s);
    return true;
  }
  if (!ended_) {
    ended_ = true;
    if (flags_ & kResetAtEnd) {
      deliver_closed(ECONNRESET);
      return true;
    }
    if (flags_ & kTimeBeforeFin) fire_timers();
    if (stream != nullptr && !stream->closed) stream->handler->on_peer_closed(*stream);
    return true;
  }
  // After the FIN: the client reads everything; what still waits is given its timeouts; the connection should
  // close by itself.
  s.hold = false;
  if (++quiet_ % 64 == 0) {
    if (end_rounds_ < 8) {
      ++end_rounds_;
      fire_timers();
      return true;
    }
    if (f_.strict_close) FUZZ_FAIL("the connection is still open after the FIN, all output sent and every timeout");
    ++f_.forced_resets;
    deliver_closed(ECONNRESET);  // the backend gives up on it (lingering close over)
  }
  return true;
}

Fixture& fixture() {
  static Fixture* f = new Fixture();
  return *f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  Fixture& f = fixture();
  f.driver.start(data, size);
  try {
    f.reactor.run();
    FUZZ_FAIL("the loop returned");
  } catch (const Done&) {
  }
  FUZZ_CHECK(f.driver.stream == nullptr);
  FUZZ_CHECK(f.server->live.next == nullptr);
  f.clear_rules();
  return 0;
}
