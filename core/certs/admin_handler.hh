// `ssl_certificate_admin;` — the certificate store's admin API, a content handler for the location (its
// allow/deny apply first, in the access phase). Paths are relative to the location's prefix (for a regex or
// exact location: from the first "/certs" segment):
//
//   PUT    PREFIX/certs/HOST    body: PEM, the certificate chain (leaf first) and its private key (RSA,
//                               ECDSA or Ed25519, unencrypted). HOST may be a wildcard `*.example.com`;
//                               lower-cased. Validated first (PEM parses, a certificate, a key that matches
//                               the leaf, the leaf valid now): 400 {"error":...} otherwise, the old
//                               certificate stays. Then written durably (store.hh) and published: 201 (new)
//                               / 200 (replaced) with the description below; 500 {"error":...} if the write
//                               failed (nothing changed).
//   GET    PREFIX/certs/HOST    200 {"host":..,"subject":..,"issuer":..,"not_before":..,"not_after":..,
//                               "key_type":..,"sha256_fingerprint":..,"chain_certs":N} (never the key;
//                               read through this core's CertCache), or 404
//   DELETE PREFIX/certs/HOST    200 {"host":HOST,"deleted":true} once the file is unlinked durably, or 404
//   GET    PREFIX/certs[?offset=N&limit=M]
//                               200 {"count":TOTAL,"offset":N,"limit":M,"hosts":["a.example",..]} (limit
//                               default 100, at most 1000; stable order between changes)
// HEAD is GET without the body; other methods 405 with Allow. A PUT body over 1 MiB is 413. Responses are
// application/json with Cache-Control: no-store.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/certs/cert_cache.hh"
#include "core/http/exchange.hh"

namespace kosoku::certs {

/// Largest PUT body read (bytes); larger is 413.
inline constexpr size_t kMaxAdminBody = 1 << 20;

/// Per-request state of the admin handler (Exchange::state()).
class AdminState final : public http::ContentState, public http::BodySink, public CertWaiter {
 public:
  AdminState(CertCache& cache, http::Exchange& ex) : cache_(&cache), ex_(&ex) { cache.add_admin(this); }
  ~AdminState() override;

  void start();

  // ContentState
  void on_abort() override;
  void on_writable() override {}
  // BodySink
  void on_body_data(std::string_view data) override;
  void on_body_end() override;
  void on_body_error(int status) override;
  // CertWaiter (GET of one host)
  void on_cert_ready() override;

  /// A write came back from the store's writer thread (CertCache::poll, on the submitting core). Answers
  /// the request that submitted it, if it is still there.
  static void job_done(std::unique_ptr<StoreJob> job);
  /// The core goes away first: forget it and the write in flight (the request is never answered).
  void detach() {
    job_ = nullptr;
    cache_ = nullptr;
  }

 private:
  void reply(int status, const std::string& body);
  void reply_error(int status, std::string_view message);
  void handle_put();
  void answer_get();
  void submit(std::unique_ptr<StoreJob> job);
  void finished(const StoreJob& job);

  CertCache* cache_;  // null after detach()
  http::Exchange* ex_;
  std::string host_;
  std::string body_;
  std::string info_;  // PUT: the description returned once durable
  bool too_large_ = false;
  StoreJob* job_ = nullptr;  // submitted and not back yet (its owner field points here)
};

class AdminHandler final : public http::ContentHandler {
 public:
  explicit AdminHandler(CertCache& cache) : cache_(cache) {}
  void handle(http::Exchange& ex) override;

 private:
  CertCache& cache_;
};

/// Splits an admin request path: true with *list (PREFIX/certs) or *host (PREFIX/certs/HOST, as written);
/// false if the path is not an admin path. `loc_prefix`: the prefix location's pattern, or empty.
bool split_admin_path(std::string_view uri, std::string_view loc_prefix, bool* list, std::string_view* host);

}  // namespace kosoku::certs
