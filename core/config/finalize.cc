// After the walk: merge down (nginx's merge_srv_conf / merge_loc_conf), resolve names, expand worker
// affinity, assemble the final location trees and build their lookup indexes.
#include <algorithm>
#include <bit>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/config/build.hh"
#include "core/config/directive.hh"
#include "core/config/module.hh"
#include "core/config/values.hh"
#include "core/config/variables.hh"

namespace kosoku::config {

namespace {

// nginx's ngx_http_core_default_types: used when no `types` is set at any level.
std::shared_ptr<const MimeTypes> default_types() {
  static const std::shared_ptr<const MimeTypes> kTypes = std::make_shared<const MimeTypes>(
      MimeTypes{{"html", "text/html"}, {"gif", "image/gif"}, {"jpg", "image/jpeg"}});
  return kTypes;
}

void merge_loc_slots(LocationConf& child, const Seen& seen, const LocationConf& parent) {
  for (const Module* m : modules()) {
    for (const DirectiveSpec& row : m->directives) {
      if (row.merge_loc && !seen.has(slot_of(row))) row.merge_loc(child, parent);
    }
  }
}

void merge_srv_slots(ServerConf& child, const Seen& seen, const ServerConf& parent) {
  for (const Module* m : modules()) {
    for (const DirectiveSpec& row : m->directives) {
      if (row.merge_srv && !seen.has(slot_of(row))) row.merge_srv(child, parent);
    }
  }
}

// The content phase handler of each location (nginx sets it from a location directive): the first module in
// registry order whose predicate accepts the location.
void resolve_content(LocationConf& loc) {
  for (const Module* m : modules()) {
    if (m->content != nullptr && m->content(loc)) {
      loc.content = m;
      break;
    }
  }
  for (LocationConf& l : loc.locations) resolve_content(l);
}

void merge_tree(LocNode& node) {
  for (auto& child : node.children) {
    merge_loc_slots(child->conf, child->seen, node.conf);
    merge_tree(*child);
  }
}

// Moves the built nodes into their final vectors (no pointer into them is taken before this is done).
void assemble(LocNode& node, std::vector<LocationConf>* out) {
  out->reserve(node.children.size());
  for (auto& child : node.children) {
    LocationConf conf = std::move(child->conf);
    assemble(*child, &conf.locations);
    out->push_back(std::move(conf));
  }
}

void build_index(std::vector<LocationConf>& locs, LocationIndex* idx) {
  using Match = LocationConf::Match;
  for (const LocationConf& l : locs) {
    switch (l.match) {
      case Match::kExact:
        idx->exact.push_back({l.pattern, &l, -1});
        break;
      case Match::kPrefix:
      case Match::kPrefixNoRegex:
        idx->prefix.push_back({l.pattern, &l, -1});
        break;
      case Match::kRegex:
      case Match::kRegexCaseless:
        idx->regex.push_back(&l);
        break;
      case Match::kNone:
      case Match::kNamed:  // reached by name only
        break;
    }
  }
  auto by_pattern = [](const LocationIndex::Entry& a, const LocationIndex::Entry& b) { return a.pattern < b.pattern; };
  std::sort(idx->exact.begin(), idx->exact.end(), by_pattern);
  std::sort(idx->prefix.begin(), idx->prefix.end(), by_pattern);
  // parent[i]: the longest earlier pattern that is a prefix of pattern[i]. Every prefix of pattern[i] that
  // is in the set sorts before it and is also a prefix of pattern[i-1] (or is pattern[i-1]), so it lies on
  // pattern[i-1]'s parent chain.
  for (size_t i = 0; i < idx->prefix.size(); ++i) {
    std::string_view p = idx->prefix[i].pattern;
    int32_t j = static_cast<int32_t>(i) - 1;
    while (j >= 0 && p.substr(0, idx->prefix[j].pattern.size()) != idx->prefix[j].pattern) j = idx->prefix[j].parent;
    idx->prefix[i].parent = j;
  }
  for (LocationConf& l : locs) build_index(l.locations, &l.nested_index);
}

bool expand_affinity(Builder& b) {
  MainConf& m = *b.main;
  const int n = m.worker_processes;
  if (b.affinity_auto) {
    if (b.affinity_masks.empty()) return true;  // all CPUs: worker i → i-th allowed CPU (conf.hh)
    std::vector<int> cpus;
    for (int c = 0; c < 64; ++c) {
      if (b.affinity_masks[0] & (1ull << c)) cpus.push_back(c);
    }
    for (int i = 0; i < n; ++i) m.worker_cpu_affinity.push_back(cpus[static_cast<size_t>(i) % cpus.size()]);
    return true;
  }
  if (b.affinity_masks.empty()) return true;
  size_t count = b.affinity_masks.size();
  if (count != 1 && count != static_cast<size_t>(n)) {
    b.warn(b.affinity_loc,
           "the number of \"worker_processes\" is not equal to the number of \"worker_cpu_affinity\" masks, "
           "using last mask for remaining worker processes");
  }
  for (int i = 0; i < n; ++i) {
    uint64_t mask = b.affinity_masks[std::min(static_cast<size_t>(i), count - 1)];
    m.worker_cpu_affinity.push_back(std::countr_zero(mask));
  }
  return true;
}

bool resolve_names(Builder& b) {
  MainConf& m = *b.main;
  if (m.find_disk_queue("default") == nullptr) m.disk_queues.insert(m.disk_queues.begin(), DiskQueueConf{"default"});
  for (const NameRef& r : b.aio_refs) {
    if (m.find_disk_queue(r.name) == nullptr) return b.fail(r.loc, absl::StrCat("unknown disk_queue ", quoted(r.name)));
  }
  return true;
}

}  // namespace

bool finalize(Builder& b) {
  MainConf& m = *b.main;
  if (!expand_affinity(b) || !resolve_names(b)) return false;
  if (!b.http_loc.conf.types) b.http_loc.conf.types = default_types();
  for (auto& node : b.servers) {
    ServerConf& srv = *node->conf;
    merge_srv_slots(srv, node->base.seen, b.http_srv);
    merge_loc_slots(node->base.conf, node->base.seen, b.http_loc.conf);
    merge_tree(node->base);
    if (srv.listen.empty()) {
      ListenConf l;
      std::string err;
      parse_listen_address("0.0.0.0:80", &l, &err);
      srv.listen.push_back(std::move(l));
      node->listen_locs.push_back(srv.loc);
      node->listen_opts.push_back(false);
    }
    srv.base = std::move(node->base.conf);
    srv.base.match = LocationConf::Match::kNone;
    assemble(node->base, &srv.locations);
    build_index(srv.locations, &srv.location_index);
    m.http.servers.push_back(std::move(node->conf));
  }
  for (const Module* mod : modules()) {
    if (mod->finalize != nullptr && !mod->finalize(b)) return false;
  }
  for (auto& srv : m.http.servers) {
    resolve_content(srv->base);
    for (LocationConf& l : srv->locations) resolve_content(l);
  }
  return group_listen_sockets(b);
}

}  // namespace kosoku::config
