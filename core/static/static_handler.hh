// The static-file content handler (nginx's ngx_http_static_module + index + try_files + range and
// not-modified filters): maps $uri to a file under `root` or `alias`, serves it with MIME type, ETag,
// Last-Modified, conditional requests (RFC 9110 §13) and ranges (RFC 9110 §14), streaming the body in
// chunks of min(sendfile_max_chunk, 256 KiB) through two per-request buffers, so memory per connection is
// bounded (≤ 512 KiB) whatever the file size. Every open, stat and read goes through the core's disk queue
// (`aio`) via the open_file_cache; page-cache hits complete inline.
#pragma once

#include "core/http/exchange.hh"
#include "core/http/module_core.hh"

namespace kosoku::config {
struct Module;
}

namespace kosoku::static_files {

/// The content handler of every location no other module serves (nginx's static, index and try_files
/// handlers together): GET and HEAD only (501 / 405 otherwise; with try_files, for the entry found — the last
/// parameter's internal redirect takes any method); never reads the request body.
class StaticHandler final : public http::ContentHandler, public http::ModuleCore {
 public:
  void handle(http::Exchange& ex) override;
  bool reads_body() const override { return false; }
  http::ContentHandler* content_handler() override { return this; }
};

/// The static module's descriptor: last in the registry, it serves every location.
config::Module& module();

}  // namespace kosoku::static_files
