// Loads an nginx-syntax configuration into the immutable typed tree of config/conf.hh.
//
//   LoadResult r = config::load("conf/kosoku.conf");
//   if (!r.ok()) { fprintf(stderr, "%s\n", r.error.message.c_str()); ... }
//   std::unique_ptr<const MainConf> conf = std::move(r.conf);
//
// Steps: read + tokenize + parse with includes (config/parser.hh) → walk the tree through the directive
// tables (config/directive.hh) → merge main → http → server → location → nested location with nginx's
// defaults (the conf.hh initialisers) → resolve names (aio queues, access_log formats) → group `listen`
// into HttpConf::listen_sockets and build the server-name and location lookup indexes. The same function
// serves `kosoku -t` (config/check.hh), the server start and the image build.
//
// Every error is one line `FILE:LINE:COL: message`, e.g. `conf/bad.conf:12:5: unknown directive "lisen"`;
// FILE is the path as given (or as resolved for included files). Reading the main file itself can fail
// with nginx's `open() "PATH" failed (2: No such file or directory)` (no location then).
//
// Not thread-safe while loading (it is a start-up step); the result is immutable and may be read from
// every core without locks. RE2 objects in the result are thread-safe (internally synchronised).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"

namespace kosoku::config {

struct ConfigError {
  std::string message;  // `FILE:LINE:COL: message`
};

struct LoadOptions {
  bool allow_include = true;  // false: `include` is an error (fuzzing)
  bool resolve_names = true;  // false: upstream host names are not looked up, each stands for 127.0.0.1 (fuzzing)
  std::string prefix;         // directory for relative `include` paths; "" = the main file's directory
};

struct LoadResult {
  std::unique_ptr<const MainConf> conf;  // set on success
  ConfigError error;                     // set on failure
  std::vector<std::string> warnings;     // `FILE:LINE:COL: message`, nginx's [warn] lines (both outcomes)
  std::vector<std::string> notices;      // the same, [notice] lines (directives that have no effect)
  bool ok() const { return conf != nullptr; }
};

/// Reads and loads the file at `path`. MainConf::file = path, MainConf::text = its contents.
LoadResult load(const std::string& path, const LoadOptions& opts = {});

/// Loads `text` as if it were the file `virtual_file_name` (used in every SourceLoc and for the include
/// prefix: its directory, or the current directory if it has none).
LoadResult load_from_string(std::string_view text, const std::string& virtual_file_name,
                            const LoadOptions& opts = {});

}  // namespace kosoku::config
