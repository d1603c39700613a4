#!/bin/sh
# Installs every Debian package the build, tests and benchmarks need, enables deb-src, and fetches
# mimalloc's source (Debian ships no static mimalloc). Idempotent: a second run only checks.
# Used by `make deps` (and so by `make run`, `make test`, `make bench`) and by .ci/run.
set -eu
PKGS="build-essential cmake ninja-build pkg-config file git ca-certificates dpkg-dev
liburing-dev libre2-dev libgtest-dev libgmock-dev libssl-dev openssl libnghttp2-dev nghttp2-client python3-h2
clang libclang-rt-14-dev
curl wget apache2-utils wrk nginx-light python3 python3.11-doc python3-pytest
libnuma-dev libbsd-dev libmd-dev libdpdk-dev libsodium-dev tcpdump iproute2 nftables
linux-image-amd64 qemu-system-x86 qemu-utils ovmf syslinux syslinux-common syslinux-utils mtools dosfstools
systemd-boot-efi fdisk e2fsprogs cpio binutils socat ethtool"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
need_src=0
[ -d third_party/mimalloc/src ] || need_src=1
[ -f third_party/abseil/.kosoku-options ] || need_src=1
if [ -n "$missing" ] || [ $need_src = 1 ]; then
  # deb-src next to every deb entry (Debian 12 deb822 sources).
  if [ -f /etc/apt/sources.list.d/debian.sources ] && ! grep -q '^Types:.*deb-src' /etc/apt/sources.list.d/debian.sources; then
    $SUDO sed -i 's/^Types: deb$/Types: deb deb-src/' /etc/apt/sources.list.d/debian.sources
  fi
  if [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list && ! grep -q '^deb-src ' /etc/apt/sources.list; then
    grep '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' | $SUDO tee -a /etc/apt/sources.list >/dev/null
  fi
  $SUDO apt-get update -qq
fi
if [ -n "$missing" ]; then
  echo "deps: installing$missing"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
  # The nginx package starts a system nginx on :80; the benchmark starts its own.
  if command -v systemctl >/dev/null 2>&1; then $SUDO systemctl disable --now nginx >/dev/null 2>&1 || true; fi
  pkill -x nginx 2>/dev/null || true
fi
if [ $need_src = 1 ]; then
  mkdir -p third_party
  # fetch_source PKG DIR: Debian's source package (with Debian's patches applied), unpacked as third_party/DIR.
  fetch_source() {
    (cd third_party && rm -rf "$2" "$1"-*/ "$1"_* &&
      apt-get source -qq "$1" >/dev/null 2>&1 &&
      mv "$1"-*/ "$2" && rm -f "$1"_*)
  }
  [ -d third_party/mimalloc/src ] || fetch_source mimalloc mimalloc
  if [ ! -f third_party/abseil/.kosoku-options ]; then
    # Debian's libabsl-dev pins absl::string_view/optional/variant/any to Abseil's own types
    # (ABSL_OPTION_USE_STD_*=0), which do not interoperate with C++20's std:: types. Build Debian's Abseil
    # source (same version, same patches) with the std:: types and without the hardened bounds checks.
    fetch_source abseil abseil
    sed -i -e 's/^#define ABSL_OPTION_USE_STD_\(ANY\|OPTIONAL\|STRING_VIEW\|VARIANT\) 0/#define ABSL_OPTION_USE_STD_\1 1/' \
           -e 's/^#define ABSL_OPTION_INLINE_NAMESPACE_NAME .*/#define ABSL_OPTION_INLINE_NAMESPACE_NAME kosoku_lts/' \
           -e 's/^#define ABSL_OPTION_HARDENED 1/#define ABSL_OPTION_HARDENED 0/' third_party/abseil/absl/base/options.h
    touch third_party/abseil/.kosoku-options
  fi
fi
echo "deps: ok"
