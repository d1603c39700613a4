// The on-disk cache entry: format, writer and reader. Every file operation goes through the cache path's
// DiskQueue (aio io_uring by default), so a cold disk never blocks a loop.
//
// File layout (little-endian), `header_size` bytes of header then `body_size` bytes of body:
//   0   char[8]  magic "KSKCACH\n"          8   u32 version (1)            12  u32 header_size
//   16  u64 body_size                        24  u8[16] hash (MD5 of the key, or of key+variant)
//   40  u8[16] primary hash (variants; else zero)
//   56  i64 date  64 i64 request_time  72 i64 response_time  80 i64 corrected_initial_age  88 i64 lifetime
//   96  i64 stale_while_revalidate  104 i64 stale_if_error  112 i64 last_modified (-1: none)
//   120 u32 flags (freshness.hh StoredFlag)  124 u16 status  126 u16 key_len  128 u16 etag_len
//   130 u16 vary_len  132 u32 head_len  136 u32 tags_len (0 in files written before tags were stored)
//   140 key, etag (as sent, with quotes), vary (normalised names), head ("Name: value\r\n" lines),
//       tags (tags.hh stored form: "a b c")
// The header is rewritten at offset 0 once the body is complete (body_size is unknown before that for a
// chunked or close-delimited response).
//
// Writing (StoreWriter): the response is written to a temp file (CachePath::temp_path_for) and renamed into
// place only when the origin delivered the WHOLE body (StoreWriter::finish); a response cut off by the origin,
// an I/O error, a full disk or a writer that falls too far behind its producer (more than kMaxPending bytes
// waiting; the proxy avoids that by pausing the origin while backlogged()) abandons the temp file — the
// response to the client is never affected. Only then the keys zone
// learns about the entry (CacheZone::commit) and the lock waiters are woken.
//
// Reading (EntryReader): open, read the first kFirstRead bytes (header and the start of the body), check magic,
// version, hash, key (an MD5 collision reads as a miss, as nginx's "cache file has md5 collision") and that
// the file is exactly header_size + body_size long (a truncated file is a miss). Body reads are clamped to the
// body: a range can never expose header bytes or bytes past the body (CVE-2017-7529).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/cache/cache_key.hh"
#include "core/cache/freshness.hh"
#include "core/config/conf.hh"
#include "core/disk/disk_queue.hh"

namespace kosoku::cache {

class CachePath;
class WakeHub;

inline constexpr uint64_t kNoPurgeSeq = UINT64_MAX;

/// Everything the header holds.
struct EntryMeta {
  Hash128 hash;
  Hash128 primary;          // zero unless this entry is a Vary variant
  Freshness freshness;
  int64_t last_modified = -1;
  int status = 200;
  std::string key;
  std::string etag;         // with quotes (W/ if weak); empty: none
  std::string vary;         // normalised Vary names (the primary's list); empty: none
  std::string head;         // stored head lines
  std::string tags;         // the response's cache tags (tags.hh stored form); empty: none
  uint32_t header_size = 0; // set by encode/decode
  uint64_t body_size = 0;
};

inline constexpr char kEntryMagic[8] = {'K', 'S', 'K', 'C', 'A', 'C', 'H', '\n'};
inline constexpr uint32_t kEntryVersion = 1;
inline constexpr size_t kFixedHeader = 140;
inline constexpr size_t kMaxHeader = 64 * 1024;

/// Serialises `m` (header_size is computed and stored in the returned bytes; m.header_size is updated).
std::string encode_header(EntryMeta& m);

enum class DecodeStatus { kOk, kNeedMore, kCorrupt };
/// Decodes a header from the start of `bytes`. kNeedMore: *needed = bytes required (at most kMaxHeader).
DecodeStatus decode_header(std::string_view bytes, EntryMeta* m, size_t* needed);

/// Writes one entry (see the header comment). Heap-allocated; owns itself once finish() or abort() is called
/// (it deletes itself when its last disk operation completes), so the request that feeds it may go away.
class StoreWriter final : public disk::DiskCallback {
 public:
  /// Bytes buffered while a disk write is in flight; beyond this the writer gives up (the disk is too slow
  /// for this response; the client is not slowed down).
  static constexpr size_t kMaxPending = 4 << 20;
  static constexpr size_t kHighWater = 2 << 20;  // backlogged() above this many bytes waiting (bytes)
  static constexpr size_t kLowWater = 512 << 10;  // ... and drained at or below this
  static constexpr size_t kWriteChunk = 256 << 10;

  struct Target {
    CachePath* path = nullptr;
    WakeHub* hub = nullptr;        // may be null (tests): then waiters are not notified
    disk::DiskQueue* queue = nullptr;
    config::AioMode aio = config::AioMode::kIoUring;
    int core = 0;
    int64_t now_s = 0;             // for the zone's LRU clock at commit
    /// Vary: the primary key's hash and the vary id to set on it (0: not a variant).
    Hash128 primary;
    uint16_t vary_id = 0;
    /// The zone lock the caller holds (proxy_cache_lock / updating), released here with its waiters woken:
    /// on commit, or when the entry is abandoned. It may be the primary's hash while meta.hash is a variant.
    bool holds_lock = false;
    Hash128 locked;
    /// RecentPurges::seq() when the request to the origin went out: a purge after it that selects the entry
    /// makes the commit stale (purge_log.hh). kNoPurgeSeq: not known (the check is skipped).
    uint64_t purge_seq = kNoPurgeSeq;
  };
  /// done(committed): called on the loop when the writer is finished (never after abort() if
  /// notify_abort is false). May be empty.
  using Done = std::function<void(bool committed)>;

  /// Starts writing `meta` (body_size is filled in by finish()). The temp file is opened at once.
  static StoreWriter* start(const Target& t, EntryMeta meta, Done done = {});

  /// Body bytes (copied). Ignored after a failure.
  void append(std::string_view data);
  /// The body is complete (`expected_size`: the Content-Length announced, or -1): writes the final header,
  /// renames into place, commits to the zone. A size mismatch abandons the entry.
  void finish(int64_t expected_size = -1);
  /// The body is incomplete (origin cut off, client gone): the temp file is removed, the lock released.
  void abort();
  bool failed() const { return failed_; }
  uint64_t written() const { return body_bytes_; }
  /// Bytes appended and not yet on disk.
  size_t pending() const { return pending_.size() + writing_.size(); }
  /// Called after each body write completes (a producer that copies from disk paces itself with it).
  void set_progress(std::function<void()> f) { progress_ = std::move(f); }
  /// Back-pressure for a producer faster than the disk (an origin on a fast link): true when more than
  /// kHighWater bytes wait for the disk; the producer should then stop, and `drained` is called once, from a
  /// later disk completion, when at most kLowWater bytes wait (or the writer failed: appends are then ignored).
  /// It may finish() or abort() the writer. finish() and abort() drop a pending `drained`.
  bool backlogged(const std::function<void()>& drained);

  void on_disk_done(disk::DiskOp& op) override;

 private:
  StoreWriter(const Target& t, EntryMeta meta, Done done);
  ~StoreWriter() = default;
  enum class Phase { kOpen, kMkdir, kData, kHeader, kRename, kUnlink, kFinished };
  bool next_op();
  void run();
  void on_result(int32_t res);
  void fail(int err, std::string_view what);
  void release_lock();
  void complete(bool committed);
  void commit();
  void maybe_delete();

  Target t_;
  EntryMeta meta_;
  Done done_;
  std::function<void()> progress_;
  std::function<void()> drained_;  // backlogged(): the producer's resume call
  std::string final_path_;
  std::string temp_path_;
  std::string header_;
  std::string pending_;      // bytes not yet written (the placeholder header first)
  std::string writing_;      // the bytes of the write in flight
  disk::DiskOp op_;
  Phase phase_ = Phase::kOpen;
  Phase after_mkdir_ = Phase::kOpen;
  size_t mkdir_level_ = 0;
  bool mkdir_tried_ = false;
  bool in_flight_ = false;
  bool running_ = false;
  bool created_ = false;     // the temp file exists
  int fd_ = -1;
  uint64_t file_off_ = 0;
  uint64_t body_bytes_ = 0;
  int64_t expected_ = -1;
  bool finishing_ = false;
  bool failed_ = false;
  bool owned_ = false;       // finish()/abort() called: the writer owns itself
  bool done_called_ = false;
};

/// Opens and validates one entry (see the header comment). Owned by the request; keep it alive while an
/// operation is in flight (busy()).
class EntryReader final : public disk::DiskCallback {
 public:
  static constexpr size_t kFirstRead = 16 * 1024;

  class Callback {
   public:
    /// 0: meta() is valid; -ENOENT: no file; -EINVAL: corrupt, truncated or another key; other -errno.
    virtual void on_entry_open(EntryReader& r, int error) = 0;
    /// A body read finished: `data` (valid until the next read or close), or an error (< 0 in `error`).
    virtual void on_entry_data(EntryReader& r, std::string_view data, int error) = 0;

   protected:
    ~Callback() = default;
  };

  EntryReader() = default;
  ~EntryReader();
  EntryReader(const EntryReader&) = delete;
  EntryReader& operator=(const EntryReader&) = delete;

  /// Opens `path`, expecting the entry of `hash` with `key` (empty: do not compare the key). Completes
  /// inline (callback before return) when the page cache has it.
  void open(const std::string& path, const Hash128& hash, std::string_view key, disk::DiskQueue& q,
            config::AioMode aio, Callback* cb);
  const EntryMeta& meta() const { return meta_; }
  int fd() const { return fd_; }
  /// Reads body bytes [offset, offset + len) ∩ [0, body_size) into `dst` (len bytes at most); the callback
  /// gets them (inline, before return, when the page cache has them). A range inside the bytes read with the
  /// header is handed out from memory (the view stays valid until close()) without touching `dst`. A read
  /// at or past the end of the body delivers an empty view. Short reads deliver what the disk returned.
  void read(uint64_t offset, char* dst, uint32_t len);
  /// Closes the file (no operation may be in flight).
  void close();
  bool busy() const { return in_flight_; }
  /// Body bytes that came with the first read (offset 0 onwards).
  std::string_view prefetched() const;

  void on_disk_done(disk::DiskOp& op) override;

 private:
  void step_done(int result);
  void submit_read(char* dst, uint64_t file_off, uint32_t len);
  void submit_op();
  void fail_open(int error);

  enum class Step { kNone, kOpen, kHeader, kBody };
  Step step_ = Step::kNone;
  Callback* cb_ = nullptr;
  disk::DiskQueue* q_ = nullptr;
  config::AioMode aio_ = config::AioMode::kIoUring;
  disk::DiskOp op_;
  Hash128 hash_;
  std::string key_;
  EntryMeta meta_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  std::string buf_;          // the first read (header + the start of the body)
  size_t buf_len_ = 0;       // valid bytes in buf_
  char* dst_ = nullptr;      // body read destination
  bool in_flight_ = false;
};

/// Unlinks `path` through `q` in the background, for files the keys zone has already forgotten (an evicted,
/// replaced, expired-by-`inactive` or invalid entry): nobody waits for the result. A failure — the unlink's
/// errno, or a full queue that refused it — is logged at crit (`unlink() "PATH" failed (30: Read-only file
/// system)`, nginx's line); the file then stays on disk, and the next start's cache loader indexes it again
/// (it is still a whole response, checked for freshness on use, as it is with nginx). A purge does not use
/// this: it must answer what happened to the file (purge.hh).
void remove_file_async(disk::DiskQueue& q, config::AioMode aio, std::string path);

}  // namespace kosoku::cache
