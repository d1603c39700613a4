// Test helpers for TLS: a self-signed certificate and its key written as PEM files, made with OpenSSL's API
// (no openssl CLI, no files in the repository).
#pragma once

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace kosoku::testing {

/// Writes a self-signed ECDSA P-256 certificate for `cn` (valid from an hour ago for `days`; a negative
/// `days` makes it already expired) to `cert` and its key to `key`. False if a file cannot be written.
inline bool write_self_signed(const std::filesystem::path& cert, const std::filesystem::path& key,
                              const char* cn = "test", long days = 30) {
  EVP_PKEY* pkey = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), days < 0 ? days * 86400 * 2 : -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), days * 86400);
  X509_set_pubkey(x, pkey);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(x, name);
  X509_sign(x, pkey, EVP_sha256());
  std::filesystem::create_directories(cert.parent_path());
  std::filesystem::create_directories(key.parent_path());
  bool ok = false;
  if (FILE* f = std::fopen(cert.c_str(), "w")) {
    ok = PEM_write_X509(f, x) == 1;
    std::fclose(f);
  }
  if (FILE* f = ok ? std::fopen(key.c_str(), "w") : nullptr) {
    ok = PEM_write_PrivateKey(f, pkey, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    std::fclose(f);
  }
  X509_free(x);
  EVP_PKEY_free(pkey);
  return ok;
}

/// A copy of the repository's conf/ directory in `dir`, with the default TLS pair (tls/default.crt and .key)
/// the image build would generate; returns the copy's path of `name` (e.g. "appliance.conf").
inline std::string shipped_conf_with_default_pair(const std::filesystem::path& repo, const std::filesystem::path& dir,
                                                  const char* name) {
  std::filesystem::copy(repo / "conf", dir, std::filesystem::copy_options::recursive |
                                                std::filesystem::copy_options::skip_existing);
  if (!std::filesystem::exists(dir / "tls/default.crt")) {
    write_self_signed(dir / "tls/default.crt", dir / "tls/default.key", "kosoku");
  }
  return (dir / name).string();
}

}  // namespace kosoku::testing
