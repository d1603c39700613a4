#include "core/headers/expires.hh"

#include <time.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/config/values.hh"
#include "core/http/conditional.hh"

namespace kosoku::headers {

namespace {

// nginx's fixed values for `max` and `epoch`.
constexpr std::string_view kMaxExpires = "Thu, 31 Dec 2037 23:55:55 GMT";
constexpr int64_t kMaxAge = 315360000;  // ten years
constexpr std::string_view kEpochExpires = "Thu, 01 Jan 1970 00:00:01 GMT";

// A time in nginx's syntax, signed ("-1h").
bool parse_signed_time(std::string_view s, int64_t* out) {
  bool negative = !s.empty() && s[0] == '-';
  if (negative) s.remove_prefix(1);
  std::optional<uint64_t> v = config::parse_time_sec(s);
  if (!v) return false;
  *out = negative ? -static_cast<int64_t>(*v) : static_cast<int64_t>(*v);
  return true;
}

// The next wall time at which the local time of day is `seconds` after midnight (nginx's ngx_next_time).
int64_t next_time_of_day(int64_t now_s, int64_t seconds) {
  time_t now = static_cast<time_t>(now_s);
  tm local{};
  localtime_r(&now, &local);
  local.tm_hour = static_cast<int>(seconds / 3600);
  local.tm_min = static_cast<int>(seconds / 60 % 60);
  local.tm_sec = static_cast<int>(seconds % 60);
  local.tm_isdst = -1;
  int64_t next = static_cast<int64_t>(mktime(&local));
  if (next <= now_s) {
    local.tm_mday++;
    local.tm_isdst = -1;
    next = static_cast<int64_t>(mktime(&local));
  }
  return next;
}

}  // namespace

bool parse_expires(std::string_view first, std::string_view second, Expires* out) {
  Expires e;
  if (!second.empty()) {
    if (first != "modified") return false;
    e.kind = Expires::Kind::kModified;
    if (!parse_signed_time(second, &e.seconds)) return false;
  } else if (first == "off") {
    e.kind = Expires::Kind::kOff;
  } else if (first == "epoch") {
    e.kind = Expires::Kind::kEpoch;
  } else if (first == "max") {
    e.kind = Expires::Kind::kMax;
  } else if (!first.empty() && first[0] == '@') {
    e.kind = Expires::Kind::kDaily;
    std::optional<uint64_t> v = config::parse_time_sec(first.substr(1));
    if (!v || *v >= 24 * 3600) return false;  // nginx: "daily time value must be less than 24 hours"
    e.seconds = static_cast<int64_t>(*v);
  } else {
    e.kind = Expires::Kind::kAccess;
    if (!parse_signed_time(first, &e.seconds)) return false;
  }
  *out = e;
  return true;
}

void append_expires_fields(const Expires& e, int64_t now_s, int64_t last_modified, std::string& out) {
  using Kind = Expires::Kind;
  switch (e.kind) {
    case Kind::kOff:
      return;
    case Kind::kEpoch:
      absl::StrAppend(&out, "Expires: ", kEpochExpires, "\r\nCache-Control: no-cache\r\n");
      return;
    case Kind::kMax:
      absl::StrAppend(&out, "Expires: ", kMaxExpires, "\r\nCache-Control: max-age=", kMaxAge, "\r\n");
      return;
    case Kind::kAccess:
    case Kind::kModified:
    case Kind::kDaily:
      break;
  }
  // As nginx: `modified` counts from Last-Modified when the response has one, else from now.
  const int64_t since = e.kind == Kind::kModified && last_modified >= 0 ? last_modified : now_s;
  const int64_t at = e.kind == Kind::kDaily ? next_time_of_day(now_s, e.seconds) : since + e.seconds;
  char date[http::kHttpDateLen];
  absl::StrAppend(&out, "Expires: ", http::format_http_date(at < 0 ? 0 : at, date), "\r\n");
  if ((e.kind != Kind::kDaily && e.seconds < 0) || at < now_s) {
    out.append("Cache-Control: no-cache\r\n");
  } else {
    absl::StrAppend(&out, "Cache-Control: max-age=", at - now_s, "\r\n");
  }
}

void erase_cache_fields(std::string& head) {
  size_t line = head.find("\r\n");
  if (line == std::string::npos) return;
  line += 2;  // after the status line
  while (line < head.size()) {
    size_t end = head.find("\r\n", line);
    if (end == std::string::npos) return;
    std::string_view field(head.data() + line, end - line);
    if (absl::StartsWithIgnoreCase(field, "expires:") || absl::StartsWithIgnoreCase(field, "cache-control:")) {
      head.erase(line, end + 2 - line);
    } else {
      line = end + 2;
    }
  }
}

}  // namespace kosoku::headers
