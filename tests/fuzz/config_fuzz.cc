// libFuzzer target over the whole configuration loader (lexer, parser, directive tables, merge, listen
// grouping, indexes) via load_from_string, with includes disabled (no file system access) and upstream names
// not looked up (no DNS). A loaded
// configuration is also exercised through its per-request lookups and template expansion so that the
// indexes the loader builds are walked too.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/access_log/log_conf.hh"
#include "core/config/conf.hh"
#include "core/config/loader.hh"
#include "core/config/variables.hh"

namespace {

class Vars : public kosoku::config::VariableSource {
 public:
  bool get(const kosoku::config::Variable& v, std::string_view suffix, std::string& out) const override {
    if (v.name == "remote_user") return false;
    out.append("v\"\\\x01\xff");
    out.append(suffix);
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kosoku::config;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  LoadOptions opts;
  opts.allow_include = false;
  opts.resolve_names = false;  // no DNS query per input (a lookup costs milliseconds)
  LoadResult r = load_from_string(text, "fuzz.conf", opts);
  if (!r.ok()) return 0;
  static constexpr std::string_view kUris[] = {"/", "/a", "/a/b.jpg", "/images/x.PNG", "", "/status"};
  static constexpr std::string_view kHosts[] = {"", "a", "www.example.com", "x.y.example.org", "www.example.co.uk"};
  for (const auto& srv : r.conf->http.servers) {
    for (std::string_view u : kUris) (void)srv->find_location(u);
  }
  for (const ListenSocket& ls : r.conf->http.listen_sockets) {
    for (std::string_view h : kHosts) (void)ls.find_server(h);
  }
  Vars vars;
  std::string out;
  for (const kosoku::access_log::LogFormatConf& f : r.conf->http.module<kosoku::access_log::LogHttpConf>().formats) {
    expand(*f.tpl, vars, out);
  }
  return 0;
}
