// TLS to origins (proxy_pass https://): one core's client contexts, one per distinct proxy_ssl_* settings
// (built on first use from the location's ClientConf, which lives as long as the configuration), and the
// streams they start. Verification (proxy_ssl_verify) checks the chain against proxy_ssl_trusted_certificate
// and the name (RFC 6125 via OpenSSL's host check) during the handshake, so a wrong certificate fails the
// connection (the proxy answers 502). Per core; nothing is thread-safe.
#pragma once

#include <openssl/ssl.h>

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/tls/tls_conf.hh"
#include "core/tls/tls_stream.hh"

namespace kosoku::tls {

class TlsClient {
 public:
  explicit TlsClient(reactor::Reactor& r);
  ~TlsClient();
  TlsClient(const TlsClient&) = delete;
  TlsClient& operator=(const TlsClient&) = delete;

  /// Opens a TLS connection to `addr` through `stack`: the returned stream (null with *err on an immediate
  /// failure) calls `handler.on_connected` once the TLS handshake is complete. `name`: the name sent as SNI
  /// (when conf.server_name) and verified (when conf.verify). `session`: a slot holding the session to resume
  /// and receiving the next one (null: no reuse).
  net::Stream* connect(net::Stack& stack, const sockaddr* addr, socklen_t addr_len, net::StreamHandler& handler,
                       const ClientConf& conf, std::string_view name, SSL_SESSION** session, std::string* err);

  /// Builds a client context for `conf` (also used at load to check the settings). Null with *err set.
  static SSL_CTX* new_client_ctx(const ClientConf& conf, std::string* err);

 private:
  net::InBufferPool pool_;
  TlsShared shared_;
  absl::flat_hash_map<const ClientConf*, SSL_CTX*> ctx_;
};

}  // namespace kosoku::tls
