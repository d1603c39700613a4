// Test certificates for the certs unit tests, made with OpenSSL's API: self-signed, a given key type and
// validity window (seconds relative to now), PEM of the certificate followed by the PEM of its key.
#pragma once

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <string>

namespace kosoku::certs::testing {

enum class KeyKind { kRsa2048, kP256, kEd25519 };

inline EVP_PKEY* make_key(KeyKind k) {
  switch (k) {
    case KeyKind::kRsa2048:
      return EVP_PKEY_Q_keygen(nullptr, nullptr, "RSA", static_cast<size_t>(2048));
    case KeyKind::kP256:
      return EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256");
    case KeyKind::kEd25519:
      return EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519");
  }
  return nullptr;
}

inline std::string to_pem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  char* d = nullptr;
  long n = BIO_get_mem_data(b, &d);
  std::string s(d, static_cast<size_t>(n));
  BIO_free(b);
  return s;
}

inline std::string to_pem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  char* d = nullptr;
  long n = BIO_get_mem_data(b, &d);
  std::string s(d, static_cast<size_t>(n));
  BIO_free(b);
  return s;
}

struct TestCert {
  std::string cert_pem;
  std::string key_pem;
  std::string bundle() const { return cert_pem + key_pem; }
};

/// A self-signed certificate for CN=`cn`, valid from now+nb_s to now+na_s.
inline TestCert make_cert(const std::string& cn, KeyKind kind = KeyKind::kP256, long nb_s = -3600,
                          long na_s = 86400) {
  EVP_PKEY* key = make_key(kind);
  X509* x = X509_new();
  X509_set_version(x, 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), nb_s);
  X509_gmtime_adj(X509_getm_notAfter(x), na_s);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x, name);
  X509_sign(x, key, kind == KeyKind::kEd25519 ? nullptr : EVP_sha256());
  TestCert t{to_pem(x), to_pem(key)};
  X509_free(x);
  EVP_PKEY_free(key);
  return t;
}

}  // namespace kosoku::certs::testing
