// PEM bundles of the certificate store: a certificate chain (leaf first) and its private key, parsed,
// validated, described and written back with OpenSSL 3.
//
// Every function here leaves the calling thread's OpenSSL error queue empty (the TLS code on the same loop
// reads that queue after its own calls), and never throws.
#pragma once

#include <openssl/ssl.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/base/json_writer.hh"

namespace kosoku::certs {

/// Owned OpenSSL objects of one bundle. `chain` holds the certificates after the leaf (intermediates; maybe
/// none, never null once parsed). Movable, not copyable; frees what it holds.
struct CertBundle {
  X509* leaf = nullptr;
  STACK_OF(X509)* chain = nullptr;
  EVP_PKEY* key = nullptr;

  CertBundle() = default;
  CertBundle(CertBundle&& o) noexcept : leaf(o.leaf), chain(o.chain), key(o.key) { o.leaf = nullptr, o.chain = nullptr, o.key = nullptr; }
  CertBundle& operator=(CertBundle&& o) noexcept;
  CertBundle(const CertBundle&) = delete;
  CertBundle& operator=(const CertBundle&) = delete;
  ~CertBundle() { reset(); }
  void reset();
};

/// Parses `pem`: every CERTIFICATE block in order (the first is the leaf), and exactly one private key
/// (PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY; not encrypted) of type RSA, EC or Ed25519, which must
/// match the leaf (X509_check_private_key). Other PEM blocks and text between blocks are ignored. False
/// with a one-line *error for the admin API ("no certificate in the PEM body", "the private key does not
/// match the certificate", ...), *out then empty. Validity dates are not checked here (check_validity).
bool parse_bundle(std::string_view pem, CertBundle* out, std::string* error);

/// True if `now_s` (wall clock, seconds since the epoch) lies within the leaf's notBefore..notAfter; else
/// false with *error ("the certificate is not valid before 2031-01-01T00:00:00Z" / "... expired on ...").
bool check_validity(X509* leaf, int64_t now_s, std::string* error);

/// What the admin API and the console show of a bundle (never the key material).
struct CertInfo {
  std::string subject;      // RFC 2253, "CN=example.com,O=Example"
  std::string issuer;
  std::string not_before;   // ISO 8601 UTC, "2025-01-01T00:00:00Z"
  std::string not_after;
  std::string key_type;     // "RSA-2048", "ECDSA-P-256", "Ed25519"
  std::string sha256;       // SHA-256 of the leaf's DER, "AB:CD:..." (as `openssl x509 -fingerprint -sha256`)
  size_t chain_certs = 0;   // certificates in the bundle, leaf included
};
CertInfo describe(X509* leaf, STACK_OF(X509)* chain, EVP_PKEY* key);

/// The bundle as stored: the leaf, the chain, then the key as PKCS#8 PEM. False (with *error) only if
/// OpenSSL fails to encode.
bool encode_bundle(const CertBundle& b, std::string* out, std::string* error);

/// Appends `s` as a JSON string (core/base/json_writer.hh).
using base::append_json_string;
/// Appends {"host":...,"subject":...,"issuer":...,"not_before":...,"not_after":...,"key_type":...,
/// "sha256_fingerprint":...,"chain_certs":N}.
void append_info_json(std::string& out, std::string_view host, const CertInfo& info);

}  // namespace kosoku::certs
