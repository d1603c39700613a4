// Kernel modules for the appliance: the list `image/build-image` writes into the initramfs and the loader PID 1
// runs over it with finit_module(2).
//
// The list, /lib/modules/load.order, is derived at image build time from the kernel's modules.dep (and
// modules.softdep / modules.alias for soft dependencies such as ext4 → crc32c), never maintained by hand. One
// module per line, deepest dependency first, each module once:
//
//   # comment
//   PHASE[?] FILE [PARAM=VALUE ...]
//
// PHASE groups the lines by when PID 1 loads them (see pid1.hh): "nic" first (the NIC driver and its
// dependencies), then the NIC binding step (nic.hh), then every other phase in file order ("bus": virtio_pci;
// "disk": virtio_blk, crc32c, ext4...). FILE is a file name in /lib/modules (modules are stored flat); the
// parameters are passed to the module as modprobe would (`uio_pci_generic` needs none). A '?' after the
// phase marks a soft dependency that may fail to load without stopping the boot (crc32c_intel needs SSE4.2;
// crc32c_generic, loaded too, serves ext4 then).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kosoku::appliance {

inline constexpr char kModuleDir[] = "/lib/modules";
inline constexpr char kLoadOrderPath[] = "/lib/modules/load.order";

struct ModuleEntry {
  std::string phase;   // "nic", "bus", "disk", ...
  std::string file;    // "virtio_ring.ko"
  std::string params;  // space-separated PARAM=VALUE, may be empty
  bool optional = false;  // "PHASE?": a load failure is a warning
  int line = 0;        // 1-based line in load.order, for error messages
};

/// Parses load.order text. On a malformed line (fewer than two fields, a FILE containing '/' or not ending in
/// .ko/.ko.xz/.ko.zst/.ko.gz) returns false with `*error` = "load.order:LINE: reason".
bool parse_load_order(std::string_view text, std::vector<ModuleEntry>* out, std::string* error);

/// Loads one module file with finit_module(2) (MODULE_INIT_COMPRESSED_FILE for .xz/.zst/.gz names). A module
/// that is already loaded (EEXIST) counts as loaded. Returns 0 or -errno. Note: a missing symbol (a
/// dependency loaded in the wrong order) comes back as -ENOENT and the kernel logs "Unknown symbol".
int load_module_file(const std::string& path, const std::string& params);

/// Loads, in order, every entry whose phase is `phase` (or, when `phase` is empty, every entry whose phase
/// is not "nic"), from `dir`. Returns "" or the first error of a required module as "insmod FILE: strerror"
/// (later modules are not attempted); a failed optional module appends that message to `*warnings` (may be
/// null) and loading goes on. `*loaded` (may be null) is incremented per module loaded.
std::string load_modules(const std::vector<ModuleEntry>& entries, std::string_view phase, std::string_view dir,
                         int* loaded, std::vector<std::string>* warnings = nullptr);

}  // namespace kosoku::appliance
