// Configuration of the TLS module (nginx's ngx_http_ssl_module): stored by module,
// `srv.module<tls::SslSrvConf>()`. Every directive is http or server level and inherited by the servers that
// do not set it. Certificates are loaded and checked when the configuration is loaded (config time, also for
// `kosoku -t`): the loaded objects are immutable and shared by every core.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config/conf.hh"
#include "core/config/module_conf.hh"

namespace kosoku::config {
struct Module;
}  // namespace kosoku::config

namespace kosoku::tls {

class SharedSessionCache;

/// A certificate chain and its private key, loaded from PEM files (or from the certificate store). The
/// OpenSSL objects are reference counted and only read after loading, so every core may use them at once.
struct Credential {
  X509* leaf = nullptr;
  STACK_OF(X509)* chain = nullptr;  // the certificates after the leaf (may be empty, never null)
  EVP_PKEY* key = nullptr;
  Credential() = default;
  Credential(const Credential&) = delete;
  Credential& operator=(const Credential&) = delete;
  ~Credential();
};

/// A session ticket key (nginx's ssl_session_ticket_key file: 48 bytes = name, AES-128 key, HMAC key; 80
/// bytes = name, HMAC-SHA256 key, AES-256 key).
struct TicketKey {
  std::array<unsigned char, 16> name{};
  std::array<unsigned char, 32> aes{};
  std::array<unsigned char, 32> hmac{};
  size_t key_bytes = 32;  // 16: AES-128-CBC, 32: AES-256-CBC; the HMAC key is as long
};

/// `ssl_protocols` bits.
enum Protocol : uint32_t {
  kTlsV1 = 1u << 0,
  kTlsV11 = 1u << 1,
  kTlsV12 = 1u << 2,
  kTlsV13 = 1u << 3,
};

/// `ssl_session_cache off | none | [builtin[:SIZE]] [shared:NAME:SIZE]`.
enum class SessionCache { kOff, kNone, kBuiltin };

struct SslSrvConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kServer;
  // `ssl_certificate FILE;` / `ssl_certificate_key FILE;` (several: paired in order, one per key type; the
  // client's signature algorithms choose among them). Paths as written; loaded at finalize.
  std::vector<std::string> certificates;
  std::vector<config::SourceLoc> certificate_locs;
  std::vector<std::string> certificate_keys;
  std::vector<config::SourceLoc> certificate_key_locs;
  std::vector<std::shared_ptr<const Credential>> credentials;  // finalize: one per certificate
  uint32_t protocols = kTlsV12 | kTlsV13;         // `ssl_protocols` (nginx 1.23.4+'s default)
  std::string ciphers = "HIGH:!aNULL:!MD5";       // `ssl_ciphers` (TLS 1.2 and older; 1.3: ssl_conf_command)
  bool prefer_server_ciphers = false;             // `ssl_prefer_server_ciphers`
  std::string ecdh_curve = "auto";                // `ssl_ecdh_curve` (OpenSSL groups list, or auto)
  std::string dhparam;                            // `ssl_dhparam FILE;`
  config::SourceLoc dhparam_loc;
  std::vector<std::pair<std::string, std::string>> conf_commands;  // `ssl_conf_command NAME VALUE;`
  config::SourceLoc conf_command_loc;
  SessionCache session_cache = SessionCache::kNone;  // `ssl_session_cache`
  uint64_t session_cache_entries = 20480;            // builtin[:SIZE] (sessions per core)
  std::string shared_cache_name;                     // shared:NAME:SIZE (one cache for every core)
  uint64_t shared_cache_bytes = 0;
  std::shared_ptr<SharedSessionCache> shared_cache;  // finalize: the process's cache of that name
  uint64_t session_timeout_ms = 300000;              // `ssl_session_timeout` (5m)
  bool session_tickets = true;                       // `ssl_session_tickets`
  std::vector<std::string> ticket_key_files;         // `ssl_session_ticket_key FILE;` (first encrypts)
  std::vector<config::SourceLoc> ticket_key_locs;
  std::vector<TicketKey> ticket_keys;                // finalize: read from the files
  bool reject_handshake = false;                     // `ssl_reject_handshake`
  bool early_data = false;                           // `ssl_early_data` (0-RTT is never accepted: see README)
  uint64_t buffer_size = 16384;                      // `ssl_buffer_size`: largest record payload sent
};

/// TLS to an origin (nginx's proxy_ssl_* directives, location level; read by the proxy for proxy_pass https://).
struct ClientConf {
  static constexpr config::ConfLevel kLevel = config::ConfLevel::kLocation;
  bool server_name = false;           // `proxy_ssl_server_name` (send SNI; nginx's default off)
  std::string name;                   // `proxy_ssl_name` literal; empty: the proxy_pass host (port stripped)
  bool name_is_host = false;          // `proxy_ssl_name $host`: the request's host
  bool verify = false;                // `proxy_ssl_verify`
  std::string trusted_certificate;    // `proxy_ssl_trusted_certificate FILE` (full path; checked at load)
  uint32_t verify_depth = 1;          // `proxy_ssl_verify_depth`
  uint32_t protocols = kTlsV12 | kTlsV13;  // `proxy_ssl_protocols`
  std::string ciphers = "DEFAULT";    // `proxy_ssl_ciphers`
  bool session_reuse = true;          // `proxy_ssl_session_reuse`
};

config::Module& module();

/// Loads `cert_path` (PEM: leaf first, then its chain) and `key_path` (PEM private key) and checks that the
/// key belongs to the leaf. Null with *err set ("cannot load certificate \"F\": ...").
std::shared_ptr<const Credential> load_credential(const std::string& cert_path, const std::string& key_path,
                                                  std::string* err);
/// The same from PEM text in memory (the certificate store): the chain and the key in one buffer.
std::shared_ptr<const Credential> parse_credential(std::string_view pem, std::string* err);
/// OpenSSL's error queue as text (nginx style: "error:0A00018F:SSL routines::ee key too small"), emptied.
std::string ssl_errors();

}  // namespace kosoku::tls
