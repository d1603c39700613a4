// Cache tags (surrogate keys): the names an origin gives a response so that a purge can select it by meaning
// ("every page that shows article 42") instead of by URL. Three header forms are read, as the CDNs send them:
//   Surrogate-Key: a b c     Fastly: tags separated by spaces (SP or HTAB)
//   Cache-Tag: a,b, c        Cloudflare: tags separated by commas (OWS around them ignored)
//   xkey: a b                Varnish's xkey module: separated by spaces
// `proxy_cache_tags_header` chooses which forms a location reads (all three by default). Several fields and
// several forms add up; each tag is kept once, in the order first seen.
//
// A tag is 1..kMaxTagLength bytes of visible US-ASCII (0x21-0x7E) other than ','; tags compare byte for byte
// (case-sensitive, as Fastly's surrogate keys). A response keeps at most kMaxEntryTags tags and
// kMaxEntryTagBytes of them (the separators counted): what goes past that, and tags that are too long or carry
// other bytes, are dropped and counted in the TagReport so the caller logs one line per response, never one per
// tag.
//
// Stored form: the tags joined by single spaces ("a b c"), in the entry's file (cache_store.hh) and in the keys
// zone's TagIndex (tag_index.hh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/http/parser.hh"

namespace kosoku::cache {

/// The header forms (bits of CacheLocConf::tags_headers).
enum TagHeader : uint32_t {
  kTagSurrogateKey = 1u << 0,
  kTagCacheTag = 1u << 1,
  kTagXkey = 1u << 2,
};
inline constexpr uint32_t kTagHeadersAll = kTagSurrogateKey | kTagCacheTag | kTagXkey;

/// The field name of each form, lower-case ("surrogate-key", "cache-tag", "xkey"); "" for other bits.
std::string_view tag_header_name(uint32_t form);
/// The form of a field name (case-insensitive); 0 when it is none of them.
uint32_t tag_header_form(std::string_view name);

inline constexpr size_t kMaxTagLength = 1024;           // bytes of one tag
inline constexpr size_t kMaxEntryTagBytes = 16 * 1024;  // the stored form of one response's tags
inline constexpr size_t kMaxEntryTags = 256;            // tags of one response
inline constexpr size_t kMaxPurgeTags = 256;            // tags in one purge request

/// Whether `tag` is a valid tag (header comment).
bool valid_tag(std::string_view tag);

/// What collect_tags() left out.
struct TagReport {
  size_t invalid = 0;   // empty pieces are not counted; bytes outside 0x21-0x7E or too long
  size_t over = 0;      // valid tags past kMaxEntryTags or kMaxEntryTagBytes
  bool any() const { return invalid > 0 || over > 0; }
};

/// The stored form of the tags in `fields` of the forms in `forms` (header comment); "" when none.
std::string collect_tags(std::span<const http::HeaderField> fields, uint32_t forms, TagReport* report);

/// The tags of one purge request's `Surrogate-Key` value (space-separated). False, with `error` set, when the
/// value holds no tag, an invalid one, or more than kMaxPurgeTags.
bool parse_purge_tags(std::string_view value, std::vector<std::string>& out, std::string& error);

/// Calls f(tag) for each tag of a stored form.
template <typename F>
void for_each_stored_tag(std::string_view stored, F&& f) {
  while (!stored.empty()) {
    const size_t sp = stored.find(' ');
    const std::string_view t = stored.substr(0, sp);
    if (!t.empty()) f(t);
    if (sp == std::string_view::npos) break;
    stored.remove_prefix(sp + 1);
  }
}

}  // namespace kosoku::cache
