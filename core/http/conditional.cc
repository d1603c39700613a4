// Conditional requests, validators and HTTP dates; see conditional.hh.
#include "core/http/conditional.hh"

#include <algorithm>

#include "core/config/conf.hh"
#include "core/http/chars.hh"
#include "core/http/parser.hh"

namespace kosoku::http {
namespace {

struct EntityTag {
  bool weak = false;
  std::string_view opaque;  // with its DQUOTEs
};

/// entity-tag = [ "W/" ] DQUOTE *etagc DQUOTE; etagc = %x21 / %x23-7E / obs-text (RFC 9110 §8.8.3).
/// Parses one at the start of `s` and advances past it.
bool take_etag(std::string_view& s, EntityTag& t) {
  std::string_view r = s;
  t.weak = false;
  if (r.size() >= 2 && r[0] == 'W' && r[1] == '/') {
    t.weak = true;
    r.remove_prefix(2);
  }
  if (r.empty() || r[0] != '"') return false;
  size_t i = 1;
  for (; i < r.size() && r[i] != '"'; ++i) {
    const auto c = static_cast<unsigned char>(r[i]);
    if (c < 0x21 || c == 0x7f) return false;
  }
  if (i == r.size()) return false;
  t.opaque = r.substr(0, i + 1);
  s = r.substr(i + 1);
  return true;
}

/// Parses a whole field value as a single entity-tag.
bool parse_etag(std::string_view s, EntityTag& t) {
  s = chars::trim_ows(s);
  return take_etag(s, t) && s.empty();
}

/// Calls `match(tag)` for each entity-tag of a `#entity-tag` list until it returns true; a malformed element
/// ends the walk. Returns whether some call returned true.
template <class F>
bool any_etag(std::string_view list, F match) {
  std::string_view s = list;
  for (;;) {
    while (!s.empty() && (chars::is_ows(s[0]) || s[0] == ',')) s.remove_prefix(1);
    if (s.empty()) return false;
    EntityTag t;
    if (!take_etag(s, t)) return false;
    if (match(t)) return true;
    while (!s.empty() && chars::is_ows(s[0])) s.remove_prefix(1);
    if (!s.empty() && s[0] != ',') return false;
  }
}

bool is_get_or_head(const Request& req) { return req.method == Method::kGet || req.method == Method::kHead; }

/// The date of a single-valued date field; nullopt if absent, on several lines, or invalid.
std::optional<int64_t> single_date(const Request& req, HeaderToken tok) {
  const HeaderField* first = req.find(tok);
  if (first == nullptr) return std::nullopt;
  for (const HeaderField* f = first + 1; f < req.headers().data() + req.field_count; ++f) {
    if (f->token == tok) return std::nullopt;
  }
  return parse_http_date(first->value);
}

// Civil calendar <-> days since 1970-01-01 (proleptic Gregorian; H. Hinnant's public-domain algorithms).
constexpr int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

struct Civil {
  int64_t year;
  unsigned month;  // 1..12
  unsigned day;    // 1..31
};

constexpr Civil civil_from_days(int64_t z) {
  z += 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const auto doe = static_cast<unsigned>(z - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t y = static_cast<int64_t>(yoe) + era * 400;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  return Civil{y + (m <= 2), m, d};
}

static_assert(days_from_civil(1970, 1, 1) == 0);
static_assert(days_from_civil(1994, 11, 6) == 9075);
static_assert(civil_from_days(9075).year == 1994 && civil_from_days(9075).day == 6);

constexpr std::string_view kDayShort[7] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr std::string_view kDayLong[7] = {"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday",
                                          "Saturday"};
constexpr std::string_view kMonth[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                         "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

constexpr int64_t kMinTime = days_from_civil(0, 1, 1) * 86400;
constexpr int64_t kMaxTime = days_from_civil(9999, 12, 31) * 86400 + 86399;

bool is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

unsigned days_in_month(int64_t y, unsigned m) {
  static constexpr unsigned kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m == 2 && is_leap(y) ? 29 : kDays[m - 1];
}

/// Reads `n` digits at s[pos]; -1 if any is not a digit.
int digits(std::string_view s, size_t pos, size_t n) {
  if (pos + n > s.size()) return -1;
  int v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!chars::is_digit(s[pos + i])) return -1;
    v = v * 10 + (s[pos + i] - '0');
  }
  return v;
}

int month_index(std::string_view s, size_t pos) {
  if (pos + 3 > s.size()) return -1;
  const std::string_view m = s.substr(pos, 3);
  for (int i = 0; i < 12; ++i) {
    if (kMonth[i] == m) return i + 1;
  }
  return -1;
}

bool is_day_name(std::string_view d, const std::string_view (&names)[7]) {
  for (const auto& n : names) {
    if (n == d) return true;
  }
  return false;
}

/// Parses "hh:mm:ss" at s[pos] into seconds of the day.
bool time_of_day(std::string_view s, size_t pos, int64_t& secs) {
  const int h = digits(s, pos, 2), m = digits(s, pos + 3, 2), sec = digits(s, pos + 6, 2);
  if (h < 0 || m < 0 || sec < 0 || s[pos + 2] != ':' || s[pos + 5] != ':') return false;
  if (h > 23 || m > 59 || sec > 60) return false;  // 60: a leap second
  secs = h * 3600 + m * 60 + sec;
  return true;
}

std::optional<int64_t> make_time(int64_t year, int month, int day, int64_t secs) {
  if (month < 1 || day < 1 || static_cast<unsigned>(day) > days_in_month(year, static_cast<unsigned>(month))) {
    return std::nullopt;
  }
  return days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day)) * 86400 + secs;
}

void put2(char* p, unsigned v) {
  p[0] = static_cast<char>('0' + v / 10);
  p[1] = static_cast<char>('0' + v % 10);
}

size_t put_hex(char* p, uint64_t v) {
  static constexpr char kHex[] = "0123456789abcdef";
  char tmp[16];
  size_t n = 0;
  do {
    tmp[n++] = kHex[v & 15];
    v >>= 4;
  } while (v != 0);
  for (size_t i = 0; i < n; ++i) p[i] = tmp[n - 1 - i];
  return n;
}

}  // namespace

bool etag_strong_equal(std::string_view a, std::string_view b) {
  EntityTag ta, tb;
  return parse_etag(a, ta) && parse_etag(b, tb) && !ta.weak && !tb.weak && ta.opaque == tb.opaque;
}

bool etag_weak_equal(std::string_view a, std::string_view b) {
  EntityTag ta, tb;
  return parse_etag(a, ta) && parse_etag(b, tb) && ta.opaque == tb.opaque;
}

bool if_match_passes(std::string_view field_value, std::string_view etag) {
  if (chars::trim_ows(field_value) == "*") return true;
  EntityTag cur;
  if (!parse_etag(etag, cur) || cur.weak) return false;
  return any_etag(field_value, [&](const EntityTag& t) { return !t.weak && t.opaque == cur.opaque; });
}

bool if_none_match_passes(std::string_view field_value, std::string_view etag) {
  if (chars::trim_ows(field_value) == "*") return false;
  EntityTag cur;
  if (!parse_etag(etag, cur)) return true;
  return !any_etag(field_value, [&](const EntityTag& t) { return t.opaque == cur.opaque; });
}

bool if_range_passes(std::string_view field_value, const Validators& v) {
  const std::string_view s = chars::trim_ows(field_value);
  if (!s.empty() && (s[0] == '"' || (s.size() >= 2 && s[0] == 'W' && s[1] == '/'))) {
    EntityTag want, cur;
    return parse_etag(s, want) && !want.weak && parse_etag(v.etag, cur) && !cur.weak && want.opaque == cur.opaque;
  }
  const std::optional<int64_t> date = parse_http_date(s);
  return date && v.last_modified && v.last_modified_strong && *date == *v.last_modified;
}

bool range_allowed_by_if_range(const Request& req, const Validators& v) {
  const HeaderField* f = req.find(HeaderToken::kIfRange);
  return f == nullptr || if_range_passes(f->value, v);
}

Precondition evaluate_preconditions(const Request& req, const Validators& v, config::IfModifiedSince ims) {
  const std::span<const HeaderField> fields = req.headers();
  // 1. If-Match, 2. If-Unmodified-Since.
  if (req.find(HeaderToken::kIfMatch) != nullptr) {
    bool pass = false;
    for (const HeaderField& f : fields) {
      if (f.token == HeaderToken::kIfMatch && if_match_passes(f.value, v.etag)) {
        pass = true;
        break;
      }
    }
    if (!pass) return Precondition::kPreconditionFailed;
  } else if (v.last_modified) {
    const std::optional<int64_t> date = single_date(req, HeaderToken::kIfUnmodifiedSince);
    if (date && *v.last_modified > *date) return Precondition::kPreconditionFailed;
  }
  // 3. If-None-Match, 4. If-Modified-Since.
  if (req.find(HeaderToken::kIfNoneMatch) != nullptr) {
    for (const HeaderField& f : fields) {
      if (f.token == HeaderToken::kIfNoneMatch && !if_none_match_passes(f.value, v.etag)) {
        return is_get_or_head(req) ? Precondition::kNotModified : Precondition::kPreconditionFailed;
      }
    }
  } else if (is_get_or_head(req) && v.last_modified && ims != config::IfModifiedSince::kOff) {
    const std::optional<int64_t> date = single_date(req, HeaderToken::kIfModifiedSince);
    if (date) {
      const bool not_modified = ims == config::IfModifiedSince::kExact ? *v.last_modified == *date
                                                                         : *v.last_modified <= *date;
      if (not_modified) return Precondition::kNotModified;
    }
  }
  return Precondition::kProceed;
}

std::string_view format_etag(int64_t mtime_s, uint64_t size, std::span<char, kEtagMaxLen> out) {
  char* p = out.data();
  size_t n = 0;
  p[n++] = '"';
  n += put_hex(p + n, static_cast<uint64_t>(mtime_s));
  p[n++] = '-';
  n += put_hex(p + n, size);
  p[n++] = '"';
  return std::string_view(p, n);
}

std::string_view format_http_date(int64_t t, std::span<char, kHttpDateLen> out) {
  if (t < kMinTime) t = kMinTime;
  if (t > kMaxTime) t = kMaxTime;
  int64_t days = t / 86400;
  int64_t secs = t % 86400;
  if (secs < 0) {
    secs += 86400;
    --days;
  }
  const Civil c = civil_from_days(days);
  const auto wday = static_cast<size_t>(((days % 7) + 7 + 4) % 7);  // 1970-01-01 was a Thursday
  char* p = out.data();
  std::copy_n(kDayShort[wday].data(), 3, p);
  p[3] = ',';
  p[4] = ' ';
  put2(p + 5, c.day);
  p[7] = ' ';
  std::copy_n(kMonth[c.month - 1].data(), 3, p + 8);
  p[11] = ' ';
  const auto y = static_cast<unsigned>(c.year);
  put2(p + 12, y / 100);
  put2(p + 14, y % 100);
  p[16] = ' ';
  put2(p + 17, static_cast<unsigned>(secs / 3600));
  p[19] = ':';
  put2(p + 20, static_cast<unsigned>(secs / 60 % 60));
  p[22] = ':';
  put2(p + 23, static_cast<unsigned>(secs % 60));
  std::copy_n(" GMT", 4, p + 25);
  return std::string_view(p, kHttpDateLen);
}

std::optional<int64_t> parse_http_date(std::string_view s) {
  if (s.size() < 24) return std::nullopt;
  int64_t tod = 0;
  if (s[3] == ',') {
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    if (s.size() != 29 || !is_day_name(s.substr(0, 3), kDayShort) || s[4] != ' ' || s[7] != ' ' ||
        s[11] != ' ' || s[16] != ' ' || s.substr(25) != " GMT") {
      return std::nullopt;
    }
    const int day = digits(s, 5, 2), month = month_index(s, 8), year = digits(s, 12, 4);
    if (day < 0 || month < 0 || year < 0 || !time_of_day(s, 17, tod)) return std::nullopt;
    return make_time(year, month, day, tod);
  }
  if (s[3] == ' ') {
    // asctime: "Sun Nov  6 08:49:37 1994"
    if (s.size() != 24 || !is_day_name(s.substr(0, 3), kDayShort) || s[7] != ' ' || s[10] != ' ' ||
        s[19] != ' ') {
      return std::nullopt;
    }
    const int month = month_index(s, 4);
    const int day = s[8] == ' ' ? digits(s, 9, 1) : digits(s, 8, 2);
    const int year = digits(s, 20, 4);
    if (day < 0 || month < 0 || year < 0 || !time_of_day(s, 11, tod)) return std::nullopt;
    return make_time(year, month, day, tod);
  }
  // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
  const size_t comma = s.find(',');
  if (comma == std::string_view::npos || !is_day_name(s.substr(0, comma), kDayLong)) return std::nullopt;
  const std::string_view r = s.substr(comma);
  if (r.size() != 24 || r[1] != ' ' || r[4] != '-' || r[8] != '-' || r[11] != ' ' || r.substr(20) != " GMT") {
    return std::nullopt;
  }
  const int day = digits(r, 2, 2), month = month_index(r, 5), yy = digits(r, 9, 2);
  if (day < 0 || month < 0 || yy < 0 || !time_of_day(r, 12, tod)) return std::nullopt;
  return make_time(yy < 70 ? 2000 + yy : 1900 + yy, month, day, tod);
}

}  // namespace kosoku::http
