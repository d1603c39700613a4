// The configuration's compiled regexes (location, server_name, map) as each core matches them.
#pragma once

namespace re2 {
class RE2;
}

namespace kosoku::config {

/// This thread's clone of `shared`, a regex of the configuration (made on first use, kept for the thread's
/// life): RE2 matches under an internal lock, so each core matches with its own copy and never waits on
/// another's. A clone is remade when the address now holds another pattern (a later configuration in the same
/// process: tests, the fuzzers).
const re2::RE2& per_core_regex(const re2::RE2& shared);

}  // namespace kosoku::config
