// Per-request lookups over the loaded configuration (declared in config/conf.hh): location choice and
// virtual-server choice. Called for every request: no allocation once warm, no shared lock: RE2 keeps a DFA
// cache behind an internal lock, so each thread (= core) matches with its own clone of every regex, made on
// first use; the clone's lock is never contended.
#include <algorithm>

#include <memory>

#include "absl/container/flat_hash_map.h"
#include "core/config/conf.hh"
#include "core/config/regex.hh"
#include "re2/re2.h"

namespace kosoku::config {

const re2::RE2& per_core_regex(const re2::RE2& shared) {
  thread_local absl::flat_hash_map<const re2::RE2*, std::unique_ptr<re2::RE2>> clones;
  std::unique_ptr<re2::RE2>& c = clones[&shared];
  // The pattern check guards against an address reused by a later configuration (tests load many).
  if (c == nullptr || c->pattern() != shared.pattern() ||
      c->options().case_sensitive() != shared.options().case_sensitive()) {
    c = std::make_unique<re2::RE2>(shared.pattern(), shared.options());
  }
  return *c;
}

namespace {

absl::string_view key(std::string_view s) { return absl::string_view(s.data(), s.size()); }


bool regex_matches(const re2::RE2& shared, std::string_view s) {
  re2::StringPiece text(s.data(), s.size());
  return per_core_regex(shared).Match(text, 0, text.size(), re2::RE2::UNANCHORED, nullptr, 0);
}

// nginx's NGX_DECLINED / NGX_AGAIN / NGX_OK / NGX_DONE of ngx_http_core_find_location.
enum class Found { kDeclined, kPrefix, kExact, kRegex };

// Exact match (kExact) or the longest prefix match (kPrefix, *cur updated), else kDeclined.
Found find_static(const LocationIndex& idx, std::string_view uri, const LocationConf** cur) {
  auto less = [](const LocationIndex::Entry& e, std::string_view u) { return e.pattern < u; };
  if (!idx.exact.empty()) {
    auto it = std::lower_bound(idx.exact.begin(), idx.exact.end(), uri, less);
    if (it != idx.exact.end() && it->pattern == uri) {
      *cur = it->loc;
      return Found::kExact;
    }
  }
  if (idx.prefix.empty()) return Found::kDeclined;
  auto greater = [](std::string_view u, const LocationIndex::Entry& e) { return u < e.pattern; };
  auto it = std::upper_bound(idx.prefix.begin(), idx.prefix.end(), uri, greater);
  int32_t i = static_cast<int32_t>(it - idx.prefix.begin()) - 1;
  while (i >= 0) {
    const LocationIndex::Entry& e = idx.prefix[static_cast<size_t>(i)];
    if (uri.substr(0, e.pattern.size()) == e.pattern) {
      *cur = e.loc;
      return Found::kPrefix;
    }
    i = e.parent;
  }
  return Found::kDeclined;
}

// ngx_http_core_find_location: static lookup; on a prefix match, recurse into its nested locations; unless
// an exact or regex match was final, try this level's regexes in order (skipped after a `^~` match); a
// matching regex location is searched for nested locations too.
Found find_in(const LocationIndex& idx, std::string_view uri, const LocationConf** cur) {
  bool noregex = false;
  Found rc = find_static(idx, uri, cur);
  if (rc == Found::kPrefix) {
    noregex = (*cur)->match == LocationConf::Match::kPrefixNoRegex;
    rc = find_in((*cur)->nested_index, uri, cur);
  }
  if (rc == Found::kExact || rc == Found::kRegex) return rc;
  if (!noregex) {
    for (const LocationConf* l : idx.regex) {
      if (regex_matches(*l->regex, uri)) {
        *cur = l;
        find_in(l->nested_index, uri, cur);
        return Found::kRegex;
      }
    }
  }
  return rc;
}

}  // namespace

const LocationConf* ServerConf::find_named(std::string_view name) const {
  for (const LocationConf& l : locations) {
    if (l.match == LocationConf::Match::kNamed && l.pattern == name) return &l;
  }
  return nullptr;
}

const LocationConf* ServerConf::find_location(std::string_view uri) const {
  const LocationConf* cur = &base;
  find_in(location_index, uri, &cur);
  return cur;
}

const ServerConf* ListenSocket::find_server(std::string_view host) const {
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  if (auto it = names.exact.find(key(host)); it != names.exact.end()) return it->second;
  if (!names.head.empty()) {
    if (auto it = names.head.find(key(host)); it != names.head.end() && it->second.bare) return it->second.bare;
    for (size_t i = 0; i < host.size(); ++i) {  // left to right: longest suffix first
      if (host[i] != '.') continue;
      auto it = names.head.find(key(host.substr(i + 1)));
      if (it != names.head.end() && it->second.sub) return it->second.sub;
    }
  }
  if (!names.tail.empty()) {
    for (size_t i = host.size(); i-- > 0;) {  // right to left: longest prefix first
      if (host[i] != '.' || i + 1 == host.size()) continue;
      auto it = names.tail.find(key(host.substr(0, i + 1)));
      if (it != names.tail.end()) return it->second;
    }
  }
  for (const auto& [re, srv] : names.regex) {
    if (regex_matches(*re, host)) return srv;
  }
  return default_server;
}

const DiskQueueConf* MainConf::find_disk_queue(std::string_view name) const {
  for (const DiskQueueConf& q : disk_queues) {
    if (q.name == name) return &q;
  }
  return nullptr;
}

}  // namespace kosoku::config
