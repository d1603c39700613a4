// TLS to origins (contract: tls_client.hh).
#include "core/tls/tls_client.hh"

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "absl/strings/str_cat.h"
#include "core/tls/tls_context.hh"
#include "core/net/alpn.hh"

namespace kosoku::tls {

namespace {

// A new session from the origin (TLS 1.3 sends them after the handshake): kept in the stream's slot.
int keep_session(SSL* ssl, SSL_SESSION* sess) {
  TlsStream* t = TlsStream::of(ssl);
  SSL_SESSION** slot = t != nullptr ? t->session_slot() : nullptr;
  if (slot == nullptr) return 0;
  if (*slot != nullptr) SSL_SESSION_free(*slot);
  *slot = sess;
  return 1;  // the reference is ours
}

}  // namespace

TlsClient::TlsClient(reactor::Reactor& r) : pool_(64) {
  shared_.reactor = &r;
  shared_.in_pool = &pool_;
  shared_.bio_method = stream_bio_method();
}

TlsClient::~TlsClient() {
  for (auto& [conf, ctx] : ctx_) SSL_CTX_free(ctx);
}

SSL_CTX* TlsClient::new_client_ctx(const ClientConf& c, std::string* err) {
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (ctx == nullptr) {
    *err = absl::StrCat("SSL_CTX_new() failed (SSL: ", ssl_errors(), ")");
    return nullptr;
  }
  set_protocols(ctx, c.protocols, 0);
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  if (SSL_CTX_set_cipher_list(ctx, c.ciphers.c_str()) != 1) {
    *err = absl::StrCat("SSL_CTX_set_cipher_list(\"", c.ciphers, "\") failed (SSL: ", ssl_errors(), ")");
    SSL_CTX_free(ctx);
    return nullptr;
  }
  if (c.verify) {
    if (SSL_CTX_load_verify_locations(ctx, c.trusted_certificate.c_str(), nullptr) != 1) {
      *err = absl::StrCat("SSL_CTX_load_verify_locations(\"", c.trusted_certificate, "\") failed (SSL: ",
                          ssl_errors(), ")");
      SSL_CTX_free(ctx);
      return nullptr;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    SSL_CTX_set_verify_depth(ctx, static_cast<int>(c.verify_depth));
  }
  if (c.session_reuse) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, keep_session);
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  }
  SSL_CTX_set_alpn_protos(ctx, reinterpret_cast<const unsigned char*>(net::kAlpnHttp11.data()),
                          static_cast<unsigned>(net::kAlpnHttp11.size()));
  return ctx;
}

net::Stream* TlsClient::connect(net::Stack& stack, const sockaddr* addr, socklen_t addr_len,
                                net::StreamHandler& handler, const ClientConf& conf, std::string_view name,
                                SSL_SESSION** session, std::string* err) {
  SSL_CTX*& ctx = ctx_[&conf];
  if (ctx == nullptr) {
    ctx = new_client_ctx(conf, err);
    if (ctx == nullptr) {
      ctx_.erase(&conf);
      return nullptr;
    }
  }
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) {
    *err = absl::StrCat("SSL_new() failed (SSL: ", ssl_errors(), ")");
    return nullptr;
  }
  std::string host(name);
  if (conf.server_name && !host.empty()) SSL_set_tlsext_host_name(ssl, host.c_str());
  if (conf.verify && !host.empty()) {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    SSL_set1_host(ssl, host.c_str());
  }
  if (conf.session_reuse && session != nullptr && *session != nullptr) SSL_set_session(ssl, *session);
  auto* t = new TlsStream(nullptr, ssl, TlsStream::Role::kClient, shared_);
  if (conf.session_reuse) t->set_session_slot(session);
  t->set_handler(&handler);
  net::Stream* lower = stack.connect(addr, addr_len, *t, err);
  if (lower == nullptr) {
    delete t;
    return nullptr;
  }
  t->attach(*lower);
  return t;
}

}  // namespace kosoku::tls
