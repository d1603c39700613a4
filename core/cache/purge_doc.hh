// The JSON body of a purge request, in the shape of the CDNs' purge APIs:
//   {"tags": ["article-42"], "hosts": ["www.example.com"], "prefixes": ["http:www.example.com/img/"], "soft": true}
// Any of the lists may be given (several add up); "soft" makes every part a soft purge. A body is accepted on
// any proxy_cache_purge location when the request's Content-Type is application/json (purge_request.hh).
//
// Scope (purge_key.hh): without `any_host` a body stays within the purging request's host, as the other purge
// forms do — tags are bounded like a Surrogate-Key purge, a host must be the request's own, and a prefix must
// start with the request's key up to its host (`http:www.example.com/...`); anything else is refused (403).
// With `any_host` (a control-plane location: "clear this customer's site") hosts and prefixes may name any.
// A host purge removes every entry of that virtual host: the key prefixes host_prefixes() gives (both schemes).
//
// Bad input: not JSON, a list that is not an array of strings, an empty document, an invalid tag or host, more
// than kMaxPurgeItems items in all — 400 with the reason.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/cache/purge_key.hh"
#include "core/config/variables.hh"

namespace kosoku::cache {

inline constexpr size_t kMaxPurgeItems = 256;   // tags + hosts + prefixes in one body
inline constexpr size_t kMaxPurgeBody = 64 * 1024;  // bytes of a body

struct PurgeDoc {
  std::vector<std::string> tags;
  std::vector<std::string> hosts;
  std::vector<std::string> prefixes;
  bool soft = false;
};

/// Parses a body. False with *error ("invalid JSON at byte 12: ...", "no tags, hosts or prefixes", ...).
bool parse_purge_doc(std::string_view body, PurgeDoc* out, std::string* error);

/// The targets of a document, or why they are refused.
struct DocTargets {
  std::vector<PurgeTarget> targets;
  int status = 0;        // 0: accepted; else 400 or 403 with `refusal`
  std::string refusal;
};

/// The targets of `doc` for a purge through key template `t` (the purging request's `vars`, its host
/// `request_host` lower-case, and the location's rules).
DocTargets doc_targets(const PurgeDoc& doc, const config::Template& t, const config::VariableSource& vars,
                       const PurgeKeyRules& rules, std::string_view request_host);

}  // namespace kosoku::cache
