#include "core/certs/pem.hh"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstring>
#include <memory>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace kosoku::certs {

namespace {

// The reason of the last OpenSSL error (for messages), and an empty queue afterwards.
std::string openssl_reason() {
  unsigned long e = ERR_peek_last_error();
  std::string out;
  if (e != 0) {
    const char* r = ERR_reason_error_string(e);
    out = r != nullptr ? r : absl::StrCat("error ", e);
  }
  ERR_clear_error();
  return out;
}

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};

std::string asn1_time_iso(const ASN1_TIME* t) {
  struct tm tm {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    ERR_clear_error();
    return "";
  }
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string name_text(const X509_NAME* name) {
  BIO* b = BIO_new(BIO_s_mem());
  if (b == nullptr) return "";
  X509_NAME_print_ex(b, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string out(data != nullptr && n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string());
  BIO_free(b);
  ERR_clear_error();
  return out;
}

bool supported_key(EVP_PKEY* key) {
  const int id = EVP_PKEY_get_base_id(key);
  return id == EVP_PKEY_RSA || id == EVP_PKEY_EC || id == EVP_PKEY_ED25519;
}

}  // namespace

CertBundle& CertBundle::operator=(CertBundle&& o) noexcept {
  if (this != &o) {
    reset();
    leaf = o.leaf, chain = o.chain, key = o.key;
    o.leaf = nullptr, o.chain = nullptr, o.key = nullptr;
  }
  return *this;
}

void CertBundle::reset() {
  X509_free(leaf);
  if (chain != nullptr) sk_X509_pop_free(chain, X509_free);
  EVP_PKEY_free(key);
  leaf = nullptr, chain = nullptr, key = nullptr;
}

bool parse_bundle(std::string_view pem, CertBundle* out, std::string* error) {
  out->reset();
  ERR_clear_error();
  if (pem.size() > static_cast<size_t>(INT32_MAX)) {
    *error = "the PEM body is too large";
    return false;
  }
  CertBundle b;
  b.chain = sk_X509_new_null();
  if (b.chain == nullptr) {
    *error = "out of memory";
    ERR_clear_error();
    return false;
  }
  {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    if (!bio) {
      *error = "out of memory";
      ERR_clear_error();
      return false;
    }
    // PEM_read_bio_X509 skips blocks of other types (the key); it fails at the end of the input or on a
    // CERTIFICATE block that does not decode.
    for (;;) {
      X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
      if (x == nullptr) {
        unsigned long e = ERR_peek_last_error();
        if (e != 0 && ERR_GET_REASON(e) != PEM_R_NO_START_LINE) {
          *error = absl::StrCat("a CERTIFICATE block does not parse (", openssl_reason(), ")");
          return false;
        }
        ERR_clear_error();
        break;
      }
      if (b.leaf == nullptr) {
        b.leaf = x;
      } else if (sk_X509_push(b.chain, x) == 0) {
        X509_free(x);
        *error = "out of memory";
        ERR_clear_error();
        return false;
      }
    }
  }
  if (b.leaf == nullptr) {
    *error = "no certificate in the PEM body (expected \"-----BEGIN CERTIFICATE-----\" blocks, leaf first)";
    return false;
  }
  {
    std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    // A null passphrase callback with an empty passphrase: an encrypted key fails instead of prompting.
    auto no_pass = [](char*, int, int, void*) -> int { return -1; };
    b.key = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_pass, nullptr);
    if (b.key == nullptr) {
      const std::string reason = openssl_reason();
      if (pem.find("PRIVATE KEY-----") == std::string_view::npos) {
        *error = "no private key in the PEM body (expected a \"-----BEGIN PRIVATE KEY-----\" block)";
      } else if (pem.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") != std::string_view::npos ||
                 pem.find("Proc-Type: 4,ENCRYPTED") != std::string_view::npos) {
        *error = "the private key is encrypted (store it unencrypted: the server cannot ask for a passphrase)";
      } else {
        *error = absl::StrCat("the private key does not parse (", reason, ")");
      }
      return false;
    }
    EVP_PKEY* second = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_pass, nullptr);
    ERR_clear_error();
    if (second != nullptr) {
      EVP_PKEY_free(second);
      *error = "more than one private key in the PEM body";
      return false;
    }
  }
  if (!supported_key(b.key)) {
    *error = absl::StrCat("unsupported key type \"", OBJ_nid2sn(EVP_PKEY_get_base_id(b.key)),
                          "\" (RSA, ECDSA and Ed25519 are supported)");
    ERR_clear_error();
    return false;
  }
  if (X509_check_private_key(b.leaf, b.key) != 1) {
    ERR_clear_error();
    *error = "the private key does not match the certificate (the first certificate must be the leaf)";
    return false;
  }
  ERR_clear_error();
  *out = std::move(b);
  return true;
}

bool check_validity(X509* leaf, int64_t now_s, std::string* error) {
  time_t now = static_cast<time_t>(now_s);
  const ASN1_TIME* nb = X509_get0_notBefore(leaf);
  const ASN1_TIME* na = X509_get0_notAfter(leaf);
  const int before = X509_cmp_time(nb, &now);  // -1: nb < now (fine); 0: error
  const int after = X509_cmp_time(na, &now);   // 1: na > now (fine)
  ERR_clear_error();
  if (before == 0 || after == 0) {
    *error = "the certificate's validity dates do not parse";
    return false;
  }
  if (before > 0) {
    *error = absl::StrCat("the certificate is not yet valid: notBefore ", asn1_time_iso(nb));
    return false;
  }
  if (after < 0) {
    *error = absl::StrCat("the certificate has expired: notAfter ", asn1_time_iso(na));
    return false;
  }
  return true;
}

CertInfo describe(X509* leaf, STACK_OF(X509)* chain, EVP_PKEY* key) {
  CertInfo info;
  info.subject = name_text(X509_get_subject_name(leaf));
  info.issuer = name_text(X509_get_issuer_name(leaf));
  info.not_before = asn1_time_iso(X509_get0_notBefore(leaf));
  info.not_after = asn1_time_iso(X509_get0_notAfter(leaf));
  info.chain_certs = 1 + (chain != nullptr ? static_cast<size_t>(sk_X509_num(chain)) : 0);
  switch (EVP_PKEY_get_base_id(key)) {
    case EVP_PKEY_RSA:
      info.key_type = absl::StrCat("RSA-", EVP_PKEY_get_bits(key));
      break;
    case EVP_PKEY_EC: {
      char group[64] = {0};
      size_t len = 0;
      std::string curve = "unknown";
      if (EVP_PKEY_get_utf8_string_param(key, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), &len) == 1) {
        const char* nist = EC_curve_nid2nist(OBJ_txt2nid(group));
        curve = nist != nullptr ? nist : group;
      }
      info.key_type = absl::StrCat("ECDSA-", curve);
      break;
    }
    case EVP_PKEY_ED25519:
      info.key_type = "Ed25519";
      break;
    default:
      info.key_type = OBJ_nid2sn(EVP_PKEY_get_base_id(key));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (X509_digest(leaf, EVP_sha256(), md, &n) == 1) {
    static constexpr char kHex[] = "0123456789ABCDEF";
    for (unsigned int i = 0; i < n; ++i) {
      if (i > 0) info.sha256.push_back(':');
      info.sha256.push_back(kHex[md[i] >> 4]);
      info.sha256.push_back(kHex[md[i] & 15]);
    }
  }
  ERR_clear_error();
  return info;
}

bool encode_bundle(const CertBundle& b, std::string* out, std::string* error) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new(BIO_s_mem()));
  bool ok = bio != nullptr && PEM_write_bio_X509(bio.get(), b.leaf) == 1;
  for (int i = 0; ok && b.chain != nullptr && i < sk_X509_num(b.chain); ++i) {
    ok = PEM_write_bio_X509(bio.get(), sk_X509_value(b.chain, i)) == 1;
  }
  ok = ok && PEM_write_bio_PrivateKey(bio.get(), b.key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  if (!ok) {
    *error = absl::StrCat("the bundle could not be encoded (", openssl_reason(), ")");
    return false;
  }
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  out->assign(data, static_cast<size_t>(n));
  ERR_clear_error();
  return true;
}

void append_info_json(std::string& out, std::string_view host, const CertInfo& info) {
  auto field = [&](std::string_view name, std::string_view v) {
    out.append(",\"").append(name).append("\":");
    append_json_string(out, v);
  };
  out.append("{\"host\":");
  append_json_string(out, host);
  field("subject", info.subject);
  field("issuer", info.issuer);
  field("not_before", info.not_before);
  field("not_after", info.not_after);
  field("key_type", info.key_type);
  field("sha256_fingerprint", info.sha256);
  absl::StrAppend(&out, ",\"chain_certs\":", info.chain_certs, "}");
}

}  // namespace kosoku::certs
