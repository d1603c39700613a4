// Conditional requests (RFC 9110 §13) and the validators they compare against (§8.8): ETag and HTTP-date
// helpers, the four preconditions in the §13.2.2 order, and If-Range (§13.1.5). Pure functions, no
// allocation; the engine (static handler, cache) supplies the selected representation's validators.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kosoku::config {
enum class IfModifiedSince;  // core/config/conf.hh: kOff, kExact, kBefore
}

namespace kosoku::http {

struct Request;

/// The selected representation's validators.
struct Validators {
  /// ETag field value as sent in the response: `"opaque"` or `W/"opaque"`; empty when there is none.
  std::string_view etag;
  /// Last-Modified, seconds since the epoch; nullopt when there is none.
  std::optional<int64_t> last_modified;
  /// Whether Last-Modified is a strong validator (RFC 9110 §8.8.2.2: e.g. the file is at least one second
  /// older than the response's Date). Only If-Range cares.
  bool last_modified_strong = true;
};

enum class Precondition : uint8_t {
  kProceed,             // evaluate Range next (If-Range), then send the representation
  kNotModified,         // 304 (GET/HEAD only)
  kPreconditionFailed,  // 412
};

/// Evaluates If-Match, If-Unmodified-Since, If-None-Match and If-Modified-Since of `req` in the order of
/// RFC 9110 §13.2.2, for a representation that exists:
///   1. If-Match false → 412.  2. else If-Unmodified-Since (only without If-Match) false → 412.
///   3. If-None-Match false → 304 for GET/HEAD, else 412.
///   4. else If-Modified-Since (only without If-None-Match, only GET/HEAD) false → 304.
/// All field lines of a list-valued field count (a tag in any line matches). A date field is ignored if its
/// value is not a valid HTTP-date or it appears on more than one line (§13.1.3, §13.1.4).
/// `ims`: nginx `if_modified_since` — kOff ignores If-Modified-Since; kExact (nginx default) answers 304 only
/// when the date equals Last-Modified; kBefore when Last-Modified is at or before it (the RFC rule).
/// If-Unmodified-Since is evaluated by the RFC rule (false when Last-Modified is later). Both date fields are
/// ignored when the representation has no Last-Modified (§13.1.3, §13.1.4).
Precondition evaluate_preconditions(const Request& req, const Validators& v, config::IfModifiedSince ims);

/// RFC 9110 §13.1.1: true if `field_value` is "*" or lists an entity-tag that matches `etag` by strong
/// comparison (neither weak, same opaque-tag). A malformed element ends the list (the rest never matches).
bool if_match_passes(std::string_view field_value, std::string_view etag);

/// RFC 9110 §13.1.2: false if `field_value` is "*" or lists an entity-tag matching `etag` by weak comparison
/// (opaque-tags equal, W/ ignored on both sides); true otherwise.
bool if_none_match_passes(std::string_view field_value, std::string_view etag);

/// RFC 9110 §13.1.5: whether a Range may be honoured given an If-Range value. An entity-tag must match the
/// current ETag by strong comparison (a weak tag never does); an HTTP-date must equal Last-Modified exactly
/// and Last-Modified must be strong. Anything else (invalid, no validator) → false: send the whole 200.
bool if_range_passes(std::string_view field_value, const Validators& v);

/// For `req`: true when there is no If-Range field, else if_range_passes() of the first one.
bool range_allowed_by_if_range(const Request& req, const Validators& v);

/// Strong comparison of two entity-tags (`"x"` / `W/"x"`), RFC 9110 §8.8.3.2.
bool etag_strong_equal(std::string_view a, std::string_view b);
/// Weak comparison: opaque-tags equal, ignoring W/.
bool etag_weak_equal(std::string_view a, std::string_view b);

/// nginx's ETag for a static file: `"<mtime hex>-<size hex>"` (lower-case hex, with the quotes), e.g.
/// mtime 0x5f5e1000, size 26 → `"5f5e1000-1a"`. Writes into `out`, returns the view of what was written.
inline constexpr size_t kEtagMaxLen = 2 + 16 + 1 + 16;
std::string_view format_etag(int64_t mtime_s, uint64_t size, std::span<char, kEtagMaxLen> out);

/// IMF-fixdate (RFC 9110 §5.6.7), always 29 bytes: "Sun, 06 Nov 1994 08:49:37 GMT". Times before year 0 or
/// after 9999 are clamped. Returns the view of `out`.
inline constexpr size_t kHttpDateLen = 29;
std::string_view format_http_date(int64_t t, std::span<char, kHttpDateLen> out);

/// Parses an HTTP-date in any of the three forms of RFC 9110 §5.6.7 (IMF-fixdate, RFC 850, asctime); case
/// sensitive, no surrounding whitespace. RFC 850 two-digit years: 70-99 → 19xx, 00-69 → 20xx (as nginx).
/// Returns seconds since the epoch, or nullopt if invalid (the caller then ignores the field).
std::optional<int64_t> parse_http_date(std::string_view s);

}  // namespace kosoku::http
