// The TLS module (nginx's ngx_http_ssl_module): `listen ... ssl` sockets speak TLS through TlsStream, with
// the certificates, protocols and session settings of the server the client names (SNI).
//
//   ssl_certificate FILE;                http, server  (several: one per key type, e.g. RSA and ECDSA)
//   ssl_certificate_key FILE;            http, server  (paired with ssl_certificate in order)
//   ssl_protocols [TLSv1] [TLSv1.1] [TLSv1.2] [TLSv1.3];   default TLSv1.2 TLSv1.3
//   ssl_ciphers LIST;                    default HIGH:!aNULL:!MD5 (TLS 1.2 and older)
//   ssl_prefer_server_ciphers on|off;    default off
//   ssl_ecdh_curve auto|GROUPS;          default auto
//   ssl_dhparam FILE;
//   ssl_conf_command NAME VALUE;         (several; OpenSSL's SSL_CONF_cmd, e.g. Ciphersuites)
//   ssl_session_cache off|none|[builtin[:SIZE]] [shared:NAME:SIZE];   default none
//   ssl_session_timeout TIME;            default 5m
//   ssl_session_tickets on|off;          default on
//   ssl_session_ticket_key FILE;         (several; the first encrypts)
//   ssl_reject_handshake on|off;         default off
//   ssl_early_data on|off;               default off
//   ssl_buffer_size SIZE;                default 16k
// Variables: $https, $ssl_protocol, $ssl_cipher, $ssl_server_name, $ssl_session_reused, $ssl_session_id,
// $ssl_alpn_protocol, $ssl_curve, $ssl_early_data. The handshake is bounded by client_header_timeout (the
// connection's timer runs from the accept), as in nginx.
#include <openssl/err.h>
#include <openssl/x509.h>

#include <cstdio>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/values.hh"
#include "core/config/variables.hh"
#include "core/http/connection.hh"
#include "core/http/exchange.hh"
#include "core/http/module_core.hh"
#include "core/http/phase.hh"
#include "core/http/variables.hh"
#include "core/tls/tls_conf.hh"
#include "core/tls/session_cache.hh"
#include "core/tls/tls_context.hh"
#include "core/tls/tls_stream.hh"

namespace kosoku::tls {

namespace {

using namespace config;  // the directive-table vocabulary

SslSrvConf& conf(Scope& s) { return s.srv->module<SslSrvConf>(); }

bool set_certificate(Builder& b, Scope& s, const Directive& d) {
  conf(s).certificates.push_back(d.args[0].value);
  conf(s).certificate_locs.push_back(d.args[0].loc);
  return true;
}

bool set_certificate_key(Builder& b, Scope& s, const Directive& d) {
  conf(s).certificate_keys.push_back(d.args[0].value);
  conf(s).certificate_key_locs.push_back(d.args[0].loc);
  return true;
}

// `ssl_protocols` / `proxy_ssl_protocols` words into Protocol bits.
bool parse_protocols(Builder& b, const Directive& d, uint32_t* out) {
  uint32_t mask = 0;
  for (size_t i = 0; i < d.args.size(); ++i) {
    const std::string& v = d.args[i].value;
    if (v == "TLSv1") {
      mask |= kTlsV1;
    } else if (v == "TLSv1.1") {
      mask |= kTlsV11;
    } else if (v == "TLSv1.2") {
      mask |= kTlsV12;
    } else if (v == "TLSv1.3") {
      mask |= kTlsV13;
    } else if (v == "SSLv2" || v == "SSLv3") {
      return b.fail(d.args[i].loc, absl::StrCat(v, " is not supported by this OpenSSL build (insecure)"));
    } else {
      return fail_invalid_value(b, d, i);
    }
  }
  *out = mask;
  return true;
}

bool set_protocols(Builder& b, Scope& s, const Directive& d) { return parse_protocols(b, d, &conf(s).protocols); }

bool set_session_cache(Builder& b, Scope& s, const Directive& d) {
  SslSrvConf& c = conf(s);
  for (size_t i = 0; i < d.args.size(); ++i) {
    std::string_view v = d.args[i].value;
    if (v == "off" || v == "none") {
      if (d.args.size() != 1) return fail_invalid_value(b, d, i);
      c.session_cache = v == "off" ? SessionCache::kOff : SessionCache::kNone;
    } else if (v == "builtin" || v.rfind("builtin:", 0) == 0) {
      c.session_cache = SessionCache::kBuiltin;
      if (v.size() > 7) {
        auto n = parse_number(v.substr(8), 1u << 30);
        if (!n || *n == 0) return fail_invalid_value(b, d, i);
        c.session_cache_entries = *n;
      }
    } else if (v.rfind("shared:", 0) == 0) {  // one cache for every core (session_cache.hh)
      std::string_view rest = v.substr(7);
      size_t colon = rest.find(':');
      auto size = colon == std::string_view::npos ? std::nullopt : parse_size(rest.substr(colon + 1));
      if (colon == 0 || !size || *size < 8192) return fail_invalid_value(b, d, i);
      c.shared_cache_name = std::string(rest.substr(0, colon));
      c.shared_cache_bytes = *size;
      if (c.session_cache != SessionCache::kBuiltin) c.session_cache = SessionCache::kOff;
    } else {
      return fail_invalid_value(b, d, i);
    }
  }
  return true;
}

bool set_conf_command(Builder& b, Scope& s, const Directive& d) {
  conf(s).conf_commands.emplace_back(d.args[0].value, d.args[1].value);
  conf(s).conf_command_loc = d.loc;
  return true;
}

bool set_dhparam(Builder& b, Scope& s, const Directive& d) {
  conf(s).dhparam = d.args[0].value;
  conf(s).dhparam_loc = d.args[0].loc;
  return true;
}

bool set_ticket_key(Builder& b, Scope& s, const Directive& d) {
  conf(s).ticket_key_files.push_back(d.args[0].value);
  conf(s).ticket_key_locs.push_back(d.args[0].loc);
  return true;
}

bool set_early_data(Builder& b, Scope& s, const Directive& d) {
  if (!parse_flag_arg(b, d, 0, &conf(s).early_data)) return false;
  if (conf(s).early_data) {
    b.notice(d.loc, "\"ssl_early_data on\": kosoku does not accept 0-RTT data yet; clients send their requests "
                    "after the handshake");
  }
  return true;
}

ClientConf& client(Scope& s) { return s.loc->module<ClientConf>(); }

bool set_proxy_ssl_protocols(Builder& b, Scope& s, const Directive& d) {
  return parse_protocols(b, d, &client(s).protocols);
}

bool set_proxy_ssl_name(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  ClientConf& c = client(s);
  c.name.clear();
  c.name_is_host = false;
  if (v == "$host") {
    c.name_is_host = true;
  } else if (v != "$proxy_host") {
    if (v.find('$') != std::string::npos) {
      return b.fail(d.args[0].loc, "\"proxy_ssl_name\" takes a name, $proxy_host or $host (other variables are "
                                   "not supported)");
    }
    c.name = v;
  }
  return true;
}

bool set_proxy_ssl_trusted_certificate(Builder& b, Scope& s, const Directive& d) {
  const std::string& v = d.args[0].value;
  std::string path = v.empty() || v[0] == '/' ? v : b.prefix + v;
  X509_STORE* store = X509_STORE_new();
  const bool ok = X509_STORE_load_file(store, path.c_str()) == 1;
  X509_STORE_free(store);
  if (!ok) {
    return b.fail(d.args[0].loc, absl::StrCat("cannot load trusted certificates \"", path, "\" (SSL: ",
                                              ssl_errors(), ")"));
  }
  client(s).trusted_certificate = std::move(path);
  return true;
}

template <auto M>
void inherit_client(LocationConf& c, const LocationConf& p) {
  c.module<ClientConf>().*M = p.module<ClientConf>().*M;
}

bool set_ssl(Builder& b, Scope&, const Directive& d) {
  return b.fail(d.loc, "the \"ssl\" directive is not supported: use the \"listen ... ssl\" parameter");
}

constexpr uint32_t kCtx = kCtxHttp | kCtxServer;

constexpr DirectiveSpec kTlsDirectives[] = {
    {.name = "ssl_certificate", .contexts = kCtx, .args = kTake1, .flags = kMulti, .set = set_certificate,
     .merge_srv = inherit<&SslSrvConf::certificates, &SslSrvConf::certificate_locs>},
    {.name = "ssl_certificate_key", .contexts = kCtx, .args = kTake1, .flags = kMulti, .set = set_certificate_key,
     .merge_srv = inherit<&SslSrvConf::certificate_keys, &SslSrvConf::certificate_key_locs>},
    {.name = "ssl_protocols", .contexts = kCtx, .args = k1More, .set = set_protocols,
     .merge_srv = inherit<&SslSrvConf::protocols>, .default_value = "TLSv1.2 TLSv1.3"},
    {.name = "ssl_ciphers", .contexts = kCtx, .args = kTake1, .set = set_string<&SslSrvConf::ciphers>,
     .merge_srv = inherit<&SslSrvConf::ciphers>, .default_value = "HIGH:!aNULL:!MD5"},
    {.name = "ssl_prefer_server_ciphers", .contexts = kCtx, .args = kTake1,
     .set = set_flag<&SslSrvConf::prefer_server_ciphers>, .merge_srv = inherit<&SslSrvConf::prefer_server_ciphers>,
     .default_value = "off"},
    {.name = "ssl_ecdh_curve", .contexts = kCtx, .args = kTake1, .set = set_string<&SslSrvConf::ecdh_curve>,
     .merge_srv = inherit<&SslSrvConf::ecdh_curve>, .default_value = "auto"},
    {.name = "ssl_dhparam", .contexts = kCtx, .args = kTake1, .set = set_dhparam,
     .merge_srv = inherit<&SslSrvConf::dhparam, &SslSrvConf::dhparam_loc>},
    {.name = "ssl_conf_command", .contexts = kCtx, .args = kTake2, .flags = kMulti, .set = set_conf_command,
     .merge_srv = inherit<&SslSrvConf::conf_commands, &SslSrvConf::conf_command_loc>},
    {.name = "ssl_session_cache", .contexts = kCtx, .args = kTake12, .set = set_session_cache,
     .merge_srv = inherit<&SslSrvConf::session_cache, &SslSrvConf::session_cache_entries,
                          &SslSrvConf::shared_cache_name, &SslSrvConf::shared_cache_bytes>,
     .default_value = "none"},
    {.name = "ssl_session_timeout", .contexts = kCtx, .args = kTake1, .set = set_sec_as_msec<&SslSrvConf::session_timeout_ms>,
     .merge_srv = inherit<&SslSrvConf::session_timeout_ms>, .default_value = "5m"},
    {.name = "ssl_session_tickets", .contexts = kCtx, .args = kTake1, .set = set_flag<&SslSrvConf::session_tickets>,
     .merge_srv = inherit<&SslSrvConf::session_tickets>, .default_value = "on"},
    {.name = "ssl_session_ticket_key", .contexts = kCtx, .args = kTake1, .flags = kMulti, .set = set_ticket_key,
     .merge_srv = inherit<&SslSrvConf::ticket_key_files, &SslSrvConf::ticket_key_locs>},
    {.name = "ssl_reject_handshake", .contexts = kCtx, .args = kTake1, .set = set_flag<&SslSrvConf::reject_handshake>,
     .merge_srv = inherit<&SslSrvConf::reject_handshake>, .default_value = "off"},
    {.name = "ssl_early_data", .contexts = kCtx, .args = kTake1, .set = set_early_data,
     .merge_srv = inherit<&SslSrvConf::early_data>, .default_value = "off"},
    {.name = "ssl_buffer_size", .contexts = kCtx, .args = kTake1, .set = set_size<&SslSrvConf::buffer_size>,
     .merge_srv = inherit<&SslSrvConf::buffer_size>, .default_value = "16k"},
    {.name = "ssl", .contexts = kCtx, .args = kTake1, .set = set_ssl},
    // TLS to origins (proxy_pass https://)
    {.name = "proxy_ssl_server_name", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ClientConf::server_name>, .merge_loc = inherit_client<&ClientConf::server_name>,
     .default_value = "off"},
    {.name = "proxy_ssl_name", .contexts = kCtxHttpAny, .args = kTake1, .set = set_proxy_ssl_name,
     .merge_loc =
         [](LocationConf& c, const LocationConf& p) {
           inherit_client<&ClientConf::name>(c, p);
           inherit_client<&ClientConf::name_is_host>(c, p);
         }},
    {.name = "proxy_ssl_verify", .contexts = kCtxHttpAny, .args = kTake1, .set = set_flag<&ClientConf::verify>,
     .merge_loc = inherit_client<&ClientConf::verify>, .default_value = "off"},
    {.name = "proxy_ssl_trusted_certificate", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_proxy_ssl_trusted_certificate, .merge_loc = inherit_client<&ClientConf::trusted_certificate>},
    {.name = "proxy_ssl_verify_depth", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_number<&ClientConf::verify_depth, 0>, .merge_loc = inherit_client<&ClientConf::verify_depth>,
     .default_value = "1"},
    {.name = "proxy_ssl_protocols", .contexts = kCtxHttpAny, .args = k1More, .set = set_proxy_ssl_protocols,
     .merge_loc = inherit_client<&ClientConf::protocols>, .default_value = "TLSv1.2 TLSv1.3"},
    {.name = "proxy_ssl_ciphers", .contexts = kCtxHttpAny, .args = kTake1, .set = set_string<&ClientConf::ciphers>,
     .merge_loc = inherit_client<&ClientConf::ciphers>, .default_value = "DEFAULT"},
    {.name = "proxy_ssl_session_reuse", .contexts = kCtxHttpAny, .args = kTake1,
     .set = set_flag<&ClientConf::session_reuse>, .merge_loc = inherit_client<&ClientConf::session_reuse>,
     .default_value = "on"},
};

std::string full_path(const Builder& b, const std::string& p) { return p.empty() || p[0] == '/' ? p : b.prefix + p; }

bool read_ticket_key(Builder& b, const std::string& file, const SourceLoc& loc, TicketKey* k) {
  FILE* f = fopen(file.c_str(), "rb");
  if (f == nullptr) return b.fail(loc, absl::StrCat("cannot open \"", file, "\": ", strerror(errno)));
  unsigned char buf[81];
  size_t n = fread(buf, 1, sizeof(buf), f);
  fclose(f);
  if (n != 48 && n != 80) return b.fail(loc, absl::StrCat("\"", file, "\" must be 48 or 80 bytes"));
  std::memcpy(k->name.data(), buf, 16);
  if (n == 48) {  // nginx: name, AES-128 key, HMAC key
    k->key_bytes = 16;
    std::memcpy(k->aes.data(), buf + 16, 16);
    std::memcpy(k->hmac.data(), buf + 32, 16);
  } else {  // nginx: name, HMAC key, AES-256 key
    k->key_bytes = 32;
    std::memcpy(k->hmac.data(), buf + 16, 32);
    std::memcpy(k->aes.data(), buf + 48, 32);
  }
  return true;
}

// Loads every server's certificates and ticket keys, and builds each TLS server's context once to check it
// (the cores build their own at start), so `kosoku -t` reports what the start would.
bool finalize(Builder& b) {
  HttpConf& http = b.main->http;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<const Credential>> loaded;  // inherited once
  std::map<std::string, std::shared_ptr<SharedSessionCache>> caches;  // shared:NAME:SIZE, by NAME
  // The sockets are grouped after the modules' finalize (config/listen.cc): the same grouping here, by address —
  // an address is ssl when any listen line for it says so, its default server the `default_server` one, else
  // the first to listen on it.
  struct Addr {
    const ListenConf* first;
    bool ssl = false;
    size_t default_si = 0;
    bool explicit_default = false;
    size_t line_si = 0, line_li = 0;  // the default server's listen line, for the error
  };
  std::vector<Addr> addrs;
  for (size_t si = 0; si < http.servers.size(); ++si) {
    const std::vector<ListenConf>& lines = http.servers[si]->listen;
    for (size_t li = 0; li < lines.size(); ++li) {
      size_t k = 0;
      while (k < addrs.size() && !same_sockaddr(addrs[k].first->addr, lines[li].addr)) ++k;
      if (k == addrs.size()) addrs.push_back(Addr{&lines[li], false, si, false, si, li});
      Addr& a = addrs[k];
      a.ssl = a.ssl || lines[li].ssl;
      if (lines[li].default_server && !a.explicit_default) {
        a.explicit_default = true;
        a.default_si = si;
        a.line_si = si;
        a.line_li = li;
      }
    }
  }
  std::vector<bool> on_ssl(http.servers.size(), false);
  for (size_t si = 0; si < http.servers.size(); ++si) {
    for (const ListenConf& l : http.servers[si]->listen) {
      for (const Addr& a : addrs) on_ssl[si] = on_ssl[si] || (a.ssl && same_sockaddr(a.first->addr, l.addr));
    }
  }
  for (size_t si = 0; si < http.servers.size(); ++si) {
    SslSrvConf& c = http.servers[si]->module<SslSrvConf>();
    if (c.certificates.size() < c.certificate_keys.size()) {
      return b.fail(c.certificate_key_locs[c.certificates.size()],
                    "no \"ssl_certificate\" is defined for this \"ssl_certificate_key\"");
    }
    for (size_t i = 0; i < c.certificates.size(); ++i) {
      if (i >= c.certificate_keys.size()) {
        return b.fail(c.certificate_locs[i], absl::StrCat("no \"ssl_certificate_key\" is defined for certificate \"",
                                                          c.certificates[i], "\""));
      }
      auto key = std::make_pair(full_path(b, c.certificates[i]), full_path(b, c.certificate_keys[i]));
      auto it = loaded.find(key);
      if (it == loaded.end()) {
        std::string err;
        auto cred = load_credential(key.first, key.second, &err);
        if (cred == nullptr) return b.fail(c.certificate_locs[i], err);
        it = loaded.emplace(key, std::move(cred)).first;
      }
      c.credentials.push_back(it->second);
    }
    c.ticket_keys.clear();
    for (size_t i = 0; i < c.ticket_key_files.size(); ++i) {
      TicketKey k;
      if (!read_ticket_key(b, full_path(b, c.ticket_key_files[i]), c.ticket_key_locs[i], &k)) return false;
      c.ticket_keys.push_back(k);
    }
    if (!c.dhparam.empty()) c.dhparam = full_path(b, c.dhparam);
    if (!c.shared_cache_name.empty()) {
      std::shared_ptr<SharedSessionCache>& cache = caches[c.shared_cache_name];
      if (cache == nullptr) cache = std::make_shared<SharedSessionCache>(c.shared_cache_name, c.shared_cache_bytes);
      c.shared_cache = cache;
    }
    if (!on_ssl[si]) continue;
    std::string err;
    SSL_CTX* ctx = new_server_ctx(c, &err);
    if (ctx == nullptr) {
      const SrvNode& node = *b.servers[si];
      const SourceLoc& at = !c.certificate_locs.empty() ? c.certificate_locs[0]
                            : !node.listen_locs.empty() ? node.listen_locs[0]
                                                        : c.conf_command_loc;
      return b.fail(at, err);
    }
    SSL_CTX_free(ctx);
  }
  // Every ssl socket's default server answers handshakes that name no other server: it needs a certificate
  // (or must refuse them: ssl_reject_handshake), as nginx requires.
  for (const Addr& a : addrs) {
    if (!a.ssl) continue;
    const SslSrvConf& c = http.servers[a.default_si]->module<SslSrvConf>();
    if (!c.credentials.empty() || c.reject_handshake) continue;
    const SrvNode& node = *b.servers[a.line_si];
    const SourceLoc& at =
        a.line_li < node.listen_locs.size() ? node.listen_locs[a.line_li] : http.servers[a.line_si]->loc;
    return b.fail(at, absl::StrCat("no \"ssl_certificate\" is defined for the \"listen ", a.first->text,
                                   " ssl\" directive"));
  }
  return true;
}

// ---- variables

using Src = const VariableSource&;

const TlsStream* tls_of(Src s) {
  const net::Stream* st = s.exchange().stream();
  if (st == nullptr || !st->secure()) return nullptr;
  return dynamic_cast<const TlsStream*>(st);
}

bool append(std::string& out, const char* v) {
  if (v == nullptr) return false;
  out.append(v);
  return true;
}

constexpr Variable kTlsVariables[] = {
    {"https",
     [](Src s, std::string_view, std::string& out) {
       if (tls_of(s) != nullptr) out.append("on");
       return true;
     }},
    {"ssl_protocol",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       return t != nullptr && append(out, SSL_get_version(t->ssl()));
     }},
    {"ssl_cipher",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       return t != nullptr && append(out, SSL_get_cipher_name(t->ssl()));
     }},
    {"ssl_server_name",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       if (t == nullptr || t->server_name().empty()) return false;
       out.append(t->server_name());
       return true;
     }},
    {"ssl_session_reused",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       if (t == nullptr) return false;
       out.append(SSL_session_reused(t->ssl()) ? "r" : ".");
       return true;
     }},
    {"ssl_session_id",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       SSL_SESSION* sess = t != nullptr ? SSL_get_session(t->ssl()) : nullptr;
       if (sess == nullptr) return false;
       unsigned len = 0;
       const unsigned char* id = SSL_SESSION_get_id(sess, &len);
       static constexpr char kHex[] = "0123456789abcdef";
       for (unsigned i = 0; i < len; ++i) {
         out.push_back(kHex[id[i] >> 4]);
         out.push_back(kHex[id[i] & 15]);
       }
       return true;
     }},
    {"ssl_alpn_protocol",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       if (t == nullptr) return false;
       const unsigned char* p = nullptr;
       unsigned len = 0;
       SSL_get0_alpn_selected(t->ssl(), &p, &len);
       out.append(reinterpret_cast<const char*>(p), len);
       return true;
     }},
    {"ssl_curve",
     [](Src s, std::string_view, std::string& out) {
       const TlsStream* t = tls_of(s);
       if (t == nullptr) return false;
       int nid = SSL_get_negotiated_group(t->ssl());
       const char* name = nid != 0 ? OBJ_nid2sn(nid & ~TLSEXT_nid_unknown) : nullptr;
       return append(out, name);
     }},
    {"ssl_early_data", [](Src s, std::string_view, std::string&) { return tls_of(s) != nullptr; }},
};

// nginx's answer to plain HTTP on a TLS socket (NGX_HTTP_TO_HTTPS: a 400 with its own page, then close).
constexpr std::string_view kPlainHttpPage =
    "<html>\r\n<head><title>400 The plain HTTP request was sent to HTTPS port</title></head>\r\n<body>\r\n"
    "<center><h1>400 Bad Request</h1></center>\r\n<center>The plain HTTP request was sent to HTTPS port</center>\r\n"
    "<hr><center>kosoku</center>\r\n</body>\r\n</html>\r\n";

http::PhaseResult refuse_plain_http(http::Exchange& ex) {
  const net::Stream* st = ex.stream();
  if (st == nullptr || !st->plain_on_tls_socket()) return http::PhaseResult::kNext;
  ex.disable_keep_alive();
  ex.respond(400, kPlainHttpPage, "text/html");
  return http::PhaseResult::kDone;
}

constexpr http::PhaseHandler kPhases[] = {{.phase = http::Phase::kPostRead, .run = &refuse_plain_http}};

/// One core's TLS: the contexts, and the layer for every stream accepted on an ssl socket.
class TlsCore final : public http::ModuleCore {
 public:
  TlsCore(reactor::Reactor& r, stats::CoreStats* stats) : pool_(256) {
    contexts_.shared.reactor = &r;
    if (stats != nullptr) contexts_.shared.counters = &stats->tls;
    contexts_.shared.in_pool = &pool_;
  }
  bool build(const config::MainConf& conf, const http::HttpServer& server, std::string* err) {
    contexts_.set_server(&server);
    return contexts_.build(conf, err);
  }
  net::FilterStream* filter_accepted(net::Stream& s, const config::ListenSocket& listen) override {
    SSL* ssl = contexts_.new_ssl(listen);
    if (ssl == nullptr) return nullptr;
    auto* t = new TlsStream(&s, ssl, TlsStream::Role::kServer, contexts_.shared);
    t->set_record_limit(listen.default_server->module<SslSrvConf>().buffer_size);
    t->set_close_timeout(listen.default_server->base.send_timeout_ms);
    return t;
  }

 private:
  net::InBufferPool pool_;
  TlsContexts contexts_;
};

}  // namespace

config::Module& module() {
  static config::Module m{
      .name = "tls",
      .directives = kTlsDirectives,
      .finalize = &finalize,
      .variables = kTlsVariables,
      .phases = kPhases,
      .init_core = [](http::HttpServer& server, std::string* err) -> std::unique_ptr<http::ModuleCore> {
        const http::CoreContext& core = server.core();
        bool any = false;
        for (const config::ListenSocket& ls : core.conf->http.listen_sockets) any = any || ls.conf.ssl;
        if (!any) return nullptr;
        auto t = std::make_unique<TlsCore>(*core.reactor, core.stats);
        if (!t->build(*core.conf, server, err)) return nullptr;
        return t;
      },
  };
  return m;
}

}  // namespace kosoku::tls
