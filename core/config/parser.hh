// nginx-syntax block parser: tokens (config/lexer.hh) → a generic tree of directives, with `include`
// resolved in place. No directive is interpreted here except `include`; meaning is given by the directive
// tables (config/directive.hh) when the loader walks the tree.
//
// Structural errors, worded as nginx's (`FILE:LINE:COL: message`):
//   unexpected "}"                                  a `}` with no open block, or right after arguments
//   unexpected ";" / unexpected "{"                 a `;` or `{` with no directive name
//   unexpected end of file, expecting ";" or "}"    a directive cut by the end of the file
//   unexpected end of file, expecting "}"           a block left open at the end of the file
//   blocks nested too deeply (limit 64)             protects the stack (nginx has no limit)
//
// `include PATH;` (any context, as nginx's NGX_ANY_CONF): the directives of the included file(s) replace
// the `include` line. PATH may be a glob(3) pattern (`*`, `?`, `[`): its matches are included in sorted
// order and no match is not an error (nginx); a PATH without glob characters must exist.
// A relative PATH is resolved against ParseOptions::prefix, which the loader sets to the directory of the
// main configuration file — nginx's `conf_prefix` rule (with `-c FILE`, nginx's conf prefix is FILE's
// directory), so `include mime.types;` in conf/kosoku.conf reads conf/mime.types whichever file holds the
// `include` line. Each included file is parsed as a whole file: its braces must balance within it.
// Protection: a file already being included (same realpath) is `recursive include of "PATH"`; more than
// ParseOptions::max_include_depth nested includes is an error; files over 16 MiB are refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/config/conf.hh"

namespace kosoku::config {

/// One argument of a directive, with where it was written.
struct Arg {
  std::string value;    // unescaped, quotes removed
  SourceLoc loc;        // first byte (the opening quote if quoted)
  bool quoted = false;
};

/// One directive of the generic tree: `name arg... ;` or `name arg... { children }`.
struct Directive {
  std::string name;
  SourceLoc loc;                    // the name token
  std::vector<Arg> args;
  bool block = false;               // written with `{ ... }`
  std::vector<Directive> children;  // block body (include already spliced in)
};

struct ParseOptions {
  bool allow_include = true;    // false: `include` is an error (fuzzing, untrusted text)
  std::string prefix;           // directory for relative include paths ("" = the current directory)
  int max_include_depth = 16;   // nested include levels
  int max_block_depth = 64;     // nested `{` levels
};

/// Parses `text` (named `file` in every SourceLoc). Returns false with *error = `FILE:LINE:COL: msg`.
bool parse_config(std::string_view text, const std::string& file, const ParseOptions& opts,
                  std::vector<Directive>* out, std::string* error);

/// Reads a whole file (regular file, at most 16 MiB). Returns false with *error = nginx's
/// `open() "PATH" failed (2: No such file or directory)` shape.
bool read_config_file(const std::string& path, std::string* text, std::string* error);

/// Directory part of `path` with a trailing '/', or "" when `path` has no '/'.
std::string dir_of(const std::string& path);

}  // namespace kosoku::config
