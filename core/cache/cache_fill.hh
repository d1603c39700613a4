// Internal to core/cache: the fill side — turning an origin response into a stored entry (the RFC 9111 store
// decision, the entry's metadata and its StoreWriter), rewriting an entry with the head merged from a 304
// (RFC 9111 §4.3.4; the body is copied through the DiskQueue, paced by the writer), and background updates
// (proxy_cache_background_update: a detached CacheFetch refreshes an expired entry while the request that
// found it was answered with the stale copy), and fills whose client went away.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/cache/cache_fetch.hh"
#include "core/cache/cache_handler.hh"
#include "core/cache/cache_store.hh"
#include "core/cache/cache_variables.hh"
#include "core/cache/freshness.hh"

namespace kosoku::cache {

/// The Last-Modified of `fields` (seconds), if valid.
std::optional<int64_t> stored_last_modified(std::span<const http::HeaderField> fields);
/// The value of the first field with token `t`, or "".
std::string_view first_field_value(std::span<const http::HeaderField> fields, http::HeaderToken t);
/// Parses stored lines as a response head with `status` (text is the buffer the views point into).
bool parse_stored(int status, std::string_view lines, std::string& text, http::HeaderField* fields, size_t nfields,
                  http::ParsedResponse& out);

/// The tags of a response to store (tags.hh; the forms `cc.tags_headers` names), with one warn line for the
/// tags dropped, naming the entry's `key`.
std::string entry_tags(const CacheLocConf& cc, std::span<const http::HeaderField> fields, std::string_view key);

/// The store decision for `resp` and, when storable, a started StoreWriter (null otherwise, *refusal says why).
/// `req` selected the response (Authorization, request no-store, the Vary secondary key); `cc` is the
/// location's cache configuration. The writer takes over `base`'s lock.
StoreWriter* begin_store(const CacheLocConf& cc, const http::Request& req, CachePath& path,
                         const std::string& key, const Hash128& primary, const http::ParsedResponse& resp,
                         int64_t request_time, int64_t now, const StoreWriter::Target& base, NotStored* refusal,
                         StoreWriter::Done done = {});

/// Writes `fresh` (the merged head) with the body of the entry open on `fd` (owned from now on; `old` gives
/// its layout) into a new file, committed like any fill. Owns itself.
void rewrite_entry(int fd, const EntryMeta& old, EntryMeta fresh, const StoreWriter::Target& t);

/// What refresh_entry() did with the entry.
enum class RefreshResult : uint8_t { kRewritten, kAnswerOnly, kForgotten };

/// RFC 9111 §4.3.4: the entry `old` (open on `fd`, owned from now on; -1: none) refreshed by a 304 with
/// `fields304` — the merged head and new freshness go to `served` (to answer with), and the entry is rewritten
/// with the body it has (kRewritten), left as is when the merge is fresh for no time (kAnswerOnly), or removed
/// when no longer storable (kForgotten). `t.locked` is the entry's hash; its lock (t.holds_lock) is taken over.
/// `req` selected the entry (Authorization, Vary); `cc` is the location's cache configuration.
RefreshResult refresh_entry(const CacheLocConf& cc, const http::Request& req, const EntryMeta& old, int fd,
                            std::span<const http::HeaderField> fields304, int64_t request_time,
                            const StoreWriter::Target& t, EntryMeta& served);

// A fetch that fills the cache with no client behind it: a background update (proxy_cache_background_update)
// that refreshes an expired entry while the request that found it expired was answered with the stale copy, or
// a fill whose client went away. With proxy_cache_revalidate on and a validator in the stale entry, the fetch is
// conditional (If-None-Match / If-Modified-Since, RFC 9111 §4.3.1) and a 304 only refreshes the entry's head and
// validity (refresh_entry): the body is not downloaded again. The sink of its CacheFetch; paced by its writer.
class BackgroundFill final : public proxy::UpstreamSink {
 public:
  /// `stale`: the expired entry; `stale_fd` its open file (owned; -1: none).
  BackgroundFill(CacheModule& m, http::Exchange& client, CachePath& path, std::string key, const Hash128& locked,
                 const EntryMeta& stale, int stale_fd, bool revalidate);
  /// What a fill whose client went away hands over (CacheState::continue_fill).
  struct Adopted {
    std::unique_ptr<CacheFetch> fetch;     // running; its client is still there while the fill is made
    bool holds_lock = false;               // the zone lock of `locked`
    StoreWriter* writer = nullptr;         // the fill already started (the response head arrived), or null
    bool head_seen = false;                // the response head arrived (no writer: it is not stored)
    bool no_cache = false;                 // proxy_no_cache said so (evaluated while the client was there)
    int64_t expected = -1;                 // Content-Length of the response, -1: unknown
    int64_t request_time = 0;
    uint64_t purge_seq = kNoPurgeSeq;      // the zone's purge number when the fetch went out
    const EntryMeta* stale = nullptr;      // a conditional fetch's stale entry (a 304 refreshes it) ...
    int stale_fd = -1;                     // ... and its open file (owned)
  };
  /// Takes over the fetch of a client that went away: the response is stored as if the client were there.
  /// Called while the client's exchange is still valid.
  BackgroundFill(CacheModule& m, Adopted a, CachePath& path, std::string key, const Hash128& locked);
  ~BackgroundFill();
  /// Starts a background update (the first constructor) at once, while the client's exchange is still valid.
  void start();
  bool done() const { return finished_ && fetch_->done(); }

  // proxy::UpstreamSink
  void on_upstream_head(const http::ParsedResponse& resp) override;
  size_t upstream_room() override {
    return writer_ != nullptr && writer_->backlogged(fetch_->upstream().resumer()) ? 0 : SIZE_MAX;
  }
  void on_upstream_data(const std::string_view* spans, size_t count, bool last) override;
  void on_upstream_end() override;
  void on_upstream_error(int) override { end(); }

 private:
  void end();
  void release_lock();
  StoreWriter::Target target() const;

  CacheModule& mod_;
  CachePath& path_;
  std::string key_;
  Hash128 locked_;
  EntryMeta stale_;
  int stale_fd_ = -1;
  bool revalidate_ = false;
  bool holds_lock_ = true;
  bool no_cache_ = false;
  std::unique_ptr<CacheFetch> fetch_;
  proxy::UpstreamState tries_;  // the fetch's record (no client response carries it)
  StoreWriter* writer_ = nullptr;
  int64_t expected_ = -1;
  int64_t request_time_ = 0;
  uint64_t purge_seq_ = kNoPurgeSeq;
  bool finished_ = false;
};

}  // namespace kosoku::cache
