// The answer of a content handler that serves only GET and HEAD (static files, the status page), as nginx's
// static and stub_status modules give it.
#pragma once

#include "core/http/exchange.hh"

namespace kosoku::http {

/// Answers a request whose method is neither GET nor HEAD and returns true: 501 for a method the server does
/// not recognise, 405 with `Allow: GET, HEAD` for a known one it refuses (RFC 9110 §9.1, §15.5.6, §15.6.2).
/// Returns false, answering nothing, for GET and HEAD.
inline bool refuse_unless_get_or_head(Exchange& ex) {
  Method m = ex.request().method;
  if (m == Method::kGet || m == Method::kHead) return false;
  if (m == Method::kOther) {
    ex.respond(501, {}, {});
    return true;
  }
  ex.head().extra.assign("Allow: GET, HEAD\r\n");
  ex.respond(405, {}, {});
  return true;
}

}  // namespace kosoku::http
