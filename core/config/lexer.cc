#include "core/config/lexer.hh"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kosoku::config {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::string format_diag(const SourceLoc& loc, std::string_view message) {
  return absl::StrCat(loc.file, ":", loc.line, ":", loc.col, ": ", std::string(message));
}

std::string unescape_word(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    char c = raw[i];
    if (c == '\\' && i + 1 < raw.size()) {
      switch (raw[i + 1]) {
        case '"':
        case '\'':
        case '\\':
          out.push_back(raw[i + 1]);
          ++i;
          continue;
        case 't':
          out.push_back('\t');
          ++i;
          continue;
        case 'r':
          out.push_back('\r');
          ++i;
          continue;
        case 'n':
          out.push_back('\n');
          ++i;
          continue;
        default:
          break;
      }
    }
    out.push_back(c);
  }
  return out;
}

Lexer::Lexer(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

void Lexer::advance() {
  if (text_[pos_] == '\n') {
    ++line_;
    col_ = 1;
  } else {
    ++col_;
  }
  ++pos_;
}

bool Lexer::next(Token* tok, std::string* error) {
  tok->text.clear();
  tok->quoted = false;
  for (;;) {
    while (!at_end() && is_space(peek())) advance();
    if (at_end()) {
      tok->kind = TokenKind::kEof;
      tok->loc = here();
      return true;
    }
    if (peek() != '#') break;
    while (!at_end() && peek() != '\n') advance();
  }
  tok->loc = here();
  switch (peek()) {
    case ';':
      advance();
      tok->kind = TokenKind::kSemicolon;
      return true;
    case '{':
      advance();
      tok->kind = TokenKind::kBlockStart;
      return true;
    case '}':
      advance();
      tok->kind = TokenKind::kBlockEnd;
      return true;
    case '"':
    case '\'':
      return read_quoted(tok, error);
    default:
      read_word(tok);
      return true;
  }
}

bool Lexer::read_quoted(Token* tok, std::string* error) {
  const char quote = peek();
  const SourceLoc open = here();
  advance();
  const size_t start = pos_;
  for (;;) {
    if (at_end()) {
      *error = format_diag(open, "unexpected end of file, unbalanced quotes");
      return false;
    }
    char c = peek();
    if (c == '\\') {
      advance();
      if (!at_end()) advance();
      continue;
    }
    if (c == quote) break;
    advance();
  }
  tok->kind = TokenKind::kWord;
  tok->quoted = true;
  tok->text = unescape_word(text_.substr(start, pos_ - start));
  advance();  // the closing quote
  if (!at_end()) {
    char c = peek();
    // `)` may follow (nginx: `if ($x ~ "^a b$")`); it starts the next word.
    if (!is_space(c) && c != ';' && c != '{' && c != ')') {
      *error = format_diag(here(), absl::StrCat("unexpected \"", std::string(1, text_[pos_]), "\""));
      return false;
    }
  }
  return true;
}

void Lexer::read_word(Token* tok) {
  const size_t start = pos_;
  bool variable = false;  // the previous byte was `$`: a `{` right after it belongs to the word
  while (!at_end()) {
    char c = peek();
    if (c == '{' && variable) {
      variable = false;
      advance();
      continue;
    }
    variable = false;
    if (c == '\\') {
      advance();
      if (!at_end()) advance();
      continue;
    }
    if (c == '$') {
      variable = true;
      advance();
      continue;
    }
    if (is_space(c) || c == ';' || c == '{') break;
    advance();
  }
  tok->kind = TokenKind::kWord;
  tok->text = unescape_word(text_.substr(start, pos_ - start));
}

}  // namespace kosoku::config
