// nginx's `ssl_session_cache shared:NAME:SIZE`: one TLS session cache per NAME for the whole process, so a
// client resuming by session ID (TLS 1.2) or by a stateful ticket (TLS 1.3 with ssl_session_tickets off) may
// land on any core. Sessions are kept serialized (i2d_SSL_SESSION), at most SIZE bytes, the least recently
// stored leaving first.
//
// It is the one TLS structure the cores share. It stays off the request path: it is touched once per full
// handshake (a store) and once per resumption attempt (a lookup), each under one of 16 shard locks held only
// for a hash-map operation and a copy of a few hundred bytes, never across a handshake. Session tickets (the
// default) need no cache at all: every core shares their keys.
#pragma once

#include <openssl/ssl.h>

#include <array>
#include <cstddef>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace kosoku::tls {

class SharedSessionCache {
 public:
  SharedSessionCache(std::string name, size_t max_bytes);
  SharedSessionCache(const SharedSessionCache&) = delete;
  SharedSessionCache& operator=(const SharedSessionCache&) = delete;

  const std::string& name() const { return name_; }
  size_t max_bytes() const { return max_bytes_; }

  /// Stores `sess` under its ID (replacing an older one). Thread-safe.
  void put(const SSL_SESSION* sess);
  /// The session stored under `id` (a new object the caller owns), or null. Thread-safe.
  SSL_SESSION* get(std::string_view id);
  /// Forgets the session stored under `id`. Thread-safe.
  void remove(std::string_view id);
  /// Sessions stored now (for tests and stats).
  size_t size() const;

  /// Installs the cache on `ctx` (OpenSSL's external-cache callbacks; the internal per-context cache off).
  /// `cache_of(ctx)` must give this cache back for the contexts it is installed on.
  static void install(SSL_CTX* ctx, SharedSessionCache* (*cache_of)(const SSL_CTX* ctx));

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    mutable std::mutex mu;
    std::list<std::pair<std::string, std::string>> order;  // (id, DER), oldest first
    absl::flat_hash_map<std::string, std::list<std::pair<std::string, std::string>>::iterator> by_id;
    size_t bytes = 0;
  };
  Shard& shard(std::string_view id);

  std::string name_;
  size_t max_bytes_;
  std::array<Shard, kShards> shards_;
};

}  // namespace kosoku::tls
