// The TLS module's load-time checks (core/tls/tls_module.cc: certificates, keys, ticket keys, protocols) and
// the process-wide session cache (core/tls/session_cache.hh).
#include <openssl/ssl.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/config/loader.hh"
#include "core/tls/session_cache.hh"
#include "core/tls/tls_conf.hh"
#include "core/tls/tls_context.hh"
#include "gtest/gtest.h"
#include "tests/unit/tls_test_util.hh"

namespace kosoku {
namespace {

class TlsConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kosoku_tls_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    ASSERT_TRUE(testing::write_self_signed(dir_ / "a.crt", dir_ / "a.key", "a.test"));
    ASSERT_TRUE(testing::write_self_signed(dir_ / "b.crt", dir_ / "b.key", "b.test"));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  config::LoadResult load(const std::string& server_body) {
    const std::string text = "http {\n  server {\n    listen 127.0.0.1:8443 ssl;\n" + server_body + "\n  }\n}\n";
    std::ofstream(dir_ / "k.conf") << text;
    return config::load((dir_ / "k.conf").string());
  }
  std::filesystem::path dir_;
};

TEST_F(TlsConfig, LoadsAPairAndTheDefaults) {
  config::LoadResult r = load("    ssl_certificate a.crt;\n    ssl_certificate_key a.key;");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const tls::SslSrvConf& c = r.conf->http.servers[0]->module<tls::SslSrvConf>();
  ASSERT_EQ(c.credentials.size(), 1u);
  EXPECT_EQ(c.protocols, tls::kTlsV12 | tls::kTlsV13);
  EXPECT_TRUE(c.session_tickets);
  EXPECT_TRUE(r.conf->http.listen_sockets[0].conf.ssl);
}

TEST_F(TlsConfig, AKeyOfAnotherCertificateFailsAtItsLine) {
  config::LoadResult r = load("    ssl_certificate a.crt;\n    ssl_certificate_key b.key;");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.message.find("k.conf:4:21: "), std::string::npos) << r.error.message;
  EXPECT_NE(r.error.message.find("does not match the certificate"), std::string::npos) << r.error.message;
}

TEST_F(TlsConfig, MissingFilesAndMissingPairsAreErrors) {
  config::LoadResult r = load("    ssl_certificate nope.crt;\n    ssl_certificate_key a.key;");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.message.find("cannot load certificate"), std::string::npos) << r.error.message;
  r = load("    ssl_certificate a.crt;");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.message.find("no \"ssl_certificate_key\" is defined for certificate"), std::string::npos);
  r = load("    root /tmp;");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.message.find("no \"ssl_certificate\" is defined for the \"listen 127.0.0.1:8443 ssl\""),
            std::string::npos)
      << r.error.message;
  r = load("    ssl_reject_handshake on;");  // a default server that refuses every name needs no certificate
  EXPECT_TRUE(r.ok()) << r.error.message;
}

TEST_F(TlsConfig, BadValuesAreRefused) {
  const std::string pair = "    ssl_certificate a.crt;\n    ssl_certificate_key a.key;\n";
  EXPECT_FALSE(load(pair + "    ssl_protocols TLSv1.4;").ok());
  EXPECT_FALSE(load(pair + "    ssl_protocols SSLv3;").ok());
  EXPECT_FALSE(load(pair + "    ssl_ciphers NOT-A-CIPHER-LIST;").ok());
  EXPECT_FALSE(load(pair + "    ssl_session_cache shared:x;").ok());
  EXPECT_FALSE(load(pair + "    ssl on;").ok());
  std::ofstream(dir_ / "short.key") << "too short";
  config::LoadResult r = load(pair + "    ssl_session_ticket_key short.key;");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error.message.find("must be 48 or 80 bytes"), std::string::npos) << r.error.message;
  std::ofstream(dir_ / "t.key") << std::string(80, 'k');
  r = load(pair + "    ssl_session_ticket_key t.key;\n    ssl_session_cache shared:SSL:1m;");
  ASSERT_TRUE(r.ok()) << r.error.message;
  const tls::SslSrvConf& c = r.conf->http.servers[0]->module<tls::SslSrvConf>();
  ASSERT_EQ(c.ticket_keys.size(), 1u);
  EXPECT_EQ(c.ticket_keys[0].key_bytes, 32u);
  ASSERT_NE(c.shared_cache, nullptr);
  EXPECT_EQ(c.shared_cache->max_bytes(), 1u << 20);
}

TEST(TlsTicketKeys, GeneratedKeysDifferPerHourAndRepeatWithinIt) {
  const tls::TicketKey a = tls::generated_ticket_key(100), b = tls::generated_ticket_key(100);
  const tls::TicketKey c = tls::generated_ticket_key(101);
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.aes, b.aes);
  EXPECT_NE(a.name, c.name);
  EXPECT_NE(a.hmac, c.hmac);
}

// A real session (from a handshake over memory BIOs) stored, found, evicted and removed.
TEST(TlsSharedSessionCache, StoresFindsEvictsAndRemoves) {
  tls::SharedSessionCache cache("t", 16 * 1024);  // 1 KiB per shard: a few sessions each
  SSL_CTX* ctx = SSL_CTX_new(TLS_method());
  SSL* ssl = SSL_new(ctx);
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, reinterpret_cast<const unsigned char*>("\xc0\x2b"));
  ASSERT_NE(cipher, nullptr);  // ECDHE-ECDSA-AES128-GCM-SHA256
  std::vector<std::string> ids;
  for (int i = 0; i < 400; ++i) {
    SSL_SESSION* s = SSL_SESSION_new();
    unsigned char id[32], master[48] = {1, 2, 3};
    for (int k = 0; k < 32; ++k) id[k] = static_cast<unsigned char>(i * 7 + k);
    SSL_SESSION_set1_id(s, id, sizeof(id));
    SSL_SESSION_set_protocol_version(s, TLS1_2_VERSION);
    SSL_SESSION_set_cipher(s, cipher);
    SSL_SESSION_set1_master_key(s, master, sizeof(master));
    cache.put(s);
    ids.emplace_back(reinterpret_cast<char*>(id), sizeof(id));
    SSL_SESSION_free(s);
  }
  EXPECT_LT(cache.size(), 400u);  // the byte bound evicted the oldest
  SSL_SESSION* last = cache.get(ids.back());
  ASSERT_NE(last, nullptr);
  unsigned len = 0;
  const unsigned char* got = SSL_SESSION_get_id(last, &len);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got), len), ids.back());
  SSL_SESSION_free(last);
  SSL_SESSION* oldest = cache.get(ids.front());
  EXPECT_EQ(oldest, nullptr);
  SSL_SESSION_free(oldest);
  cache.remove(ids.back());
  EXPECT_EQ(cache.get(ids.back()), nullptr);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
}

}  // namespace
}  // namespace kosoku
