// Module list parsing and finit_module(2) loading. See kmod.hh.
#include "image/kmod.hh"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#ifndef MODULE_INIT_COMPRESSED_FILE
#define MODULE_INIT_COMPRESSED_FILE 4  // linux/module.h, Linux 5.17+
#endif

namespace kosoku::appliance {
namespace {

bool is_compressed(std::string_view file) {
  return absl::EndsWith(file, ".ko.xz") || absl::EndsWith(file, ".ko.zst") || absl::EndsWith(file, ".ko.gz");
}

}  // namespace

bool parse_load_order(std::string_view text, std::vector<ModuleEntry>* out, std::string* error) {
  out->clear();
  int lineno = 0;
  for (std::string_view line : absl::StrSplit(text, '\n')) {
    ++lineno;
    if (size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::string_view> fields = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    if (fields.size() < 2) {
      *error = absl::StrCat("load.order:", lineno, ": expected \"PHASE FILE [PARAMS]\"");
      return false;
    }
    const std::string_view file = fields[1];
    if (file.find('/') != std::string_view::npos || !(absl::EndsWith(file, ".ko") || is_compressed(file))) {
      *error = absl::StrCat("load.order:", lineno, ": \"", file, "\" is not a module file name");
      return false;
    }
    ModuleEntry e;
    e.phase = std::string(fields[0]);
    if (e.phase.back() == '?') {
      e.optional = true;
      e.phase.pop_back();
    }
    e.file = std::string(file);
    e.params = absl::StrJoin(fields.begin() + 2, fields.end(), " ");
    e.line = lineno;
    out->push_back(std::move(e));
  }
  return true;
}

int load_module_file(const std::string& path, const std::string& params) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  const int flags = is_compressed(path) ? MODULE_INIT_COMPRESSED_FILE : 0;
  const long rc = ::syscall(SYS_finit_module, fd, params.c_str(), flags);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (err == EEXIST) return 0;
  return -err;
}

std::string load_modules(const std::vector<ModuleEntry>& entries, std::string_view phase, std::string_view dir,
                         int* loaded, std::vector<std::string>* warnings) {
  for (const ModuleEntry& e : entries) {
    const bool selected = phase.empty() ? e.phase != "nic" : e.phase == phase;
    if (!selected) continue;
    const int rc = load_module_file(absl::StrCat(dir, "/", e.file), e.params);
    if (rc != 0) {
      std::string msg = absl::StrCat("insmod ", e.file, ": ", std::strerror(-rc));
      if (rc == -ENOENT) absl::StrAppend(&msg, " (missing file, or an unknown symbol: see the kernel log)");
      if (!e.optional) return msg;
      if (warnings != nullptr) warnings->push_back(absl::StrCat(msg, " (optional)"));
      continue;
    }
    if (loaded != nullptr) ++*loaded;
  }
  return "";
}

}  // namespace kosoku::appliance
