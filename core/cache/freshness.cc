#include "core/cache/freshness.hh"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/http/chars.hh"
#include "core/http/conditional.hh"
#include "core/http/field_names.hh"
#include "core/http/tokens.hh"

namespace kosoku::cache {

namespace {

using http::HeaderField;
using http::HeaderToken;

constexpr int64_t kDeltaMax = 2147483648LL;  // §1.2.2

// The field is `t` (by token when the parser set one, else by name).
bool is(const HeaderField& f, HeaderToken t) {
  if (f.token != HeaderToken::kUnknown) return f.token == t;
  return http::lookup_header_token(f.name) == t;
}

const HeaderField* first(std::span<const HeaderField> fields, HeaderToken t) {
  for (const HeaderField& f : fields) {
    if (is(f, t)) return &f;
  }
  return nullptr;
}

const HeaderField* first_named(std::span<const HeaderField> fields, std::string_view name) {
  for (const HeaderField& f : fields) {
    if (absl::EqualsIgnoreCase(f.name, name)) return &f;
  }
  return nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// delta-seconds = 1*DIGIT (§1.2.2); saturates at 2^31. nullopt if not all digits.
std::optional<int64_t> parse_delta(std::string_view v) {
  if (v.empty()) return std::nullopt;
  int64_t n = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    if (n < kDeltaMax) n = n * 10 + (c - '0');
  }
  return n < kDeltaMax ? n : kDeltaMax;
}

// Calls f(name, value, quoted) for every directive of a Cache-Control value: `name[=token|quoted-string]`,
// comma-separated. A quoted-string keeps its content without the quotes (escapes are left in place; the
// only quoted values kosoku reads are field-name lists, where '\\' does not occur in valid input).
template <class F>
void for_each_directive(std::string_view v, F&& f) {
  size_t i = 0;
  while (i < v.size()) {
    while (i < v.size() && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) ++i;
    size_t start = i;
    while (i < v.size() && v[i] != '=' && v[i] != ',') ++i;
    std::string_view name = trim(v.substr(start, i - start));
    std::string_view value;
    bool quoted = false;
    if (i < v.size() && v[i] == '=') {
      ++i;
      while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) ++i;
      if (i < v.size() && v[i] == '"') {
        size_t open = ++i;
        while (i < v.size() && v[i] != '"') {
          if (v[i] == '\\' && i + 1 < v.size()) ++i;
          ++i;
        }
        value = v.substr(open, i - open);
        quoted = true;
        if (i < v.size()) ++i;  // closing quote
        while (i < v.size() && v[i] != ',') ++i;
      } else {
        size_t vs = i;
        while (i < v.size() && v[i] != ',') ++i;
        value = trim(v.substr(vs, i - vs));
      }
    }
    if (!name.empty()) f(name, value, quoted);
  }
}

// Appends the lower-cased members of a quoted field-name list to `out` (comma-separated).
void append_names(std::string_view list, std::string& out) {
  while (!list.empty()) {
    size_t comma = list.find(',');
    std::string_view item = trim(list.substr(0, comma));
    if (!item.empty()) {
      if (!out.empty()) out.push_back(',');
      out.append(absl::AsciiStrToLower(item));
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

bool is_hop_by_hop(const HeaderField& f) {
  HeaderToken t = f.token != HeaderToken::kUnknown ? f.token : http::lookup_header_token(f.name);
  if (t == HeaderToken::kUnknown) return false;
  return (http::header_token_flags(t) & http::kTokenHopByHop) != 0;
}

// The names a stored head leaves out besides the fixed ones: those the Connection lines list and `strip`.
http::FieldNameSet dropped_names(std::span<const HeaderField> fields, std::string_view strip) {
  http::FieldNameSet dropped;
  dropped.add_connection_options(fields);
  dropped.add_list(strip);
  return dropped;
}

// Whether a field must not be stored: hop-by-hop, framing, Age, or in `dropped` (dropped_names).
bool excluded(const HeaderField& f, const http::FieldNameSet& dropped) {
  if (is_hop_by_hop(f)) return true;
  HeaderToken t = f.token != HeaderToken::kUnknown ? f.token : http::lookup_header_token(f.name);
  if (t == HeaderToken::kContentLength || t == HeaderToken::kTransferEncoding || t == HeaderToken::kAge) return true;
  return !dropped.empty() && dropped.contains(f.name);
}

}  // namespace

CacheControl parse_cache_control(std::span<const HeaderField> fields) {
  CacheControl cc;
  bool seen_max_age = false, seen_s_maxage = false, seen_swr = false, seen_sie = false;
  for (const HeaderField& f : fields) {
    if (!is(f, HeaderToken::kCacheControl)) continue;
    cc.present = true;
    for_each_directive(f.value, [&](std::string_view name, std::string_view value, bool quoted) {
      auto eq = [&](std::string_view n) { return absl::EqualsIgnoreCase(name, n); };
      auto delta = [&](bool* seen, std::optional<int64_t>* slot, bool age) {
        if (*seen) return;  // first occurrence wins
        *seen = true;
        std::optional<int64_t> d = parse_delta(value);
        if (!d) {
          if (age) cc.invalid_age = true;
          return;
        }
        *slot = d;
      };
      if (eq("no-store")) {
        cc.no_store = true;
      } else if (eq("no-cache")) {
        if (quoted || !value.empty()) {
          if (!cc.no_cache_fields.empty()) return;
          cc.no_cache_fields = value;
          if (value.empty()) cc.no_cache = true;
        } else {
          cc.no_cache = true;
        }
      } else if (eq("private")) {
        if (quoted || !value.empty()) {
          if (cc.private_fields.empty()) cc.private_fields = value;
          if (value.empty()) cc.private_ = true;
        } else {
          cc.private_ = true;
        }
      } else if (eq("public")) {
        cc.public_ = true;
      } else if (eq("must-revalidate")) {
        cc.must_revalidate = true;
      } else if (eq("proxy-revalidate")) {
        cc.proxy_revalidate = true;
      } else if (eq("max-age")) {
        delta(&seen_max_age, &cc.max_age, true);
      } else if (eq("s-maxage")) {
        delta(&seen_s_maxage, &cc.s_maxage, true);
      } else if (eq("stale-while-revalidate")) {
        delta(&seen_swr, &cc.stale_while_revalidate, false);
      } else if (eq("stale-if-error")) {
        delta(&seen_sie, &cc.stale_if_error, false);
      }
    });
  }
  return cc;
}

std::string_view not_stored_name(NotStored r) {
  switch (r) {
    case NotStored::kNo: return "storable";
    case NotStored::kStatus: return "status";
    case NotStored::kRequestNoStore: return "request no-store";
    case NotStored::kNoStore: return "no-store";
    case NotStored::kPrivate: return "private";
    case NotStored::kAuthorization: return "authorization";
    case NotStored::kSetCookie: return "set-cookie";
    case NotStored::kVaryStar: return "vary *";
    case NotStored::kVaryTooLong: return "vary too long";
    case NotStored::kXAccelExpiresZero: return "x-accel-expires 0";
    case NotStored::kNoValidity: return "no validity";
    case NotStored::kZeroLifetime: return "zero lifetime";
  }
  return "?";
}

StoreDecision decide_store(const StoreInput& in) {
  StoreDecision d;
  const uint32_t ignore = in.conf != nullptr ? in.conf->ignore_headers : 0;
  auto refuse = [&](NotStored r) {
    d.refusal = r;
    return d;
  };
  if (in.status < 200 || in.status == 206 || in.status == 304) return refuse(NotStored::kStatus);

  if (in.request != nullptr) {
    std::span<const HeaderField> rf = in.request->headers();
    if (parse_cache_control(rf).no_store) return refuse(NotStored::kRequestNoStore);
  }

  CacheControl cc;
  if ((ignore & kIgnoreCacheControl) == 0) cc = parse_cache_control(in.fields);
  if (cc.no_store) return refuse(NotStored::kNoStore);
  if (cc.private_) return refuse(NotStored::kPrivate);

  if (in.request != nullptr && in.request->find(HeaderToken::kAuthorization) != nullptr &&
      !(cc.must_revalidate || cc.public_ || cc.s_maxage.has_value())) {
    return refuse(NotStored::kAuthorization);
  }

  if (first(in.fields, HeaderToken::kSetCookie) != nullptr) {
    if ((ignore & kIgnoreSetCookie) == 0) return refuse(NotStored::kSetCookie);
    d.strip = "set-cookie";
  }
  append_names(cc.no_cache_fields, d.strip);
  append_names(cc.private_fields, d.strip);

  if ((ignore & kIgnoreVary) == 0) {
    switch (parse_vary(in.fields, &d.vary)) {
      case VaryKind::kStar:
        return refuse(NotStored::kVaryStar);
      case VaryKind::kTooLong:
        return refuse(NotStored::kVaryTooLong);
      case VaryKind::kNone:
      case VaryKind::kList:
        break;
    }
  }

  // Times (§4.2.3).
  Freshness& f = d.freshness;
  f.request_time = in.request_time;
  f.response_time = in.response_time;
  f.date = in.response_time;
  if (const HeaderField* date = first(in.fields, HeaderToken::kDate)) {
    if (auto t = http::parse_http_date(date->value)) f.date = *t;
  }
  int64_t age_value = 0;
  if (const HeaderField* age = first(in.fields, HeaderToken::kAge)) {
    if (auto a = parse_delta(trim(age->value))) age_value = *a;
  }
  int64_t apparent_age = std::max<int64_t>(0, f.response_time - f.date);
  int64_t response_delay = std::max<int64_t>(0, f.response_time - f.request_time);
  int64_t corrected_age_value = age_value + response_delay;
  f.corrected_initial_age = std::max(apparent_age, corrected_age_value);

  // Freshness lifetime (§4.2.1), nginx's priority first.
  std::optional<int64_t> lifetime;
  if ((ignore & kIgnoreXAccelExpires) == 0) {
    if (const HeaderField* xa = first_named(in.fields, "x-accel-expires")) {
      std::string_view v = trim(xa->value);
      if (!v.empty() && v[0] == '@') {
        if (auto t = parse_delta(v.substr(1))) {
          // An absolute time: the response is fresh until then, whatever its age.
          lifetime = std::max<int64_t>(0, *t - f.response_time) + f.corrected_initial_age;
        }
      } else if (auto n = parse_delta(v)) {
        if (*n == 0) return refuse(NotStored::kXAccelExpiresZero);
        lifetime = *n;
      }
    }
  }
  if (!lifetime && cc.s_maxage) lifetime = *cc.s_maxage;
  if (!lifetime && cc.max_age) lifetime = *cc.max_age;
  if (!lifetime && cc.invalid_age) lifetime = 0;
  if (!lifetime && (ignore & kIgnoreExpires) == 0) {
    if (const HeaderField* ex = first(in.fields, HeaderToken::kExpires)) {
      std::optional<int64_t> t = http::parse_http_date(trim(ex->value));
      lifetime = t ? std::max<int64_t>(0, *t - f.date) : 0;  // an invalid Expires means "already expired"
    }
  }
  if (!lifetime && in.conf != nullptr) {
    uint64_t ms = in.conf->valid_for(in.status);
    if (ms > 0) lifetime = static_cast<int64_t>(ms / 1000);
  }
  if (!lifetime) return refuse(NotStored::kNoValidity);
  f.lifetime = *lifetime;

  d.has_validator = first(in.fields, HeaderToken::kEtag) != nullptr ||
                    first(in.fields, HeaderToken::kLastModified) != nullptr;
  if (cc.must_revalidate || cc.proxy_revalidate || cc.s_maxage || cc.no_cache) f.flags |= kFlagNoStale;
  if (cc.no_cache) f.flags |= kFlagAlwaysRevalidate;
  if (cc.stale_while_revalidate) f.stale_while_revalidate = *cc.stale_while_revalidate;
  if (cc.stale_if_error) f.stale_if_error = *cc.stale_if_error;
  if ((f.lifetime <= f.corrected_initial_age || (f.flags & kFlagAlwaysRevalidate)) && !d.has_validator) {
    return refuse(NotStored::kZeroLifetime);
  }
  return d;
}

bool stale_allowed(const Freshness& f, int64_t now, uint32_t use_stale, uint32_t condition) {
  if (f.flags & kFlagNoStale) return false;
  if (use_stale & condition) return true;
  int64_t stale_for = now - f.expires_at();
  if (condition == kStaleUpdating) {
    return f.stale_while_revalidate >= 0 && stale_for < f.stale_while_revalidate;
  }
  constexpr uint32_t kErrors = kStaleError | kStaleTimeout | kStaleInvalidHeader | kStaleHttp500 | kStaleHttp502 |
                               kStaleHttp503 | kStaleHttp504 | kStaleHttp403 | kStaleHttp404 | kStaleHttp429;
  if (condition & kErrors) return f.stale_if_error >= 0 && stale_for < f.stale_if_error;
  return false;
}

uint32_t stale_condition_for_status(int status) {
  switch (status) {
    case 500: return kStaleHttp500;
    case 502: return kStaleHttp502;
    case 503: return kStaleHttp503;
    case 504: return kStaleHttp504;
    case 403: return kStaleHttp403;
    case 404: return kStaleHttp404;
    case 429: return kStaleHttp429;
    default: return 0;
  }
}

std::string revalidation_fields(std::string_view etag, std::string_view last_modified_text) {
  std::string out;
  if (!etag.empty()) absl::StrAppend(&out, "If-None-Match: ", etag, "\r\n");
  if (!last_modified_text.empty()) absl::StrAppend(&out, "If-Modified-Since: ", last_modified_text, "\r\n");
  return out;
}

bool validators_match_304(std::span<const HeaderField> fields, std::string_view etag,
                          std::string_view last_modified_text) {
  const HeaderField* et = first(fields, HeaderToken::kEtag);
  if (et != nullptr && !absl::StartsWith(trim(et->value), "W/")) {
    return !etag.empty() && http::etag_strong_equal(trim(et->value), etag);
  }
  const HeaderField* lm = first(fields, HeaderToken::kLastModified);
  if (lm != nullptr) {
    auto a = http::parse_http_date(trim(lm->value));
    auto b = http::parse_http_date(last_modified_text);
    return a && b && *a == *b;
  }
  if (et != nullptr) return !etag.empty() && http::etag_weak_equal(trim(et->value), etag);
  return true;
}

void stored_head_lines(std::span<const HeaderField> fields, std::string_view strip, std::string& out) {
  const http::FieldNameSet dropped = dropped_names(fields, strip);
  for (const HeaderField& f : fields) {
    if (excluded(f, dropped)) continue;
    absl::StrAppend(&out, f.name, ": ", f.value, "\r\n");
  }
}

std::string merge_304(std::string_view stored, std::span<const HeaderField> fields, std::string_view strip) {
  const http::FieldNameSet dropped = dropped_names(fields, strip);
  std::vector<const HeaderField*> updates;
  http::FieldNameSet updated;  // the names the 304 replaces
  for (const HeaderField& f : fields) {
    if (excluded(f, dropped)) continue;
    updates.push_back(&f);
    updated.add(f.name);
  }
  std::string out;
  for_each_stored_line(stored, [&](std::string_view name, std::string_view value) {
    if (!updated.contains(name)) absl::StrAppend(&out, name, ": ", value, "\r\n");
  });
  for (const HeaderField* u : updates) absl::StrAppend(&out, u->name, ": ", u->value, "\r\n");
  return out;
}

std::optional<std::string_view> find_stored_line(std::string_view lines, std::string_view name) {
  std::optional<std::string_view> found;
  for_each_stored_line(lines, [&](std::string_view n, std::string_view v) {
    if (!found && absl::EqualsIgnoreCase(n, name)) found = v;
  });
  return found;
}

VaryKind parse_vary(std::span<const HeaderField> fields, std::string* names) {
  names->clear();
  std::vector<std::string> list;
  for (const HeaderField& f : fields) {
    if (!is(f, HeaderToken::kVary)) continue;
    std::string_view v = f.value;
    while (true) {
      size_t comma = v.find(',');
      std::string_view item = trim(v.substr(0, comma));
      if (item == "*") return VaryKind::kStar;
      if (!item.empty()) list.push_back(absl::AsciiStrToLower(item));
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  if (list.empty()) return VaryKind::kNone;
  std::sort(list.begin(), list.end());
  list.erase(std::unique(list.begin(), list.end()), list.end());
  for (const std::string& n : list) {
    if (!names->empty()) names->push_back(',');
    names->append(n);
  }
  if (names->size() > kMaxVaryNames) {
    names->clear();
    return VaryKind::kTooLong;
  }
  return VaryKind::kList;
}

void vary_key_material(std::string_view names, const http::Request& req, std::string& out) {
  while (!names.empty()) {
    size_t comma = names.find(',');
    std::string_view name = names.substr(0, comma);
    names = comma == std::string_view::npos ? std::string_view() : names.substr(comma + 1);
    out.append(name);
    bool any = false;
    for (const HeaderField& f : req.headers()) {
      if (!absl::EqualsIgnoreCase(f.name, name)) continue;
      out.push_back(any ? ',' : ':');
      bool first_member = true;
      std::string_view v = f.value;
      while (true) {
        size_t c = v.find(',');
        std::string_view item = trim(v.substr(0, c));
        if (!first_member) out.push_back(',');
        out.append(item);
        first_member = false;
        if (c == std::string_view::npos) break;
        v.remove_prefix(c + 1);
      }
      any = true;
    }
    if (!any) out.push_back('\x01');
    out.push_back('\n');
  }
}

std::string age_value(const Freshness& f, int64_t now) { return absl::StrCat(f.current_age(now)); }

}  // namespace kosoku::cache
