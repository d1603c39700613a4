// RFC 9111 for a shared cache, as pure functions over header fields: whether a response may be stored
// (§3, §3.5, §5.2), its freshness lifetime (§4.2.1), its age (§4.2.3), whether a stale copy may be served
// (§4.2.4), the conditional request that revalidates it (§4.3.1), the update of a stored head by a 304
// (§3.2, §4.3.4), and the secondary cache key of Vary (§4.1). No I/O, no clock: every time is an argument
// (seconds since the epoch), so the unit tests pin exact values.
//
// Where RFC 9111 leaves the choice to the cache, kosoku does what nginx does, except where noted:
//   - Freshness sources in priority order: X-Accel-Expires (nginx; `N` seconds, `@T` absolute, `0` = do not
//     cache) > s-maxage > max-age > Expires − Date > proxy_cache_valid for the status. No heuristic freshness
//     (§4.2.2): without explicit freshness and without a proxy_cache_valid entry the response is not stored.
//     proxy_ignore_headers X-Accel-Expires / Cache-Control / Expires skip a source (and Cache-Control's
//     no-store/private/no-cache with it, as nginx).
//   - Set-Cookie (§7.3 leaves it to the cache): nginx's default — a response with Set-Cookie is not stored.
//     With `proxy_ignore_headers Set-Cookie` it is stored WITHOUT its Set-Cookie lines (nginx would replay
//     them to every client; one client's cookie must never reach another).
//   - Cache-Control: no-cache (unqualified) — stored, but never reused without a successful validation and
//     never served stale (§5.2.2.4; nginx does not store it at all). Qualified no-cache="F" / private="F":
//     stored without the fields F (§5.2.2.4, §5.2.2.7: a field that must not be reused without validation is
//     simply never reused). Unqualified private, no-store: not stored.
//   - Authorization in the request (§3.5): not stored unless the response has must-revalidate, public or
//     s-maxage (nginx stores it regardless).
//   - Request directives: only no-store is honoured (§5.2.1.5: the response is not stored). no-cache,
//     max-age, max-stale, min-fresh and only-if-cached in requests are ignored, as nginx and Varnish do (a
//     client could otherwise force every request through to the origin).
//   - Freshness lifetime 0 (e.g. max-age=0) is stored only when the response has a validator (ETag or
//     Last-Modified), so it can be revalidated; otherwise storing it is pointless.
//   - Statuses: 206 (kosoku never stores partial content), 304 and 1xx are never stored; any other final
//     status is stored when it has explicit freshness or a proxy_cache_valid entry (nginx).
//   - Vary: `*` is never stored (it could never match, §4.1); other names become the secondary key. With
//     `proxy_ignore_headers Vary` the response is stored as one variant for every request (nginx).
//   - Stale (§4.2.4): never with must-revalidate, proxy-revalidate, s-maxage or no-cache. Otherwise as
//     proxy_cache_use_stale says, and also within the stale-while-revalidate / stale-if-error windows of the
//     response (RFC 5861; nginx: lower priority than the directive).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/cache/cache_conf.hh"
#include "core/http/parser.hh"

namespace kosoku::cache {

/// Cache-Control directives of one message (all its Cache-Control field lines; names case-insensitive;
/// the first occurrence of a directive wins, §4.2.1). delta-seconds saturate at 2^31 (§1.2.2).
struct CacheControl {
  bool present = false;
  bool no_store = false;
  bool no_cache = false;         // unqualified no-cache
  bool private_ = false;         // unqualified private
  bool public_ = false;
  bool must_revalidate = false;
  bool proxy_revalidate = false;
  bool invalid_age = false;      // a max-age or s-maxage value that is not delta-seconds (§4.2.1: stale)
  std::optional<int64_t> max_age;
  std::optional<int64_t> s_maxage;
  std::optional<int64_t> stale_while_revalidate;  // RFC 5861
  std::optional<int64_t> stale_if_error;          // RFC 5861
  /// Field names of qualified no-cache="..." and private="..." (the quoted list, comma-separated), or empty.
  std::string_view no_cache_fields;
  std::string_view private_fields;
};

/// Parses every field named Cache-Control in `fields`.
CacheControl parse_cache_control(std::span<const http::HeaderField> fields);

/// Why a response was not stored (for logs and tests).
enum class NotStored : uint8_t {
  kNo = 0,           // it is storable
  kStatus,           // 1xx, 206, 304
  kRequestNoStore,   // request Cache-Control: no-store
  kNoStore,          // response Cache-Control: no-store
  kPrivate,          // unqualified private
  kAuthorization,    // §3.5
  kSetCookie,        // nginx's default
  kVaryStar,         // Vary: *
  kVaryTooLong,      // more field names than the zone keeps (kMaxVaryNames bytes)
  kXAccelExpiresZero,
  kNoValidity,       // no explicit freshness and no proxy_cache_valid entry for the status
  kZeroLifetime,     // stale on arrival and no validator to revalidate it with
};
std::string_view not_stored_name(NotStored r);

/// Flags kept with a stored response.
enum StoredFlag : uint32_t {
  kFlagNoStale = 1u << 0,         // must-revalidate, proxy-revalidate, s-maxage or no-cache: never serve stale
  kFlagAlwaysRevalidate = 1u << 1,  // unqualified no-cache: validate before every reuse
};

/// The times of one stored response (RFC 9111 §4.2.3 names), all seconds since the epoch or durations in s.
struct Freshness {
  int64_t date = 0;                   // date_value: the origin's Date, or response_time without a valid one
  int64_t request_time = 0;           // when the request that produced it was sent
  int64_t response_time = 0;          // when the response was received
  int64_t corrected_initial_age = 0;  // §4.2.3
  int64_t lifetime = 0;               // freshness_lifetime (§4.2.1)
  int64_t stale_while_revalidate = -1;  // RFC 5861 window in s; -1: none
  int64_t stale_if_error = -1;
  uint32_t flags = 0;                 // StoredFlag

  /// The first second at which the response is stale: response_time + lifetime − corrected_initial_age.
  int64_t expires_at() const { return response_time + lifetime - corrected_initial_age; }
  /// current_age (§4.2.3) at `now`, never negative.
  int64_t current_age(int64_t now) const {
    int64_t resident = now - response_time;
    int64_t age = corrected_initial_age + (resident > 0 ? resident : 0);
    return age > 0 ? age : 0;
  }
  /// §4.2: fresh while freshness_lifetime > current_age (and never with kFlagAlwaysRevalidate).
  bool fresh(int64_t now) const {
    return (flags & kFlagAlwaysRevalidate) == 0 && lifetime > current_age(now);
  }
};

/// Inputs of the store decision.
struct StoreInput {
  int status = 0;
  std::span<const http::HeaderField> fields;  // the response's header fields
  const http::Request* request = nullptr;     // the client request (Authorization, Cache-Control: no-store)
  const CacheLocConf* conf = nullptr;         // proxy_cache_valid, proxy_ignore_headers
  int64_t request_time = 0;                   // when the request to the origin was sent
  int64_t response_time = 0;                  // when the response head arrived
};

/// Longest normalised Vary name list a zone keeps (bytes); a longer Vary is not stored.
inline constexpr size_t kMaxVaryNames = 200;

struct StoreDecision {
  NotStored refusal = NotStored::kNo;
  bool storable() const { return refusal == NotStored::kNo; }
  Freshness freshness;
  /// Normalised Vary field names ("accept-encoding,accept-language": lower-case, sorted, unique); empty: none.
  std::string vary;
  /// Lower-case field names never stored with this response (Set-Cookie when ignored, qualified no-cache and
  /// private lists), comma-separated. Hop-by-hop fields are always dropped (see stored_head_lines).
  std::string strip;
  bool has_validator = false;  // ETag or Last-Modified present
};

/// The whole §3 decision plus the freshness of a response (see the header comment for the rules).
StoreDecision decide_store(const StoreInput& in);

/// §4.2.4 + proxy_cache_use_stale: may the stale `f` be served at `now` because of `condition` (one UseStale
/// bit: kStaleError, kStaleTimeout, kStaleHttp5xx, kStaleUpdating...)? `use_stale` is the location's bits.
bool stale_allowed(const Freshness& f, int64_t now, uint32_t use_stale, uint32_t condition);

/// The UseStale bit for an origin status (500 → kStaleHttp500, ...), 0 for statuses use_stale does not name.
uint32_t stale_condition_for_status(int status);

/// §4.3.1: the request fields that revalidate a stored response with `etag` (as stored, with quotes; empty:
/// none) and `last_modified_text` (the stored Last-Modified value; empty: none), as "Name: value\r\n" lines.
std::string revalidation_fields(std::string_view etag, std::string_view last_modified_text);

/// §4.3.4: whether a 304 with `fields` may update a stored response with `etag` / `last_modified_text`:
/// a strong ETag in the 304 must equal the stored one; else a Last-Modified in the 304 must equal the stored
/// one; a 304 with neither selects the (single) stored response.
bool validators_match_304(std::span<const http::HeaderField> fields, std::string_view etag,
                          std::string_view last_modified_text);

/// Appends the stored form of a response head to `out`: one "Name: value\r\n" line per field, without
/// hop-by-hop fields (RFC 9110 §7.6.1, and those named in Connection), Content-Length, Transfer-Encoding, Age
/// (recomputed on every reuse), and the lower-case names listed in `strip` (comma-separated).
void stored_head_lines(std::span<const http::HeaderField> fields, std::string_view strip, std::string& out);

/// §3.2 / §4.3.4: `stored` lines ("Name: value\r\n"...) updated with a 304's `fields`: each field name the
/// 304 carries replaces every stored line of that name; excluded as in stored_head_lines (and `strip`).
std::string merge_304(std::string_view stored, std::span<const http::HeaderField> fields, std::string_view strip);

/// Calls f(name, value) for each "Name: value\r\n" line of a stored head.
template <class F>
void for_each_stored_line(std::string_view lines, F&& f) {
  while (!lines.empty()) {
    size_t eol = lines.find("\r\n");
    std::string_view line = lines.substr(0, eol);
    lines = eol == std::string_view::npos ? std::string_view() : lines.substr(eol + 2);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    f(line.substr(0, colon), value);
  }
}

/// The value of the first stored line named `name` (case-insensitive), or nullopt.
std::optional<std::string_view> find_stored_line(std::string_view lines, std::string_view name);

enum class VaryKind : uint8_t { kNone, kList, kStar, kTooLong };
/// Normalises the Vary fields of a response into `names` (see StoreDecision::vary).
VaryKind parse_vary(std::span<const http::HeaderField> fields, std::string* names);

/// §4.1: appends the secondary-key material of `req` for the normalised `names`: per name,
/// "name" ':' value '\n', where value is every line of that request field joined by ',' with the OWS around
/// each list member removed, or "name" '\x01' '\n' when the request has no such field (absent ≠ empty).
void vary_key_material(std::string_view names, const http::Request& req, std::string& out);

/// `Age` value for a reuse at `now` (§5.1): decimal seconds.
std::string age_value(const Freshness& f, int64_t now);

}  // namespace kosoku::cache
