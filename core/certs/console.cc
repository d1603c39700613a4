#include "core/certs/console.hh"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/certs/host_name.hh"
#include "core/certs/pem.hh"
#include "core/certs/store.hh"

namespace kosoku::certs {

namespace {

constexpr std::string_view kUsage = "usage: certs list [OFFSET] [LIMIT] | certs show HOST | certs count\n";
constexpr size_t kDefaultLimit = 20;
constexpr size_t kMaxLimit = 10000;

}  // namespace

std::string console_command(CertStore& store, std::string_view line) {
  std::vector<std::string_view> args = absl::StrSplit(line, absl::ByAnyChar(" \t\r\n"), absl::SkipEmpty());
  if (args.size() < 2 || args[0] != "certs") return std::string(kUsage);
  const std::string_view cmd = args[1];
  if (cmd == "count" && args.size() == 2) return absl::StrCat(store.index().size(), " certificate(s) in the store\n");
  if (cmd == "list" && args.size() <= 4) {
    size_t offset = 0, limit = kDefaultLimit;
    if (args.size() >= 3 && !absl::SimpleAtoi(args[2], &offset)) return std::string(kUsage);
    if (args.size() == 4 && (!absl::SimpleAtoi(args[3], &limit) || limit == 0)) return std::string(kUsage);
    if (limit > kMaxLimit) limit = kMaxLimit;
    std::string out;
    size_t shown = 0;
    const size_t total = store.index().list(offset, limit, [&](std::string_view host, uint64_t) {
      absl::StrAppend(&out, "  ", host, "\n");
      ++shown;
    });
    return absl::StrCat(total, " certificate(s); ", shown, " from offset ", offset, ":\n", out);
  }
  if (cmd == "show" && args.size() == 3) {
    std::string host;
    if (!normalize_cert_host(args[2], &host)) return absl::StrCat("error: invalid host \"", args[2], "\"\n");
    if (store.index().get(host) == 0) return absl::StrCat("no certificate for host \"", host, "\"\n");
    std::string pem, err;
    CertBundle b;
    if (!store.read_file(host, &pem, &err) || !parse_bundle(pem, &b, &err)) {
      return absl::StrCat("error: ", host, ": ", err, "\n");
    }
    CertInfo i = describe(b.leaf, b.chain, b.key);
    return absl::StrCat(host, "\n  subject     ", i.subject, "\n  issuer      ", i.issuer, "\n  not before  ",
                        i.not_before, "\n  not after   ", i.not_after, "\n  key         ", i.key_type,
                        "\n  sha256      ", i.sha256, "\n  chain       ", i.chain_certs, " certificate(s)\n  file        ",
                        store.path_of(host), "\n");
  }
  return std::string(kUsage);
}

std::string console_command(std::string_view line) {
  CertStore* store = process_store_if_created();
  if (store == nullptr) return "error: no ssl_certificate_store (or no worker has started)\n";
  return console_command(*store, line);
}

}  // namespace kosoku::certs
