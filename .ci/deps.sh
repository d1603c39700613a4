#!/bin/sh
# Installs every Debian package the build, tests and benchmarks need, enables deb-src, and fetches
# mimalloc's source (Debian ships no static mimalloc). Idempotent: a second run only checks.
# Used by `make deps` (and so by `make run`, `make test`, `make bench`) and by .ci/run.
set -eu
PKGS="build-essential cmake ninja-build pkg-config file git ca-certificates dpkg-dev
liburing-dev libabsl-dev libre2-dev libgtest-dev libgmock-dev
clang libclang-rt-14-dev
curl wget apache2-utils wrk nginx-light python3 python3.11-doc python3-pytest
libnuma-dev libbsd-dev libmd-dev"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
need_src=0
[ -d third_party/mimalloc/src ] || need_src=1
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
  mkdir -p third_party && rm -rf third_party/mimalloc third_party/mimalloc-*
  (cd third_party && apt-get source -qq --download-only mimalloc >/dev/null 2>&1 || apt-get source -qq mimalloc)
  (cd third_party && [ -d mimalloc-*/ ] || dpkg-source -x mimalloc_*.dsc >/dev/null)
  (cd third_party && mv mimalloc-*/ mimalloc && rm -f mimalloc_*)
fi
echo "deps: ok"
