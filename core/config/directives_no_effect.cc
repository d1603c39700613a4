// nginx directives that tune nginx's own internals (hash table sizes, the accept loop, worker process
// management) and have no meaning in kosoku's design: they are accepted, their arguments counted as nginx
// counts them, and each use is named in a notice at load (`kosoku -t` prints it), never silently. A
// directive whose meaning kosoku could give but does not yet is not in this table: it stays an unknown
// directive, so a configuration never loses behaviour without an error.
//
// Also here: the top-level blocks and directives kosoku refuses with a message saying why (`stream`, `mail`,
// `load_module`), where "unknown directive" would read like a typo.
#include <string_view>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"

namespace kosoku::config {

namespace {

struct NoEffect {
  std::string_view name;
  std::string_view why;  // completes "has no effect in kosoku: ..."
};

// One line per directive: why it means nothing here.
constexpr NoEffect kWhy[] = {
    {"user", "it keeps the user that starts it (the appliance has no accounts)"},
    {"worker_rlimit_core", "it sets no core-file limit"},
    {"worker_priority", "its loops keep the priority they start with"},
    {"timer_resolution", "each loop reads its clock once per turn"},
    {"pcre_jit", "its configuration regexes are RE2, compiled once at load"},
    {"lock_file", "it has no accept mutex"},
    {"working_directory", "it does not change directory"},
    {"daemon", "it runs in the foreground (run it under a supervisor, or as the appliance's init)"},
    {"master_process", "it has no master process (one process, one loop per core)"},
    {"multi_accept", "each loop takes every connection its multishot accept reports"},
    {"use", "it always uses io_uring (or DPDK: `network dpdk;`)"},
    {"accept_mutex", "each loop has its own listening socket (SO_REUSEPORT)"},
    {"accept_mutex_delay", "each loop has its own listening socket (SO_REUSEPORT)"},
    {"worker_aio_requests", "the io_uring queue depth is set by `disk_queue NAME depth=N;`"},
    {"types_hash_max_size", "its lookup tables size themselves"},
    {"types_hash_bucket_size", "its lookup tables size themselves"},
    {"server_names_hash_max_size", "its lookup tables size themselves"},
    {"server_names_hash_bucket_size", "its lookup tables size themselves"},
    {"variables_hash_max_size", "its lookup tables size themselves"},
    {"variables_hash_bucket_size", "its lookup tables size themselves"},
    {"map_hash_max_size", "its lookup tables size themselves"},
    {"map_hash_bucket_size", "its lookup tables size themselves"},
    {"proxy_headers_hash_max_size", "its lookup tables size themselves"},
    {"proxy_headers_hash_bucket_size", "its lookup tables size themselves"},
    {"reset_timedout_connection", "a timed-out connection's memory is freed at once, whatever ends it"},
    {"output_buffers", "file bodies are read through the io_uring queue in its own buffers"},
    {"postpone_output", "it sends what a turn produced at the end of that turn"},
    {"read_ahead", "file reads go through the io_uring queue and the page cache"},
    {"open_log_file_cache", "its log files are opened once, at start"},
};

std::string_view why_no_effect(std::string_view name) {
  for (const NoEffect& n : kWhy) {
    if (n.name == name) return n.why;
  }
  return {};
}

bool set_no_effect(Builder& b, Scope&, const Directive& d) {
  b.notice(d.loc, absl::StrCat(quoted(d.name), " directive has no effect in kosoku: ", why_no_effect(d.name)));
  return true;
}

bool set_no_effect_flag(Builder& b, Scope& s, const Directive& d) {
  bool unused;
  return parse_flag_arg(b, d, 0, &unused) && set_no_effect(b, s, d);
}

// `load_module file;`: kosoku links its modules in; a dynamic one cannot be loaded.
bool set_load_module(Builder& b, Scope&, const Directive& d) {
  return b.fail(d.args[0].loc, absl::StrCat("load_module ", quoted(d.args[0].value),
                                            ": kosoku has no dynamic modules (every module it has is built in)"));
}

// `stream { }` and `mail { }`: TCP/UDP and mail proxying are not part of kosoku.
bool set_unsupported_block(Builder& b, Scope&, const Directive& d) {
  return b.fail(d.loc, absl::StrCat("the ", quoted(d.name), " block is not supported: kosoku serves HTTP only (",
                                    d.name == "stream" ? "TCP/UDP proxying" : "mail proxying", " is out of scope)"));
}

constexpr uint32_t kEvents = kCtxEvents;

constexpr DirectiveSpec kNoEffectDirectives[] = {
    {.name = "user", .contexts = kCtxMain, .args = kTake12, .set = set_no_effect},
    {.name = "worker_rlimit_core", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect},
    {.name = "worker_priority", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect},
    {.name = "timer_resolution", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect},
    {.name = "pcre_jit", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect_flag},
    {.name = "lock_file", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect},
    {.name = "working_directory", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect},
    {.name = "daemon", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect_flag},
    {.name = "master_process", .contexts = kCtxMain, .args = kTake1, .set = set_no_effect_flag},
    {.name = "load_module", .contexts = kCtxMain, .args = kTake1, .flags = kMulti, .set = set_load_module},
    {.name = "stream", .contexts = kCtxMain, .args = kNoArgs, .flags = kBlock, .set = set_unsupported_block},
    {.name = "mail", .contexts = kCtxMain, .args = kNoArgs, .flags = kBlock, .set = set_unsupported_block},
    {.name = "multi_accept", .contexts = kEvents, .args = kTake1, .set = set_no_effect_flag},
    {.name = "use", .contexts = kEvents, .args = kTake1, .set = set_no_effect},
    {.name = "accept_mutex", .contexts = kEvents, .args = kTake1, .set = set_no_effect_flag},
    {.name = "accept_mutex_delay", .contexts = kEvents, .args = kTake1, .set = set_no_effect},
    {.name = "worker_aio_requests", .contexts = kEvents, .args = kTake1, .set = set_no_effect},
    {.name = "types_hash_max_size", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect},
    {.name = "types_hash_bucket_size", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect},
    {.name = "server_names_hash_max_size", .contexts = kCtxHttp, .args = kTake1, .set = set_no_effect},
    {.name = "server_names_hash_bucket_size", .contexts = kCtxHttp, .args = kTake1, .set = set_no_effect},
    {.name = "variables_hash_max_size", .contexts = kCtxHttp, .args = kTake1, .set = set_no_effect},
    {.name = "variables_hash_bucket_size", .contexts = kCtxHttp, .args = kTake1, .set = set_no_effect},
    {.name = "map_hash_max_size", .contexts = kCtxHttp, .args = kTake1, .set = set_no_effect},
    {.name = "map_hash_bucket_size", .contexts = kCtxHttp, .args = kTake1, .set = set_no_effect},
    {.name = "proxy_headers_hash_max_size", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect},
    {.name = "proxy_headers_hash_bucket_size", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect},
    {.name = "reset_timedout_connection", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect_flag},
    {.name = "output_buffers", .contexts = kCtxHttpAny, .args = kTake2, .set = set_no_effect},
    {.name = "postpone_output", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect},
    {.name = "read_ahead", .contexts = kCtxHttpAny, .args = kTake1, .set = set_no_effect},
    {.name = "open_log_file_cache", .contexts = kCtxHttpAny, .args = {1, 4}, .set = set_no_effect},
};

}  // namespace

std::span<const DirectiveSpec> no_effect_directives() { return kNoEffectDirectives; }

}  // namespace kosoku::config
