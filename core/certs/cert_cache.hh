// One core's cache of loaded certificates, the interface the TLS code calls from OpenSSL's client-hello
// callback, and the certs module's per-core part (http::ModuleCore: it also serves `ssl_certificate_admin`).
//
// find(name) looks the SNI name up in the shared index (index.hh: no lock), then the wildcard "*.<parent>"
// (one label); the key found is looked up in this core's table:
//   loaded at the index's version       → kFound (a hit: no I/O, no allocation)
//   absent, or loaded at another version → the file is read through the core's DiskQueue ("default" queue,
//                                          io_uring: a page-cache hit completes inline, so kFound may come
//                                          back at once) and parsed on this core; else kPending and the
//                                          waiter's on_cert_ready() runs on this core when done
//   not in the index                     → kAbsent (the TLS code falls back to the server's own certificate)
// A file that cannot be read or parsed gives kAbsent (counted as a failure, logged) and is tried again
// after kRetryMs (kOverflowRetryMs when the disk queue was full) or when the index shows a new version. An exact entry that fails does not fall back to the
// wildcard.
//
// Bounds: at most `ssl_certificate_cache N` entries (least recently used ones are evicted; entries being
// loaded are never evicted, so concurrent loads can exceed N for a moment); an entry unused for `inactive`
// is freed by a 1-second timer. Objects of an evicted or replaced entry are freed at the next poll(), never
// during a call: a LoadedCert returned by find() stays valid until the caller returns to the loop, even if
// it calls find() again meanwhile.
//
// Threads: everything here runs on the core's loop thread (the writer thread only calls Inbox::deliver).
// poll() runs once per loop iteration: it is the core's QSBR quiescent point for the index, frees retired
// objects and hands finished admin writes back to their requests.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/certs/store.hh"
#include "core/disk/disk_queue.hh"
#include "core/http/module_core.hh"
#include "core/reactor/reactor.hh"

namespace kosoku::http {
class ContentHandler;
class HttpServer;
}  // namespace kosoku::http
namespace kosoku::config {
class Builder;
struct DirectiveSpec;
struct Module;
}  // namespace kosoku::config

namespace kosoku::certs {

class CertCache;
class AdminHandler;
class AdminState;

/// A loaded certificate: the leaf, the rest of the chain (intermediates, leaf excluded; never null, maybe
/// empty) and the private key. Owned by the cache: the caller takes its own references (SSL_use_cert_and_key
/// does) before returning to the loop.
struct LoadedCert {
  X509* leaf = nullptr;
  STACK_OF(X509)* chain = nullptr;
  EVP_PKEY* key = nullptr;
};

/// A handshake (or admin request) waiting for a certificate being loaded. Intrusive: a waiter is in at most
/// one cache list at a time; the cache never owns it. It must stay alive until on_cert_ready() runs or
/// cancel() is called.
class CertWaiter {
 public:
  /// On the cache's core, when the load finished (success or not): call find() again.
  virtual void on_cert_ready() = 0;
  bool waiting() const { return list_ != nullptr; }

 protected:
  ~CertWaiter() = default;

 private:
  friend class CertCache;
  struct List {
    CertWaiter* head = nullptr;
    CertWaiter* tail = nullptr;
  };
  CertWaiter* prev_ = nullptr;
  CertWaiter* next_ = nullptr;
  List* list_ = nullptr;
};

class CertCache final : public http::ModuleCore, public reactor::Poller, public reactor::Timer, public JobInbox {
 public:
  enum class Result { kFound, kPending, kAbsent };

  struct Counters {
    uint64_t hits = 0;        // find() answered from a loaded entry
    uint64_t misses = 0;      // loads started (absent entry or stale version)
    uint64_t loads = 0;       // loads that succeeded
    uint64_t failures = 0;    // loads that failed (unreadable file, bad PEM, disk queue overflow)
    uint64_t evictions = 0;   // entries dropped for the N bound or for being inactive
    uint64_t absent = 0;      // find() with no certificate in the store for the name
    uint64_t entries = 0;     // gauge
  };

  /// Tries again a load that failed after this long (ms); after a disk queue overflow, sooner.
  static constexpr uint64_t kRetryMs = 5000;
  static constexpr uint64_t kOverflowRetryMs = 100;
  /// Largest certificate file read (bytes); a larger file is a load failure.
  static constexpr size_t kMaxFileBytes = 1 << 20;

  /// `queue`: the core's disk queue (its ops complete on `r`), used in `mode` (io_uring in the server;
  /// tests also use the thread pool, whose ops always complete later). Timers on `r`; register with
  /// r.add_poller().
  CertCache(reactor::Reactor& r, disk::DiskQueue& queue, CertStore& store, const CertsConf& conf,
            config::AioMode mode = config::AioMode::kIoUring);
  ~CertCache() override;
  CertCache(const CertCache&) = delete;
  CertCache& operator=(const CertCache&) = delete;

  /// The core's cache, or null when the configuration has no ssl_certificate_store (or the module's part is
  /// not created yet). Loop thread of `server`.
  static CertCache* of(const http::HttpServer& server);

  /// `name`: the SNI host name, lower-case. See the header comment. kFound: *out valid until the caller
  /// returns to the loop. kPending: `w` (may be null: nobody is told) is linked and notified once.
  Result find(std::string_view name, CertWaiter* w, const LoadedCert** out);
  /// As find() without the wildcard step (the admin API's GET of one stored name).
  Result find_exact(std::string_view name, CertWaiter* w, const LoadedCert** out);
  /// Unlinks `w` if it waits (the handshake went away). Never calls it.
  void cancel(CertWaiter* w);

  bool poll() override;
  void fire() override;
  /// Expires entries unused since before now_ms - inactive (the timer's work; tests). Returns how many.
  size_t expire_idle(uint64_t now_ms);

  const Counters& counters() const { return counters_; }
  size_t size() const { return entries_.size(); }
  CertStore& store() { return store_; }
  uint64_t now_ms() const { return reactor_.now_ms(); }
  int64_t wall_time() const { return reactor_.wall_time(); }

  // ModuleCore: the admin API serves `ssl_certificate_admin;` locations.
  http::ContentHandler* content_handler() override;

  // JobInbox: the writer thread hands back a finished admin write (any thread).
  void deliver(std::unique_ptr<StoreJob> job) override;
  /// Live admin requests (admin_handler.cc): detached (never answered, never touching the cache again) if
  /// the core goes away first.
  void add_admin(AdminState* st) { admins_.push_back(st); }
  void remove_admin(AdminState* st) { std::erase(admins_, st); }

 private:
  struct Entry;
  class Loader;
  friend class Loader;

  Result lookup(std::string_view key, uint64_t version, CertWaiter* w, const LoadedCert** out);
  void start_load(Entry& e);
  /// Runs the load's steps while they complete inline; true when the load is finished.
  bool advance(Entry& e);
  void finish(Entry& e, bool ok, std::string_view why, uint64_t retry_ms = kRetryMs);
  void notify(Entry& e);
  void retire(Entry& e);  // frees e's objects at the next poll
  void erase_entry(Entry& e);
  void evict_for_insert();
  void lru_touch(Entry& e);
  void lru_unlink(Entry& e);
  static void link(CertWaiter::List& l, CertWaiter* w);
  static void unlink(CertWaiter* w);

  reactor::Reactor& reactor_;
  disk::DiskQueue& queue_;
  config::AioMode mode_;
  CertStore& store_;
  Qsbr::Reader* reader_ = nullptr;
  size_t max_;
  uint64_t inactive_ms_;
  absl::flat_hash_map<std::string, std::unique_ptr<Entry>> entries_;
  Entry* lru_head_ = nullptr;  // most recently used (ready or failed entries only)
  Entry* lru_tail_ = nullptr;
  std::vector<LoadedCert> graveyard_;  // freed at the next poll()
  std::string scratch_;
  Counters counters_;
  uint64_t last_log_ms_ = 0;

  // Admin writes coming back from the writer thread.
  std::mutex inbox_mu_;
  std::vector<std::unique_ptr<StoreJob>> inbox_;
  std::atomic<bool> inbox_ready_{false};
  std::vector<AdminState*> admins_;
  std::unique_ptr<AdminHandler> admin_;
};

/// The certs module's descriptor (certs/cert_cache.cc) and its directive table (certs/certs_directives.cc).
config::Module& module();
std::span<const config::DirectiveSpec> directives();
/// The module's load-time check: `ssl_certificate_admin` needs `ssl_certificate_store`.
bool finalize_certs(config::Builder& b);

}  // namespace kosoku::certs
