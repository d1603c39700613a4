#include "core/http/status.hh"

#include <array>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace kosoku::http {

namespace {

struct Entry {
  int code;
  std::string_view reason;
};

constexpr Entry kReasons[] = {
    {100, "Continue"}, {101, "Switching Protocols"}, {200, "OK"}, {201, "Created"}, {202, "Accepted"},
    {204, "No Content"}, {206, "Partial Content"}, {301, "Moved Permanently"}, {302, "Found"},
    {303, "See Other"}, {304, "Not Modified"}, {307, "Temporary Redirect"}, {308, "Permanent Redirect"},
    {400, "Bad Request"}, {401, "Unauthorized"}, {403, "Forbidden"}, {404, "Not Found"},
    {405, "Method Not Allowed"}, {406, "Not Acceptable"}, {408, "Request Timeout"}, {409, "Conflict"},
    {410, "Gone"}, {411, "Length Required"}, {412, "Precondition Failed"}, {413, "Content Too Large"},
    {414, "URI Too Long"}, {415, "Unsupported Media Type"}, {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"}, {421, "Misdirected Request"}, {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"}, {500, "Internal Server Error"}, {501, "Not Implemented"},
    {502, "Bad Gateway"}, {503, "Service Unavailable"}, {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

using Pages = absl::flat_hash_map<int, std::string>;

// The page of every error status, signed `signature` as nginx signs its own.
Pages* make_pages(std::string_view signature) {
  auto* p = new Pages();
  for (const Entry& e : kReasons) {
    if (e.code < 300 || e.code == 304) continue;
    std::string title = absl::StrCat(e.code, " ", e.reason);
    (*p)[e.code] = absl::StrCat("<html>\r\n<head><title>", title, "</title></head>\r\n<body>\r\n<center><h1>",
                                title, "</h1></center>\r\n<hr><center>", signature,
                                "</center>\r\n</body>\r\n</html>\r\n");
  }
  return p;
}

// Built once (first use, thread-safe static init), read-only afterwards: safe to share between cores.
const Pages& pages(bool server_tokens) {
  static const Pages* with_version = make_pages(kServerWithVersion);
  static const Pages* bare = make_pages(kServerName);
  return server_tokens ? *with_version : *bare;
}

}  // namespace

std::string_view reason_phrase(int status) {
  for (const Entry& e : kReasons) {
    if (e.code == status) return e.reason;
  }
  return "Unknown";
}

std::string_view error_page(int status, bool server_tokens) {
  const auto& p = pages(server_tokens);
  auto it = p.find(status);
  return it == p.end() ? std::string_view() : std::string_view(it->second);
}

}  // namespace kosoku::http
