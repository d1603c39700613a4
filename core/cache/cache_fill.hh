// Internal to core/cache: the fill side — turning an origin response into a stored entry (the RFC 9111 store
// decision, the entry's metadata and its StoreWriter), rewriting an entry with the head merged from a 304
// (RFC 9111 §4.3.4; the body is copied through the DiskQueue, paced by the writer), and background updates
// (proxy_cache_background_update: a detached FetchExchange refreshes an expired entry while the request that
// found it was answered with the stale copy).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/cache/cache_handler.hh"
#include "core/cache/cache_store.hh"
#include "core/cache/cache_variables.hh"
#include "core/cache/fetch_exchange.hh"
#include "core/cache/freshness.hh"

namespace kosoku::cache {

/// The Last-Modified of `fields` (seconds), if valid.
std::optional<int64_t> stored_last_modified(std::span<const http::HeaderField> fields);
/// The value of the first field with token `t`, or "".
std::string_view first_field_value(std::span<const http::HeaderField> fields, http::HeaderToken t);
/// Parses stored lines as a response head with `status` (text is the buffer the views point into).
bool parse_stored(int status, std::string_view lines, std::string& text, http::HeaderField* fields, size_t nfields,
                  http::ParsedResponse& out);

/// The store decision for `resp` and, when storable, a started StoreWriter (null otherwise, *refusal says why).
/// `req` selected the response (Authorization, request no-store, the Vary secondary key); `ex` gives the
/// location's settings. The writer takes over `base`'s lock.
StoreWriter* begin_store(const http::Exchange& ex, const http::Request& req, CachePath& path,
                         const std::string& key, const Hash128& primary, const http::ParsedResponse& resp,
                         int64_t request_time, int64_t now, const StoreWriter::Target& base, NotStored* refusal,
                         StoreWriter::Done done = {});

/// Writes `fresh` (the merged head) with the body of the entry open on `fd` (owned from now on; `old` gives
/// its layout) into a new file, committed like any fill. Owns itself.
void rewrite_entry(int fd, const EntryMeta& old, EntryMeta fresh, const StoreWriter::Target& t);

// A detached fetch that refreshes an expired entry (proxy_cache_background_update) while the request that
// found it expired was answered with the stale copy.
class BackgroundFill final : public FetchSink {
 public:
  BackgroundFill(CacheModule& m, http::Exchange& client, CachePath& path, std::string key, const Hash128& locked)
      : mod_(m), path_(path), key_(std::move(key)), locked_(locked) {
    FetchExchange::Options opts;
    opts.head_to_get = true;
    fetch_ = std::make_unique<FetchExchange>(client, opts, this, true);
    request_time_ = m.reactor().wall_time();
  }
  ~BackgroundFill() {
    if (writer_ != nullptr) writer_->abort();
    release_lock();
  }
  void start() {
    if (!fetch_->valid()) {
      finished_ = true;
      release_lock();
      return;
    }
    started_ = true;
    mod_.proxy().forward(*fetch_);
  }
  bool done() const { return finished_ && (!started_ || fetch_->done()); }

  void on_fetch_response(const http::ParsedResponse& resp) override {
    StoreWriter::Target t;
    t.path = &path_;
    t.hub = &mod_.registry()->wake_hub();
    t.queue = &mod_.queue_for(path_, *fetch_);
    t.aio = fetch_->location().aio;
    t.core = mod_.core();
    t.now_s = mod_.reactor().wall_time();
    t.holds_lock = holds_lock_;
    t.locked = locked_;
    NotStored why;
    if (any_predicate(fetch_->location().cache.no_cache, *fetch_)) return;
    writer_ = begin_store(*fetch_, fetch_->fetch_request(), path_, key_, hash_key(key_), resp, request_time_,
                          t.now_s, t, &why);
    if (writer_ != nullptr) holds_lock_ = false;
    expected_ = resp.framing == http::ResponseFraming::kContentLength ? static_cast<int64_t>(resp.content_length) : -1;
  }
  void on_fetch_head(http::ResponseHead&) override {}
  void on_fetch_data(const char* data, size_t len, bool) override {
    if (writer_ != nullptr) writer_->append(std::string_view(data, len));
  }
  void on_fetch_end(bool complete) override {
    if (writer_ == nullptr) return;
    if (complete) {
      writer_->finish(expected_);
    } else {
      writer_->abort();
    }
    writer_ = nullptr;
  }
  void on_fetch_finish() override { end(); }
  void on_fetch_abort() override { end(); }
  void on_fetch_error(int) override { end(); }
  void on_fetch_released() override { end(); }

 private:
  void end() {
    finished_ = true;
    if (writer_ != nullptr) {
      writer_->abort();
      writer_ = nullptr;
    }
    release_lock();
  }
  void release_lock() {
    if (!holds_lock_) return;
    holds_lock_ = false;
    uint64_t w = path_.zone().unlock(locked_);
    if (w != 0) mod_.registry()->wake_hub().notify(w, locked_);
  }

  CacheModule& mod_;
  CachePath& path_;
  std::string key_;
  Hash128 locked_;
  bool holds_lock_ = true;
  std::unique_ptr<FetchExchange> fetch_;
  StoreWriter* writer_ = nullptr;
  int64_t expected_ = -1;
  int64_t request_time_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

}  // namespace kosoku::cache
