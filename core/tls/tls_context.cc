// Building the per-core SSL_CTX objects and the handshake callbacks (contract: tls_context.hh), and loading
// certificates (tls_conf.hh).
#include "core/tls/tls_context.hh"

#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/base/log.hh"
#include "core/certs/cert_cache.hh"
#include "core/tls/session_cache.hh"
#include "core/net/alpn.hh"

namespace kosoku::tls {

Credential::~Credential() {
  X509_free(leaf);
  sk_X509_pop_free(chain, X509_free);
  EVP_PKEY_free(key);
}

std::string ssl_errors() {
  std::string out;
  unsigned long e;
  char buf[256];
  while ((e = ERR_get_error()) != 0) {
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out.append(" ");
    out.append(buf);
  }
  return out;
}

namespace {

// Reads every certificate of `bio` (leaf first) into `c`; false if there is none.
bool read_chain(BIO* bio, Credential& c) {
  c.leaf = PEM_read_bio_X509_AUX(bio, nullptr, nullptr, nullptr);
  if (c.leaf == nullptr) return false;
  c.chain = sk_X509_new_null();
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) sk_X509_push(c.chain, x);
  // The loop ends at the end of the PEM data (PEM_R_NO_START_LINE): not an error.
  unsigned long e = ERR_peek_last_error();
  if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) ERR_clear_error();
  return true;
}

bool check_pair(const Credential& c, std::string* err) {
  if (X509_check_private_key(c.leaf, c.key) != 1) {
    *err = absl::StrCat("the private key does not match the certificate (", ssl_errors(), ")");
    return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<const Credential> load_credential(const std::string& cert_path, const std::string& key_path,
                                                  std::string* err) {
  ERR_clear_error();
  auto c = std::make_shared<Credential>();
  BIO* bio = BIO_new_file(cert_path.c_str(), "r");
  if (bio == nullptr) {
    *err = absl::StrCat("cannot load certificate \"", cert_path, "\": ", ssl_errors());
    return nullptr;
  }
  bool ok = read_chain(bio, *c);
  BIO_free(bio);
  if (!ok) {
    *err = absl::StrCat("cannot load certificate \"", cert_path, "\": no certificate in the file (",
                        ssl_errors(), ")");
    return nullptr;
  }
  bio = BIO_new_file(key_path.c_str(), "r");
  if (bio == nullptr) {
    *err = absl::StrCat("cannot load certificate key \"", key_path, "\": ", ssl_errors());
    return nullptr;
  }
  c->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (c->key == nullptr) {
    *err = absl::StrCat("cannot load certificate key \"", key_path, "\": ", ssl_errors());
    return nullptr;
  }
  std::string why;
  if (!check_pair(*c, &why)) {
    *err = absl::StrCat("certificate \"", cert_path, "\" and key \"", key_path, "\": ", why);
    return nullptr;
  }
  return c;
}

std::shared_ptr<const Credential> parse_credential(std::string_view pem, std::string* err) {
  ERR_clear_error();
  auto c = std::make_shared<Credential>();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  bool ok = read_chain(bio, *c);
  BIO_free(bio);
  if (!ok) {
    *err = absl::StrCat("no certificate in the PEM data (", ssl_errors(), ")");
    return nullptr;
  }
  bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  c->key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (c->key == nullptr) {
    *err = absl::StrCat("no private key in the PEM data (", ssl_errors(), ")");
    return nullptr;
  }
  if (!check_pair(*c, err)) return nullptr;
  return c;
}

// ---- session tickets

namespace {

int g_conf_index = -1;    // SSL_CTX ex_data: the SslSrvConf it was built from
int g_listen_index = -1;  // SSL ex_data: the ListenSocket of an accepted stream
int g_ctxs_index = -1;    // SSL_CTX ex_data: the core's TlsContexts

void init_indexes() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_conf_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    g_listen_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    g_ctxs_index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  });
}

const SslSrvConf* conf_of(const SSL_CTX* ctx) {
  return static_cast<const SslSrvConf*>(SSL_CTX_get_ex_data(ctx, g_conf_index));
}

void derive(const unsigned char* secret, std::string_view label, uint64_t epoch, unsigned char* out, size_t n) {
  unsigned char msg[64];
  size_t len = label.size();
  std::memcpy(msg, label.data(), len);
  for (int i = 0; i < 8; ++i) msg[len++] = static_cast<unsigned char>(epoch >> (8 * i));
  unsigned char mac[EVP_MAX_MD_SIZE];
  size_t mac_len = 0;
  EVP_Q_mac(nullptr, "HMAC", nullptr, "SHA256", nullptr, secret, 32, msg, len, mac, sizeof(mac), &mac_len);
  std::memcpy(out, mac, n);
}

// The key that encrypts now, or the one named `name` (file keys, then this and the previous generated
// period); null when the name is unknown. *current: it is the key that encrypts new tickets.
bool find_ticket_key(const SslSrvConf* c, const unsigned char* name, TicketKey* out, bool* current) {
  if (c != nullptr && !c->ticket_keys.empty()) {
    for (size_t i = 0; i < c->ticket_keys.size(); ++i) {
      if (name == nullptr || std::memcmp(c->ticket_keys[i].name.data(), name, 16) == 0) {
        *out = c->ticket_keys[i];
        *current = i == 0;
        return true;
      }
    }
    return false;
  }
  const uint64_t epoch = static_cast<uint64_t>(time(nullptr)) / kTicketKeyPeriodS;
  // Per thread, the keys of the last two periods seen (three HMACs per period, not per handshake).
  thread_local TicketKey cached[2];
  thread_local uint64_t cached_epoch[2] = {~0ull, ~0ull};
  for (int k = 0; k < 2; ++k) {
    const uint64_t e = epoch - k;
    TicketKey& slot = cached[e & 1];
    if (cached_epoch[e & 1] != e) {
      slot = generated_ticket_key(e);
      cached_epoch[e & 1] = e;
    }
    if (name == nullptr || std::memcmp(slot.name.data(), name, 16) == 0) {
      *out = slot;
      *current = k == 0;
      return true;
    }
  }
  return false;
}

int ticket_key_cb(SSL* ssl, unsigned char* name, unsigned char* iv, EVP_CIPHER_CTX* cipher, EVP_MAC_CTX* mac,
                  int enc) {
  const SslSrvConf* c = conf_of(SSL_get_SSL_CTX(ssl));
  TicketKey k;
  bool current = false;
  if (!find_ticket_key(c, enc ? nullptr : name, &k, &current)) return 0;  // unknown: a full handshake
  const EVP_CIPHER* cbc = k.key_bytes == 16 ? EVP_aes_128_cbc() : EVP_aes_256_cbc();
  if (enc) {
    std::memcpy(name, k.name.data(), 16);
    if (RAND_bytes(iv, EVP_CIPHER_get_iv_length(cbc)) != 1) return -1;
    if (EVP_EncryptInit_ex(cipher, cbc, nullptr, k.aes.data(), iv) != 1) return -1;
  } else if (EVP_DecryptInit_ex(cipher, cbc, nullptr, k.aes.data(), iv) != 1) {
    return -1;
  }
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, k.hmac.data(), k.key_bytes),
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_end(),
  };
  if (EVP_MAC_CTX_set_params(mac, params) != 1) return -1;
  return enc || current ? 1 : 2;  // 2: accepted under an older key, a new ticket is issued
}

// ALPN (RFC 7301): the protocols of the server the ClientHello chose (ServerConf::alpn: h2 first where
// HTTP/2 is on, then http/1.1) or of a `listen ... http2` socket, in the server's order; a client that offers none of them is refused, as nginx
// does. Runs after the ClientHello callback.
int alpn_select(SSL* ssl, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned inlen,
                void*) {
  const TlsStream* t = TlsStream::of(ssl);
  const config::ListenSocket* listen = listen_of(ssl);
  const config::ServerConf* srv = t != nullptr && t->server() != nullptr ? t->server()
                                  : listen != nullptr                    ? listen->default_server
                                                                         : nullptr;
  // `listen ... http2` offers h2 for every server on the address (nginx's older form of `http2 on`).
  const std::string_view protos = listen != nullptr && listen->conf.http2 ? net::kAlpnH2Http11
                                  : srv != nullptr                         ? std::string_view(srv->alpn)
                                                                           : net::kAlpnHttp11;
  unsigned char* sel = nullptr;
  if (SSL_select_next_proto(&sel, outlen, reinterpret_cast<const unsigned char*>(protos.data()),
                            static_cast<unsigned>(protos.size()), in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

// The host_name of a ClientHello's server_name extension (RFC 6066 §3), as sent; false if absent or malformed.
bool sni_of(SSL* ssl, std::string* name) {
  const unsigned char* p = nullptr;
  size_t len = 0;
  if (SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &p, &len) != 1 || len < 5) return false;
  size_t list = (size_t{p[0]} << 8) | p[1];
  if (list + 2 != len || p[2] != TLSEXT_NAMETYPE_host_name) return false;
  size_t n = (size_t{p[3]} << 8) | p[4];
  if (n == 0 || n + 5 > len || n > 255) return false;
  name->assign(reinterpret_cast<const char*>(p + 5), n);
  for (char ch : *name) {
    if (static_cast<unsigned char>(ch) < 0x21 || static_cast<unsigned char>(ch) > 0x7e) return false;
  }
  return true;
}

// After SSL_set_SSL_CTX: the settings an SSL copied from its first context at SSL_new, taken from the new one.
void adopt_settings(SSL* ssl, SSL_CTX* from, SSL_CTX* to) {
  SSL_clear_options(ssl, SSL_get_options(ssl) & ~SSL_CTX_get_options(to));
  SSL_set_options(ssl, SSL_CTX_get_options(to));
  SSL_set_min_proto_version(ssl, SSL_CTX_get_min_proto_version(to));
  SSL_set_max_proto_version(ssl, SSL_CTX_get_max_proto_version(to));
  const SslSrvConf* a = conf_of(from);
  const SslSrvConf* b = conf_of(to);
  if (a != nullptr && b != nullptr) {
    if (a->ciphers != b->ciphers) SSL_set_cipher_list(ssl, b->ciphers.c_str());
    if (a->ecdh_curve != b->ecdh_curve && b->ecdh_curve != "auto") SSL_set1_groups_list(ssl, b->ecdh_curve.c_str());
  }
}

}  // namespace

TicketKey generated_ticket_key(uint64_t epoch) {
  static const std::array<unsigned char, 32> secret = [] {
    std::array<unsigned char, 32> s{};
    if (RAND_bytes(s.data(), static_cast<int>(s.size())) != 1) std::abort();
    return s;
  }();
  TicketKey k;
  derive(secret.data(), "kosoku ticket name", epoch, k.name.data(), k.name.size());
  derive(secret.data(), "kosoku ticket aes", epoch, k.aes.data(), k.aes.size());
  derive(secret.data(), "kosoku ticket hmac", epoch, k.hmac.data(), k.hmac.size());
  k.key_bytes = 32;
  return k;
}

// ---- the ClientHello: which server's certificate (RFC 6066 SNI; nginx's ngx_http_ssl_servername)

int client_hello(SSL* ssl, int* alert, void* arg) {
  auto* ctxs = static_cast<TlsContexts*>(arg);
  const config::ListenSocket* listen = listen_of(ssl);
  TlsStream* t = TlsStream::of(ssl);
  if (listen == nullptr || t == nullptr) return SSL_CLIENT_HELLO_SUCCESS;
  std::string name;
  if (t->server_name().empty() && sni_of(ssl, &name)) t->set_server_name(name);
  // Server names compare case-insensitively (RFC 6066 §3: DNS host names); $ssl_server_name keeps the bytes.
  const std::string host = absl::AsciiStrToLower(t->server_name());
  const config::ServerConf* srv = host.empty() ? listen->default_server : listen->find_server(host);
  t->set_server(srv);
  const SslSrvConf& c = srv->module<SslSrvConf>();
  // The certificate store first (exact name, then its wildcard): a certificate added at run time wins over
  // the configuration's. A name not loaded on this core suspends the handshake while its file is read through
  // the core's disk queue; OpenSSL calls back here when the handshake resumes.
  const certs::LoadedCert* stored = nullptr;
  certs::CertCache* cache = !host.empty() ? ctxs->cert_cache() : nullptr;
  if (cache != nullptr) {
    switch (cache->find(host, t, &stored)) {
      case certs::CertCache::Result::kPending:
        t->wait_for_certificate(*cache);
        return SSL_CLIENT_HELLO_RETRY;
      case certs::CertCache::Result::kFound:
        break;
      case certs::CertCache::Result::kAbsent:
        stored = nullptr;
        break;
    }
  }
  if (stored == nullptr && c.reject_handshake) {
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    return SSL_CLIENT_HELLO_ERROR;
  }
  SSL_CTX* want = ctxs->ctx_of(srv);
  SSL_CTX* have = SSL_get_SSL_CTX(ssl);
  if (want != nullptr && want != have && (!c.credentials.empty() || stored != nullptr)) {
    SSL_set_SSL_CTX(ssl, want);
    adopt_settings(ssl, have, want);
  }
  if (stored != nullptr) {
    SSL_certs_clear(ssl);  // the configured RSA/ECDSA pair must not be chosen instead by the signature algorithms
    if (SSL_use_cert_and_key(ssl, stored->leaf, stored->key, stored->chain, 1) != 1) {
      *alert = SSL_AD_INTERNAL_ERROR;
      return SSL_CLIENT_HELLO_ERROR;
    }
  }
  return SSL_CLIENT_HELLO_SUCCESS;
}

void set_protocols(SSL_CTX* ctx, uint32_t protocols, uint64_t extra_options) {
  uint64_t opts = SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION | SSL_OP_NO_SSLv3 | extra_options;
  if (!(protocols & kTlsV1)) opts |= SSL_OP_NO_TLSv1;
  if (!(protocols & kTlsV11)) opts |= SSL_OP_NO_TLSv1_1;
  if (!(protocols & kTlsV12)) opts |= SSL_OP_NO_TLSv1_2;
  if (!(protocols & kTlsV13)) opts |= SSL_OP_NO_TLSv1_3;
  SSL_CTX_set_options(ctx, opts);
  SSL_CTX_set_min_proto_version(ctx, (protocols & kTlsV1) ? TLS1_VERSION : 0);
}

SSL_CTX* new_server_ctx(const SslSrvConf& c, std::string* err) {
  init_indexes();
  ERR_clear_error();
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) {
    *err = absl::StrCat("SSL_CTX_new() failed (SSL: ", ssl_errors(), ")");
    return nullptr;
  }
  auto fail = [&](std::string msg) -> SSL_CTX* {
    *err = std::move(msg);
    SSL_CTX_free(ctx);
    return nullptr;
  };
  SSL_CTX_set_ex_data(ctx, g_conf_index, const_cast<SslSrvConf*>(&c));
  set_protocols(ctx, c.protocols,
                (c.prefer_server_ciphers ? SSL_OP_CIPHER_SERVER_PREFERENCE : 0) |
                    (c.session_tickets ? 0 : SSL_OP_NO_TICKET));
  SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_read_ahead(ctx, 1);
  if (SSL_CTX_set_cipher_list(ctx, c.ciphers.c_str()) != 1) {
    return fail(absl::StrCat("SSL_CTX_set_cipher_list(\"", c.ciphers, "\") failed (SSL: ", ssl_errors(), ")"));
  }
  if (c.ecdh_curve != "auto" && SSL_CTX_set1_groups_list(ctx, c.ecdh_curve.c_str()) != 1) {
    return fail(absl::StrCat("SSL_CTX_set1_curves_list(\"", c.ecdh_curve, "\") failed (SSL: ", ssl_errors(), ")"));
  }
  if (!c.dhparam.empty()) {
    BIO* bio = BIO_new_file(c.dhparam.c_str(), "r");
    EVP_PKEY* dh = bio != nullptr ? PEM_read_bio_Parameters(bio, nullptr) : nullptr;
    BIO_free(bio);
    if (dh == nullptr || SSL_CTX_set0_tmp_dh_pkey(ctx, dh) != 1) {
      EVP_PKEY_free(dh);
      return fail(absl::StrCat("cannot load DH parameters \"", c.dhparam, "\" (SSL: ", ssl_errors(), ")"));
    }
  }
  // The session ID context names the certificates (nginx derives it from them too): a session made under one
  // server's certificate does not resume under another's.
  unsigned char sid[EVP_MAX_MD_SIZE];
  unsigned sid_len = 0;
  if (c.credentials.empty() || X509_digest(c.credentials[0]->leaf, EVP_sha256(), sid, &sid_len) != 1) {
    std::memcpy(sid, "kosoku", 6);
    sid_len = 6;
  }
  SSL_CTX_set_session_id_context(ctx, sid, std::min<unsigned>(sid_len, SSL_MAX_SID_CTX_LENGTH));
  if (c.shared_cache != nullptr) {
    SharedSessionCache::install(ctx, [](const SSL_CTX* x) -> SharedSessionCache* {
      const SslSrvConf* sc = conf_of(x);
      return sc != nullptr ? sc->shared_cache.get() : nullptr;
    });
  } else if (c.session_cache == SessionCache::kBuiltin) {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    SSL_CTX_sess_set_cache_size(ctx, static_cast<long>(c.session_cache_entries));
  } else {
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  }
  SSL_CTX_set_timeout(ctx, static_cast<long>(c.session_timeout_ms / 1000));
  if (c.session_tickets) SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_key_cb);
  SSL_CTX_set_alpn_select_cb(ctx, alpn_select, nullptr);
  for (const std::shared_ptr<const Credential>& cred : c.credentials) {
    if (SSL_CTX_use_cert_and_key(ctx, cred->leaf, cred->key, cred->chain, 1) != 1) {
      return fail(absl::StrCat("SSL_CTX_use_cert_and_key() failed (SSL: ", ssl_errors(), ")"));
    }
  }
  if (!c.conf_commands.empty()) {
    SSL_CONF_CTX* cctx = SSL_CONF_CTX_new();
    SSL_CONF_CTX_set_flags(cctx, SSL_CONF_FLAG_FILE | SSL_CONF_FLAG_SERVER | SSL_CONF_FLAG_CERTIFICATE |
                                     SSL_CONF_FLAG_SHOW_ERRORS);
    SSL_CONF_CTX_set_ssl_ctx(cctx, ctx);
    for (const auto& [name, value] : c.conf_commands) {
      if (SSL_CONF_cmd(cctx, name.c_str(), value.c_str()) <= 0) {
        SSL_CONF_CTX_free(cctx);
        return fail(absl::StrCat("SSL_CONF_cmd(\"", name, "\", \"", value, "\") failed (SSL: ", ssl_errors(), ")"));
      }
    }
    SSL_CONF_CTX_finish(cctx);
    SSL_CONF_CTX_free(cctx);
  }
  return ctx;
}

// ---- TlsContexts

TlsContexts::~TlsContexts() {
  for (auto& [srv, ctx] : ctx_) SSL_CTX_free(ctx);
}

bool TlsContexts::build(const config::MainConf& conf, std::string* err) {
  init_indexes();
  shared.bio_method = stream_bio_method();
  for (const config::ListenSocket& ls : conf.http.listen_sockets) {
    if (!ls.conf.ssl) continue;
    for (const config::ServerConf* srv : ls.servers) {
      if (ctx_.contains(srv)) continue;
      SSL_CTX* ctx = new_server_ctx(srv->module<SslSrvConf>(), err);
      if (ctx == nullptr) return false;
      SSL_CTX_set_client_hello_cb(ctx, client_hello, this);
      SSL_CTX_set_ex_data(ctx, g_ctxs_index, this);
      ctx_.emplace(srv, ctx);
    }
  }
  return true;
}

SSL* TlsContexts::new_ssl(const config::ListenSocket& listen) {
  SSL_CTX* ctx = ctx_of(listen.default_server);
  if (ctx == nullptr) return nullptr;
  SSL* ssl = SSL_new(ctx);
  if (ssl == nullptr) return nullptr;
  SSL_set_ex_data(ssl, g_listen_index, const_cast<config::ListenSocket*>(&listen));
  return ssl;
}

certs::CertCache* TlsContexts::cert_cache() {
  if (!cert_cache_known_ && server_ != nullptr) {
    cert_cache_ = certs::CertCache::of(*server_);
    cert_cache_known_ = true;  // the module's parts exist once the loop runs: asked at the first handshake
  }
  return cert_cache_;
}

const config::ListenSocket* listen_of(const SSL* ssl) {
  return g_listen_index < 0 ? nullptr
                            : static_cast<const config::ListenSocket*>(SSL_get_ex_data(ssl, g_listen_index));
}

}  // namespace kosoku::tls
