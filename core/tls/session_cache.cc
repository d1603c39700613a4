// The process-wide TLS session cache (contract: session_cache.hh).
#include "core/tls/session_cache.hh"

#include "absl/hash/hash.h"

namespace kosoku::tls {

namespace {

SharedSessionCache* (*g_cache_of)(const SSL_CTX*) = nullptr;

std::string_view id_of(const SSL_SESSION* sess) {
  unsigned len = 0;
  const unsigned char* id = SSL_SESSION_get_id(sess, &len);
  return {reinterpret_cast<const char*>(id), len};
}

int new_session(SSL* ssl, SSL_SESSION* sess) {
  if (SharedSessionCache* c = g_cache_of(SSL_get_SSL_CTX(ssl))) c->put(sess);
  return 0;  // the reference stays OpenSSL's
}

SSL_SESSION* get_session(SSL* ssl, const unsigned char* id, int len, int* copy) {
  *copy = 0;  // the returned object is a new one: OpenSSL takes it
  SharedSessionCache* c = g_cache_of(SSL_get_SSL_CTX(ssl));
  return c != nullptr ? c->get({reinterpret_cast<const char*>(id), static_cast<size_t>(len)}) : nullptr;
}

void remove_session(SSL_CTX* ctx, SSL_SESSION* sess) {
  if (SharedSessionCache* c = g_cache_of(ctx)) c->remove(id_of(sess));
}

}  // namespace

SharedSessionCache::SharedSessionCache(std::string name, size_t max_bytes)
    : name_(std::move(name)), max_bytes_(max_bytes) {}

SharedSessionCache::Shard& SharedSessionCache::shard(std::string_view id) {
  return shards_[absl::HashOf(id) % kShards];
}

void SharedSessionCache::put(const SSL_SESSION* sess) {
  std::string_view id = id_of(sess);
  if (id.empty()) return;
  const int len = i2d_SSL_SESSION(const_cast<SSL_SESSION*>(sess), nullptr);
  if (len <= 0) return;
  std::string der(static_cast<size_t>(len), '\0');
  auto* p = reinterpret_cast<unsigned char*>(der.data());
  if (i2d_SSL_SESSION(const_cast<SSL_SESSION*>(sess), &p) != len) return;
  Shard& s = shard(id);
  const size_t budget = max_bytes_ / kShards;
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto it = s.by_id.find(id); it != s.by_id.end()) {
    s.bytes -= it->second->first.size() + it->second->second.size();
    s.order.erase(it->second);
    s.by_id.erase(it);
  }
  s.bytes += id.size() + der.size();
  s.order.emplace_back(std::string(id), std::move(der));
  s.by_id.emplace(s.order.back().first, std::prev(s.order.end()));
  while (s.bytes > budget && s.order.size() > 1) {  // the oldest go first
    auto& old = s.order.front();
    s.bytes -= old.first.size() + old.second.size();
    s.by_id.erase(old.first);
    s.order.pop_front();
  }
}

SSL_SESSION* SharedSessionCache::get(std::string_view id) {
  std::string der;
  {
    Shard& s = shard(id);
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.by_id.find(id);
    if (it == s.by_id.end()) return nullptr;
    der = it->second->second;
  }
  const auto* p = reinterpret_cast<const unsigned char*>(der.data());
  return d2i_SSL_SESSION(nullptr, &p, static_cast<long>(der.size()));  // OpenSSL checks its age
}

void SharedSessionCache::remove(std::string_view id) {
  Shard& s = shard(id);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.by_id.find(id);
  if (it == s.by_id.end()) return;
  s.bytes -= it->second->first.size() + it->second->second.size();
  s.order.erase(it->second);
  s.by_id.erase(it);
}

size_t SharedSessionCache::size() const {
  size_t n = 0;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.by_id.size();
  }
  return n;
}

void SharedSessionCache::install(SSL_CTX* ctx, SharedSessionCache* (*cache_of)(const SSL_CTX* ctx)) {
  g_cache_of = cache_of;
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER | SSL_SESS_CACHE_NO_INTERNAL);
  SSL_CTX_sess_set_new_cb(ctx, new_session);
  SSL_CTX_sess_set_get_cb(ctx, get_session);
  SSL_CTX_sess_set_remove_cb(ctx, remove_session);
}

}  // namespace kosoku::tls
