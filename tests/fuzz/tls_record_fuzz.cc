// libFuzzer target for TLS records arriving through TlsStream's BIO path (core/tls/tls_stream.hh): the bytes
// a client sends to a `listen ... ssl` socket (ClientHello, alerts, garbage, records cut anywhere), and the
// bytes an origin sends back to kosoku's TLS client (proxy_pass https://). The stream sits over an in-memory
// net::Stream; input arrives in pieces whose sizes come from the input itself, so records are cut at every
// offset. Invariants abort with a message. Seeds: tests/fuzz/corpus/tls_record/ (a real ClientHello and
// ServerHello flight). Run: ./tls_record_fuzz tests/fuzz/corpus/tls_record
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/net/stream.hh"
#include "core/reactor/reactor.hh"
#include "core/tls/tls_conf.hh"
#include "core/tls/tls_context.hh"
#include "core/tls/tls_stream.hh"
#include "tests/fuzz/fuzz_check.hh"

namespace {

using namespace kosoku;

// The network side: input is what the fuzzer fed and the layer has not consumed; output is collected.
class MemStream final : public net::Stream {
 public:
  std::string in, out;
  bool closed = false;
  std::span<const char> input() const override { return {in.data(), in.size()}; }
  void consume(size_t n) override {
    FUZZ_CHECK(n <= in.size());
    in.erase(0, n);
  }
  void pause_reading() override {}
  void resume_reading() override {}
  std::span<char> reserve(size_t min_bytes) override {
    scratch_.resize(std::max<size_t>(min_bytes, 4096));
    return {scratch_.data(), scratch_.size()};
  }
  void commit(size_t n) override { out.append(scratch_.data(), n); }
  void write_ref(const char* data, size_t len) override { out.append(data, len); }
  void flush() override {}
  size_t pending_output() const override { return 0; }
  void set_low_water(size_t) override {}
  void close(Close) override { closed = true; }
  void set_handler(net::StreamHandler*) override {}
  const sockaddr* peer() const override { return nullptr; }
  std::string_view peer_text() const override { return "fuzz"; }
  uint16_t local_port() const override { return 443; }

 private:
  std::string scratch_;
};

// The HTTP side: counts what the layer tells it; plaintext is consumed as it comes.
class Recorder final : public net::StreamHandler {
 public:
  size_t plaintext = 0;
  bool peer_closed = false, connected = false;
  void on_readable(net::Stream& s) override {
    FUZZ_CHECK(!s.input().empty());
    plaintext += s.input().size();
    s.consume(s.input().size());
  }
  void on_peer_closed(net::Stream&) override { peer_closed = true; }
  void on_writable(net::Stream&) override {}
  void on_connected(net::Stream&) override { connected = true; }
  void on_closed(net::Stream&, int) override {}
};

struct Fixture {
  reactor::Reactor reactor{0, 64};
  net::InBufferPool pool{16};
  tls::TlsShared shared;
  tls::SslSrvConf conf;
  SSL_CTX* server = nullptr;
  SSL_CTX* client = nullptr;

  Fixture() {
    shared.reactor = &reactor;
    shared.in_pool = &pool;
    shared.bio_method = tls::stream_bio_method();
    // A self-signed P-256 certificate made here: the fuzzer needs no files.
    auto cred = std::make_shared<tls::Credential>();
    cred->key = EVP_EC_gen("P-256");
    cred->leaf = X509_new();
    X509_set_version(cred->leaf, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cred->leaf), 1);
    X509_gmtime_adj(X509_getm_notBefore(cred->leaf), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cred->leaf), 86400);
    X509_set_pubkey(cred->leaf, cred->key);
    X509_NAME* name = X509_get_subject_name(cred->leaf);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>("fuzz.test"), -1,
                               -1, 0);
    X509_set_issuer_name(cred->leaf, name);
    X509_sign(cred->leaf, cred->key, EVP_sha256());
    cred->chain = sk_X509_new_null();
    conf.protocols = tls::kTlsV1 | tls::kTlsV11 | tls::kTlsV12 | tls::kTlsV13;
    conf.credentials.push_back(cred);
    std::string err;
    server = tls::new_server_ctx(conf, &err);
    FUZZ_CHECK(server != nullptr);
    client = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_mode(client, SSL_MODE_RELEASE_BUFFERS);
  }
};

Fixture& fixture() {
  static Fixture* f = new Fixture();
  return *f;
}

// Feeds `data` to `t` in pieces whose sizes the bytes themselves choose.
void feed(tls::TlsStream& t, MemStream& lower, const uint8_t* data, size_t size) {
  size_t i = 0;
  while (i < size && !lower.closed) {
    size_t n = 1 + data[i] % 97;
    if (n > size - i) n = size - i;
    lower.in.append(reinterpret_cast<const char*>(data + i), n);
    i += n;
    t.on_readable(lower);
  }
  if (!lower.closed) t.on_peer_closed(lower);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Fixture& f = fixture();
  if (size == 0) return 0;
  const bool as_client = (data[0] & 1) != 0;
  {
    MemStream lower;
    Recorder rec;
    SSL* ssl = SSL_new(as_client ? f.client : f.server);
    auto* t = new tls::TlsStream(&lower, ssl, as_client ? tls::TlsStream::Role::kClient
                                                        : tls::TlsStream::Role::kServer, f.shared);
    t->set_handler(&rec);
    if (as_client) {
      t->on_connected(lower);  // the ClientHello goes out
      FUZZ_CHECK(!lower.out.empty() || lower.closed);
    }
    feed(*t, lower, data + 1, size - 1);
    // Garbage never becomes plaintext: without a completed handshake nothing is delivered.
    if (!t->handshake_done()) FUZZ_CHECK(rec.plaintext == 0 || t->plain_http());
    FUZZ_CHECK(t->pending_output() == 0);
    delete t;  // never told on_closed (the memory stream does not close): freed here
  }
  return 0;
}
