// What one purge request may remove: the key it names, whether a `*` in it is a wildcard, and the bound that
// keeps it inside the purging request's own host. Pure functions over a compiled key template and the request's
// variables; purge.hh removes what the PurgeTarget selects.
//
// Wildcards. Only a trailing `*` is one (nginx plus and ngx_cache_purge's partial keys: `http:example.com/img/*`
// selects every key with that prefix, `*` alone the whole zone); a `*` anywhere else is an ordinary byte. A
// trailing `*` is a wildcard when the configuration asked for it: the `wildcard` parameter of
// `proxy_cache_purge` (the `*` then may come from the request: `PURGE /img/*`, `?key=/img/*`), or a `*` written in
// the KEY of `proxy_cache_purge ZONE KEY` itself (`"*"`, `"$scheme:$host/*"`). Otherwise the key, `*` included,
// is purged exactly: `PURGE /p/*` removes the entry cached for the URI `/p/*`, nothing else.
//
// Host scope. Several server blocks may share one keys zone, their keys told apart by the host in them
// (`proxy_cache_key $scheme:$host$request_uri`). A purge stays inside the purging request's host unless the
// configuration says `any_host`:
//   - the host of a key template is its first "host segment" — $host, $http_host, $server_name or $proxy_host —
//     when every segment before it is fixed by the configuration or the connection (literal text, $scheme,
//     $server_name, $server_port, $proxy_host, $proxy_port, $hostname), so the client cannot forge what
//     precedes it;
//   - in the expanded key, the byte right after the host (if any) must not be one that can continue a host
//     (host_byte: a name, a port, an IP literal): `http:a.example` + `x/k` would be a key of `a.examplex`;
//   - a wildcard's prefix must reach past the host, or end exactly at it, and then a key matches only where
//     its host ends there too: with host a.example, `?key=*` purges `http:a.example` and `http:a.example/...`
//     but neither `http:a.examplex/...` nor `http:a.example.evil/...`.
// A method-form purge (`PURGE /uri`) of the request's own key is always allowed: it names exactly the entry a GET
// of that URI in that location reads. A key that the configuration determines completely (no client data in
// the template, e.g. `"*"`) is the configuration's own choice and is not bounded. What the bound cannot fix is
// a key template that runs a trusted prefix and the host together (`$scheme$host`: `http` + `sa.example` reads
// like `https` + `a.example`): keep a separator such as `:` or `://` after $scheme, as the examples do.
//
// Configuration time (check_purge_template): a `proxy_cache_purge ZONE KEY` whose KEY takes client data and has
// no host segment before it, or a `wildcard` method-form purge whose cache key has none, is an error unless
// `any_host` is given: such a purge could name any host's keys.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/variables.hh"

namespace kosoku::cache {

/// A byte that can continue a host inside a key: a name (ALPHA, DIGIT, "-", ".", "_", "~", "%", bytes >= 0x80),
/// a port (":", DIGIT) or an IP literal ("[", "]"). The end of a host in a key is any other byte, or the end.
bool host_byte(char c);

/// What a purge removes (purge.hh).
struct PurgeTarget {
  enum class Kind : unsigned char {
    kExact,   // `key` and every Vary variant of it
    kPrefix,  // every key starting with `key` (the trailing `*` removed), bounded by host_end
    kAll,     // every entry of the zone
    kGlob,    // `key` is a pattern where `*` matches any run of bytes (the serial console's `cache purge`)
    kTags,    // every entry carrying one of `tags` (tags.hh) whose key starts with `key` ("": any key), bounded
              // by host_end as kPrefix is
  };
  Kind kind = Kind::kExact;
  std::string key;
  std::vector<std::string> tags;  // kTags
  /// kPrefix: where the purging request's host ends in `key` (npos: no bound). A key whose prefix is `key`
  /// matches only if it does not continue that host: key.size() > host_end, or the candidate ends at
  /// host_end, or its byte at host_end is not a host_byte.
  size_t host_end = std::string::npos;
};

/// Whether `key` is selected by `t` (kPrefix, kAll and kGlob; kExact compares hashes, see purge.cc; kTags: whether
/// `key` is within the target's key scope — its tags are the index's business).
bool target_matches(const PurgeTarget& t, std::string_view key);

/// The parameters of `proxy_cache_purge` that shape the target.
struct PurgeKeyRules {
  bool method_form = false;  // PURGE <uri>: the template is the location's proxy_cache_key
  bool wildcard = false;     // `wildcard`: a trailing `*` from the request is a wildcard
  bool any_host = false;     // `any_host`: no host bound
};

/// The target of one purge request, or why it is refused (`refusal` non-empty: answer 403).
struct PurgeKey {
  PurgeTarget target;
  std::string refusal;
};

/// Expands `t` with `vars` and applies the rules of the header comment.
PurgeKey build_purge_key(const config::Template& t, const config::VariableSource& vars, const PurgeKeyRules& rules);

/// The key scope of a tag purge through `t` (a kTags target without tags, or a refusal): `t` expanded with
/// `vars` up to the end of its host segment, so the purge stays within the request's host; no bound ("") with
/// `any_host` or a template the configuration fixes completely. A template whose client data has no host before
/// it is refused unless `any_host` is given.
PurgeKey build_tag_scope(const config::Template& t, const config::VariableSource& vars, const PurgeKeyRules& rules);

/// The key prefixes of every entry of virtual host `host` under template `t` (a host purge): `t` expanded with
/// `vars` up to its host segment, with `host` in its place and both "http" and "https" for a $scheme before it;
/// each prefix ends where the host ends (PurgeTarget::host_end). Empty, with *refusal set, when `t` has no host
/// segment to replace.
std::vector<std::string> host_prefixes(const config::Template& t, const config::VariableSource& vars,
                                       std::string_view host, std::string* refusal);

/// The configuration-time check (header comment): "" when purges through `t` can be bounded to the request's
/// host, else the reason (a sentence for the `file:line:col: message`).
std::string check_purge_template(const config::Template& t);

}  // namespace kosoku::cache
