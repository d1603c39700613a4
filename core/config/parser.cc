#include "core/config/parser.hh"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/config/directive.hh"
#include "core/config/lexer.hh"

namespace kosoku::config {

namespace {

constexpr size_t kMaxFileBytes = 16u << 20;

std::string errno_text(int e) { return absl::StrCat(e, ": ", std::strerror(e)); }

class Parser {
 public:
  explicit Parser(const ParseOptions& opts) : opts_(opts) {}

  /// Parses one whole file's text; `top`-level semantics (a stray `}` is an error, EOF ends it).
  bool parse_text(std::string_view text, const std::string& file, int depth, std::vector<Directive>* out) {
    Lexer lexer(text, file);
    return parse_block(lexer, depth, /*top=*/true, /*data=*/false, out);
  }

  std::string error;

 private:
  bool fail(const SourceLoc& loc, std::string_view msg) {
    error = format_diag(loc, msg);
    return false;
  }

  /// `data`: the block holds data lines (is_data_block_directive), whose first words are not directive names.
  bool parse_block(Lexer& lexer, int depth, bool top, bool data, std::vector<Directive>* out) {
    Token tok;
    for (;;) {
      if (!lexer.next(&tok, &error)) return false;
      switch (tok.kind) {
        case TokenKind::kEof:
          if (!top) return fail(tok.loc, "unexpected end of file, expecting \"}\"");
          return true;
        case TokenKind::kBlockEnd:
          if (top) return fail(tok.loc, "unexpected \"}\"");
          return true;
        case TokenKind::kSemicolon:
          return fail(tok.loc, "unexpected \";\"");
        case TokenKind::kBlockStart:
          return fail(tok.loc, "unexpected \"{\"");
        case TokenKind::kWord:
          break;
      }
      Directive d;
      d.name = std::move(tok.text);
      d.loc = std::move(tok.loc);
      for (bool done = false; !done;) {
        if (!lexer.next(&tok, &error)) return false;
        switch (tok.kind) {
          case TokenKind::kWord:
            d.args.push_back(Arg{std::move(tok.text), std::move(tok.loc), tok.quoted});
            break;
          case TokenKind::kSemicolon:
            if (!data && is_block_only_directive(d.name)) {
              return fail(d.loc, absl::StrCat("directive \"", d.name, "\" has no opening \"{\""));
            }
            done = true;
            break;
          case TokenKind::kBlockStart:
            if (depth + 1 > opts_.max_block_depth) {
              return fail(tok.loc, absl::StrCat("blocks nested too deeply (limit ", opts_.max_block_depth, ")"));
            }
            d.block = true;
            if (!parse_block(lexer, depth + 1, /*top=*/false, is_data_block_directive(d.name), &d.children)) {
              return false;
            }
            done = true;
            break;
          case TokenKind::kBlockEnd:
            return fail(tok.loc, "unexpected \"}\"");
          case TokenKind::kEof:
            return fail(tok.loc, "unexpected end of file, expecting \";\" or \"}\"");
        }
      }
      if (d.name == "include") {
        if (!include(d, depth, out)) return false;
        continue;
      }
      out->push_back(std::move(d));
    }
  }

  bool include(const Directive& d, int depth, std::vector<Directive>* out) {
    if (d.block) return fail(d.loc, "directive \"include\" is not terminated by \";\"");
    if (d.args.size() != 1) return fail(d.loc, "invalid number of arguments in \"include\" directive");
    if (!opts_.allow_include) return fail(d.loc, "\"include\" is disabled here");
    if (static_cast<int>(stack_.size()) > opts_.max_include_depth) {
      return fail(d.loc, absl::StrCat("too many nested includes (limit ", opts_.max_include_depth, ")"));
    }
    const std::string& arg = d.args[0].value;
    if (arg.empty()) return fail(d.args[0].loc, "invalid value \"\" in \"include\" directive");
    std::string path = arg[0] == '/' ? arg : opts_.prefix + arg;
    std::vector<std::string> files;
    if (path.find_first_of("*?[") == std::string::npos) {
      files.push_back(path);
    } else {
      glob_t g{};
      int rc = ::glob(path.c_str(), 0, nullptr, &g);  // sorted (no GLOB_NOSORT)
      if (rc == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
      }
      ::globfree(&g);
      if (rc != 0 && rc != GLOB_NOMATCH) {
        return fail(d.args[0].loc, absl::StrCat("glob() \"", path, "\" failed"));
      }
    }
    for (const std::string& f : files) {
      std::string text;
      std::string err;
      if (!read_config_file(f, &text, &err)) return fail(d.args[0].loc, err);
      char real[PATH_MAX];
      std::string key = ::realpath(f.c_str(), real) ? std::string(real) : f;
      for (const std::string& s : stack_) {
        if (s == key) return fail(d.args[0].loc, absl::StrCat("recursive include of \"", f, "\""));
      }
      stack_.push_back(key);
      bool ok = parse_text(text, f, depth, out);
      stack_.pop_back();
      if (!ok) return false;
    }
    return true;
  }

 public:
  std::vector<std::string> stack_;  // realpaths of the files being parsed (main file first)

 private:
  const ParseOptions& opts_;
};

}  // namespace

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

bool read_config_file(const std::string& path, std::string* text, std::string* error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = absl::StrCat("open() \"", path, "\" failed (", errno_text(errno), ")");
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    int e = errno;
    ::close(fd);
    *error = S_ISDIR(st.st_mode) ? absl::StrCat("open() \"", path, "\" failed (is a directory)")
                                 : absl::StrCat("fstat() \"", path, "\" failed (", errno_text(e), ")");
    return false;
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxFileBytes) {
    ::close(fd);
    *error = absl::StrCat("\"", path, "\" is larger than 16 MiB");
    return false;
  }
  text->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < text->size()) {
    ssize_t n = ::read(fd, text->data() + got, text->size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text->resize(got);
  return true;
}

bool parse_config(std::string_view text, const std::string& file, const ParseOptions& opts,
                  std::vector<Directive>* out, std::string* error) {
  Parser p(opts);
  char real[PATH_MAX];
  p.stack_.push_back(::realpath(file.c_str(), real) ? std::string(real) : file);
  if (!p.parse_text(text, file, 0, out)) {
    *error = std::move(p.error);
    return false;
  }
  return true;
}

}  // namespace kosoku::config
