// Groups `listen` lines into listening sockets and builds each socket's server-name index
// (nginx's ngx_http_optimize_servers / ngx_http_server_names).
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/values.hh"

namespace kosoku::config {

namespace {

// Adds one name of `srv` to the index; a name already taken by an earlier server on this socket is
// ignored with nginx's warning.
void add_name(Builder& b, ListenSocket& ls, const ServerConf* srv, const std::string& name) {
  ServerNameIndex& idx = ls.names;
  bool taken = false;
  if (name.size() > 2 && name[0] == '*' && name[1] == '.') {
    auto& head = idx.head[name.substr(2)];
    taken = head.sub != nullptr;
    if (!taken) head.sub = srv;
  } else if (name.size() > 1 && name[0] == '.') {
    auto& head = idx.head[name.substr(1)];
    taken = head.sub != nullptr || head.bare != nullptr;
    if (head.sub == nullptr) head.sub = srv;
    if (head.bare == nullptr) head.bare = srv;
  } else if (name.size() > 2 && name.back() == '*' && name[name.size() - 2] == '.') {
    taken = !idx.tail.try_emplace(name.substr(0, name.size() - 1), srv).second;  // key keeps the '.'
  } else {
    taken = !idx.exact.try_emplace(name, srv).second;
  }
  if (taken) b.warn(srv->loc, absl::StrCat("conflicting server name ", quoted(name), " on ", ls.conf.text, ", ignored"));
}

void build_names(Builder& b, ListenSocket& ls) {
  for (const ServerConf* srv : ls.servers) {
    if (srv->server_names.empty()) {
      ls.names.exact.try_emplace("", srv);  // nginx's default server_name is ""
      continue;
    }
    size_t regex_i = 0;
    for (const std::string& name : srv->server_names) {
      if (!name.empty() && name[0] == '~') {
        ls.names.regex.emplace_back(srv->server_name_regex[regex_i++].get(), srv);
        continue;
      }
      add_name(b, ls, srv, name);
    }
  }
}

}  // namespace

bool group_listen_sockets(Builder& b) {
  HttpConf& http = b.main->http;
  std::vector<bool> has_opts;  // per socket: some listen line set socket options
  for (size_t si = 0; si < http.servers.size(); ++si) {
    const ServerConf* srv = http.servers[si].get();
    const SrvNode& node = *b.servers[si];
    for (size_t li = 0; li < srv->listen.size(); ++li) {
      const ListenConf& l = srv->listen[li];
      size_t k = 0;
      while (k < http.listen_sockets.size() && !same_sockaddr(http.listen_sockets[k].conf.addr, l.addr)) ++k;
      if (k == http.listen_sockets.size()) {
        ListenSocket ls;
        ls.conf = l;
        ls.conf.default_server = false;
        http.listen_sockets.push_back(std::move(ls));
        has_opts.push_back(false);
      }
      ListenSocket& ls = http.listen_sockets[k];
      ls.servers.push_back(srv);
      ls.conf.ssl = ls.conf.ssl || l.ssl;
      ls.conf.http2 = ls.conf.http2 || l.http2;
      if (l.default_server) {
        if (ls.default_server != nullptr) {
          return b.fail(node.listen_locs[li], absl::StrCat("a duplicate default server for ", l.text));
        }
        ls.default_server = srv;
        ls.conf.default_server = true;
      }
      if (node.listen_opts[li]) {
        if (has_opts[k]) return b.fail(node.listen_locs[li], absl::StrCat("duplicate listen options for ", l.text));
        has_opts[k] = true;
        ls.conf.backlog = l.backlog;
        ls.conf.reuseport = l.reuseport;
        ls.conf.so_keepalive = l.so_keepalive;
        ls.conf.keepidle_s = l.keepidle_s;
        ls.conf.keepintvl_s = l.keepintvl_s;
        ls.conf.keepcnt = l.keepcnt;
        ls.conf.deferred = l.deferred;
        ls.conf.rcvbuf = l.rcvbuf;
        ls.conf.sndbuf = l.sndbuf;
      }
    }
  }
  for (ListenSocket& ls : http.listen_sockets) {
    if (ls.default_server == nullptr) ls.default_server = ls.servers.front();
    build_names(b, ls);
  }
  return true;
}

}  // namespace kosoku::config
