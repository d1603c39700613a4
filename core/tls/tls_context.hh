// The OpenSSL contexts of one core: one SSL_CTX per server that speaks TLS, built from its SslSrvConf when the
// core starts (the same builder checks each server's settings at configuration load), and the callbacks
// every handshake runs through: the ClientHello (SNI: the certificate store, then the server of that name,
// then the socket's default server; ssl_reject_handshake), ALPN, and the session-ticket keys.
//
// Contexts are per core (shared-nothing: no session-cache lock or reference count is shared between cores);
// the certificates and keys inside them are the process's immutable Credential objects.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/config/conf.hh"
#include "core/tls/tls_conf.hh"
#include "core/tls/tls_stream.hh"

namespace kosoku::certs {
class CertCache;
}  // namespace kosoku::certs
namespace kosoku::http {
class HttpServer;
}  // namespace kosoku::http

namespace kosoku::tls {

/// Builds a server context from `c` (protocols, ciphers, curves, DH parameters, conf commands, session cache
/// and tickets, certificates). Null with *err set (nginx's wording: "SSL_CTX_set_cipher_list(...) failed
/// (SSL: ...)").
SSL_CTX* new_server_ctx(const SslSrvConf& c, std::string* err);

/// The options every kosoku context has (no renegotiation, no compression, no SSLv3) plus `extra_options`,
/// and the protocol versions of `protocols` (Protocol bits) only, for a server or a client context.
void set_protocols(SSL_CTX* ctx, uint32_t protocols, uint64_t extra_options);

/// The session-ticket keys used when no ssl_session_ticket_key is configured: derived from a secret made at
/// process start (shared by every core, so a client resumes on any core), a new key every hour; a ticket made
/// under the previous hour's key is still accepted (and renewed). Thread-safe.
TicketKey generated_ticket_key(uint64_t epoch);
inline constexpr uint64_t kTicketKeyPeriodS = 3600;

/// One core's contexts and the handshake callbacks' state.
class TlsContexts {
 public:
  TlsContexts() = default;
  TlsContexts(const TlsContexts&) = delete;
  TlsContexts& operator=(const TlsContexts&) = delete;
  ~TlsContexts();

  /// Builds the context of every server on a `listen ... ssl` socket of `conf`. False with *err set.
  bool build(const config::MainConf& conf, std::string* err);
  /// A new server-side SSL for a stream accepted on `listen` (its default server's context), or null.
  SSL* new_ssl(const config::ListenSocket& listen);
  /// The core's certificate store cache (ssl_certificate_store), looked up on first use; null without one.
  certs::CertCache* cert_cache();
  /// The core's server (for its modules' per-core parts).
  void set_server(const http::HttpServer* server) { server_ = server; }

  TlsShared shared;

 private:
  friend int client_hello(SSL* ssl, int* alert, void* arg);
  SSL_CTX* ctx_of(const config::ServerConf* srv) const {
    auto it = ctx_.find(srv);
    return it != ctx_.end() ? it->second : nullptr;
  }
  absl::flat_hash_map<const config::ServerConf*, SSL_CTX*> ctx_;
  const http::HttpServer* server_ = nullptr;
  certs::CertCache* cert_cache_ = nullptr;
  bool cert_cache_known_ = false;
};

/// The ListenSocket an accepted SSL came in on (SSL ex_data set by TlsContexts::new_ssl).
const config::ListenSocket* listen_of(const SSL* ssl);

}  // namespace kosoku::tls
