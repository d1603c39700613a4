// Internal to core/cache: the per-request state of a cached proxy location (the flow is described in
// cache_handler.hh; what it does next is decide_cache()'s, decision.hh). Split over cache_handler.cc (the step
// function and its actions: lookup, open, uses, lock, fetch, store) and cache_serve.cc (answering from an
// entry: head, Age, conditionals, ranges, body streaming).
//
// Re-entrancy (as in proxy_handler.cc): Exchange::finish(), respond() and abort_response() end the request; the
// connection may then go on with the client's next one. Every path calls them last and returns straight up. Fetches
// (cache_fetch.hh) are never destroyed synchronously: they are handed to CacheModule::retire().
//
// The origin's response comes to this state as the sink of its CacheFetch: a revalidation's 304 or an error the
// stale entry answers is taken over (the fetch is retired and reads the rest on its own), anything else is passed
// through to the client (a ClientRelay, with this state as its filter for ranges and 304s) and teed into a
// StoreWriter when storable.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/cache/cache_handler.hh"
#include "core/cache/cache_store.hh"
#include "core/cache/cache_fetch.hh"
#include "core/cache/decision.hh"
#include "core/http/multipart.hh"
#include "core/http/response_step.hh"
#include "core/proxy/client_relay.hh"
#include "core/proxy/upstream_fetch.hh"

namespace kosoku::cache {

class CacheState final : public http::ContentState,
                         public proxy::UpstreamSink,
                         public proxy::ClientRelay::Filter,
                         public EntryReader::Callback,
                         public reactor::Timer,
                         public reactor::Task {
 public:
  CacheState(CacheModule& m, http::Exchange& ex) : mod_(m), ex_(ex) {}
  ~CacheState() override;

  /// Starts the cache flow for the exchange's request in `path` with `key`. May end the exchange.
  void start(CachePath& path, std::string key, bool bypass);
  /// A lock waiter's wake-up (CacheModule::poll): look again.
  void wake();
  const Hash128& waiting_for() const { return hash_; }

  // ContentState
  void on_abort() override;
  void on_writable() override;
  /// Closes the entry's file: an idle keep-alive connection holds no cache file open.
  void on_response_complete() override;
  /// A client gone while the entry is opened, the lock awaited or the origin asked abandons the request.
  bool abort_on_peer_close() const override {
    return phase_ == Phase::kOpening || phase_ == Phase::kWaitingLock || phase_ == Phase::kFetching;
  }
  // proxy::UpstreamSink
  void on_upstream_head(const http::ParsedResponse& resp) override;
  size_t upstream_room() override;
  void on_upstream_data(const std::string_view* spans, size_t count, bool last) override;
  void on_upstream_end() override;
  void on_upstream_error(int status) override;
  void on_upstream_cancelled() override { maybe_release(); }
  // proxy::ClientRelay::Filter: what the client gets of a passed-through response
  void write_content(const char* data, size_t len, bool by_ref) override;
  // EntryReader::Callback
  void on_entry_open(EntryReader& r, int error) override;
  void on_entry_data(EntryReader& r, std::string_view data, int error) override;
  // Timer: proxy_cache_lock_timeout
  void fire() override;
  // Task: look again after a wake-up
  void run() override;

 private:
  enum class Phase { kIdle, kOpening, kWaitingLock, kFetching, kServing, kDone };
  using Piece = http::BodyPiece;  // literal text (multipart delimiters) or a byte range of the body
  // How a passed-through origin response reaches the client.
  enum class PassView : uint8_t { kWhole, kRanges, kNothing };

  // cache_handler.cc — may end the exchange:
  void step();
  void lookup();
  void hit();
  void count_soft_purged_stale();  // a STALE/UPDATING answer from a soft-purged entry
  void count_use();
  void try_lock();
  void wait_lock();
  CacheFacts fetched_facts(FetchOutcome outcome, int status) const;
  void fetch(CacheStatus status, bool revalidate, bool store_allowed);
  void revalidated(const http::ParsedResponse& resp);
  void start_store(const http::ParsedResponse& resp);
  StoreWriter::Target store_target() const;
  void release_lock();
  void takeover();
  void fetch_failed(int status);
  void fetch_cut_off();
  void pass_done();
  bool continue_fill();
  void maybe_release();
  int64_t now_s() const;
  uint64_t now_ms() const;
  const CacheLocConf& conf() const { return ex_.location().module<cache::CacheLocConf>(); }

  // A response that fills the cache finishes only once its entry is committed (or abandoned), as nginx renames
  // the temp file before it finalizes the request: the next request, on any core, finds the entry.
  struct StoreWait {
    CacheState* state = nullptr;  // null once the state stopped caring (destroyed or aborted)
  };
  void on_store_done();
  void detach_store_wait();

  // cache_serve.cc — may end the exchange:
  void serve(CacheStatus status);
  void pump();
  void read_done(std::string_view data, int error);
  void finish_response();
  http::ResponseStep response_step(http::ResponseHead& h, int64_t last_modified, int64_t size,
                                   http::RangeSupport ranges);
  void write_view(const char* data, size_t len, bool by_ref);

  CacheModule& mod_;
  http::Exchange& ex_;
  CachePath* path_ = nullptr;
  std::string key_;
  Hash128 hash_;              // the entry looked up: the key's, or its variant's
  Hash128 primary_;           // the key's hash
  bool variant_ = false;
  std::optional<EntryView> entry_;
  Phase phase_ = Phase::kIdle;
  CacheFacts facts_;          // what decide_cache() knows of this look (decision.hh)
  Freshness soft_freshness_;  // the read entry's freshness, stale from a soft purge on (CacheZone::mark_stale)
  CacheStatus status_ = CacheStatus::kNone;
  bool aborted_ = false;
  bool released_ = false;
  bool task_queued_ = false;
  bool waiting_ = false;
  uint64_t lock_deadline_ms_ = 0;
  bool lock_held_ = false;    // this request holds the zone lock of `hash_`
  bool store_allowed_ = true; // min_uses reached and not a lock timeout
  bool revalidating_ = false;

  // The entry on disk.
  EntryReader reader_;
  bool have_entry_ = false;   // reader_ holds a valid, open entry
  EntryMeta served_;          // a revalidated entry's merged version
  bool use_entry_meta_ = true;  // serve reader_.meta() as is (no copy), else served_ / the hot copy
  const HotCache::Entry* hot_found_ = nullptr;  // the look's HotCache copy (valid until the step returns)
  const EntryMeta* hot_meta_ = nullptr;  // serving a HotCache copy: its header ...
  std::string_view hot_body_;            // ... and body (valid during serve(): it completes synchronously)

  // The fetch.
  std::unique_ptr<CacheFetch> fetch_;
  proxy::ClientRelay relay_;  // a passed-through response on its way to the client
  bool passthrough_ = false;
  bool draining_ = false;     // the passed-through response was read whole; the relay waits for the client
  StoreWriter* writer_ = nullptr;
  std::shared_ptr<StoreWait> store_wait_;  // the writer's completion, while it is pending
  bool finish_deferred_ = false;           // the fetch finished; ex_.finish() waits for the store
  int64_t expected_length_ = -1;
  int64_t origin_last_modified_ = -1;   // the passed-through response's Last-Modified
  PassView pass_view_ = PassView::kWhole;
  uint64_t stream_pos_ = 0;             // content bytes of the passed-through response seen so far
  int64_t request_time_ = 0;
  uint64_t purge_seq_ = kNoPurgeSeq;  // the zone's purge number when the fetch went out (StoreWriter::Target)

  // Serving.
  std::string head_text_;
  http::HeaderField head_fields_[100];
  http::ParsedResponse head_resp_;
  std::vector<Piece> pieces_;
  size_t piece_ = 0;
  uint64_t piece_done_ = 0;
  std::string multipart_type_;   // the head's Content-Type of a multipart/byteranges 206
  char* buf_[2] = {nullptr, nullptr};
  uint64_t end_mark_[2] = {0, 0};
  uint64_t written_ = 0;
  int next_buf_ = 0;
  bool streaming_ = false;
  bool pumping_ = false;
  bool read_in_flight_ = false;
  bool read_ready_ = false;     // an inline read result waiting for pump()
  std::string_view ready_data_;
  int ready_error_ = 0;
};

}  // namespace kosoku::cache
