// nginx-syntax tokenizer (the lexical half of nginx's ngx_conf_read_token, src/core/ngx_conf_file.c).
//
// Tokens: words, `;`, `{`, `}` and end of file. Every token carries the `file:line:col` of its first byte
// (lines and columns are 1-based; a column counts bytes, a tab is one column).
//
// Rules (as nginx):
//   - whitespace (space, tab, CR, LF) separates words; `;`, `{` end a word; `}` ends nothing inside a word
//     (so `${var}` and `a}b` are single words; a `}` token only starts where a token may start);
//   - `#` starts a comment only where a token may start (`a#b` is one word);
//   - `"..."` and `'...'` quote a word only where a token may start; after the closing quote the next byte
//     must be whitespace, `;`, `{` or `)` (else `unexpected "X"`); a `)` there starts the next word, so the
//     closing parenthesis of `if ($x ~ "a b")` is a word of its own;
//   - `{` right after `$` belongs to the word (`${name}` variables stay intact);
//   - `\` makes the next byte ordinary for splitting (in and out of quotes); then, in every word,
//     `\"` `\'` `\\` become `"` `'` `\`, and `\t` `\r` `\n` become TAB, CR, LF; any other `\x` is kept as is
//     (regexes such as `\.php$` or `\d` survive).
// Errors (`FILE:LINE:COL: message`): `unexpected end of file, unbalanced quotes` (at the opening quote),
// `unexpected "X"` (a byte glued to a closing quote). Structural errors (unexpected `}`, missing `;`) are
// the parser's (config/parser.hh).
#pragma once

#include <string>
#include <string_view>

#include "core/config/conf.hh"

namespace kosoku::config {

enum class TokenKind { kWord, kSemicolon, kBlockStart, kBlockEnd, kEof };

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;     // kWord: the unescaped word (quotes removed)
  bool quoted = false;  // kWord written in "..." or '...'
  SourceLoc loc;        // first byte of the token (the opening quote for quoted words); kEof: end of text
};

/// Formats `FILE:LINE:COL: message`, the one shape every configuration error takes.
std::string format_diag(const SourceLoc& loc, std::string_view message);

class Lexer {
 public:
  /// `text` must outlive the lexer; `file` names it in every SourceLoc.
  Lexer(std::string_view text, std::string file);

  /// Reads the next token into *tok. Returns false on a lexical error, with *error = `FILE:LINE:COL: msg`.
  /// After kEof every call returns kEof again.
  bool next(Token* tok, std::string* error);

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return text_[pos_]; }
  void advance();  // one byte, tracking line/col
  SourceLoc here() const { return SourceLoc{file_, line_, col_}; }
  bool read_quoted(Token* tok, std::string* error);
  void read_word(Token* tok);

  std::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

/// nginx's unescaping of a raw word (see the file comment): `\"` `\'` `\\` `\t` `\r` `\n`; others kept.
std::string unescape_word(std::string_view raw);

}  // namespace kosoku::config
