// split_clients (ngx_http_split_clients_module): `$variable` takes the value of the part that
// MurmurHash2(expanded STRING) falls in. nginx's exact hash (ngx_murmur_hash2: MurmurHash2, seed 0 XOR length)
// and thresholds (cache/cache_directives.cc: cumulative percent × 0xffffffff / 10000), so kosoku splits
// clients — and cache keys over several cache paths — exactly as nginx does.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/cache/cache_conf.hh"

namespace kosoku::cache {

/// nginx's ngx_murmur_hash2.
uint32_t murmur_hash2(std::string_view data);

/// The value for an already expanded source string: the first part with hash < threshold, or a `*` part;
/// empty when none matches (nginx).
std::string_view split_value(const SplitClientsConf& sc, std::string_view expanded);

}  // namespace kosoku::cache
