#!/usr/bin/env bash
# Builds an arm64 sysroot (headers, libraries, CMake and pkg-config files)
# for the cross build from Debian's own arm64 packages: the build
# dependencies and everything they depend on, downloaded with apt-get and
# unpacked with dpkg -x. Nothing is installed on the host beyond apt's
# knowledge of the arm64 architecture (installing the -dev packages
# multiarch would replace some host packages, libgloo-dev among them).
#   cmake/arm64-sysroot.sh SYSROOT
set -euo pipefail
sysroot=${1:?usage: arm64-sysroot.sh SYSROOT}
# The libraries kiln links (as in the Makefile's PKGS) and the
# architecture-independent headers it includes.
arch_pkgs="libopenblas-dev libhwy-dev libgtest-dev libdnnl-dev libzip-dev zlib1g-dev libgloo-dev libc6-dev"
all_pkgs="nlohmann-json3-dev libcli11-dev googletest"

if [ -f "$sysroot/.complete" ] && [ -f "$sysroot/.shlibs" ]; then exit 0; fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  [ "$(id -u)" = 0 ] || { echo "arm64-sysroot: run as root once (dpkg --add-architecture arm64)"; exit 1; }
  dpkg --add-architecture arm64
  apt-get update -q
elif ! apt-cache show libhwy-dev:arm64 >/dev/null 2>&1; then
  apt-get update -q
fi

# The dependency closure, arm64 packages only (programs such as dpkg or tar
# that the closure drags in are not needed to link or run kiln).
packages=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
             --no-enhances --no-pre-depends $(printf '%s:arm64 ' $arch_pkgs) |
           grep -E '^[a-z0-9].*:arm64$' | sort -u |
           grep -vE '^(dpkg|tar|passwd|install-info|cdebconf|adduser|debconf|libpam|libaudit|libsemanage|libselinux|libsepol|libnewt|libslang|libtextwrap|libdebian-installer|libreadline|libcap-ng)' |
           grep -vE '^libopenblas.*-(openmp|serial)')  # one OpenBLAS variant: pthread, as on the host
debs="$sysroot.debs"
rm -rf "$debs" "$sysroot"
mkdir -p "$debs" "$sysroot"
(cd "$debs" && apt-get download -q $packages $all_pkgs 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)
count=0
for deb in "$debs"/*.deb; do
  dpkg -x "$deb" "$sysroot"
  # The packages' shlibs (which package a shared library's soname needs,
  # what dpkg-shlibdeps reads from an installed system): the arm64 Debian
  # package's Depends come from them (cmake/cross-depends.cmake).
  dpkg-deb --info "$deb" shlibs >> "$sysroot/.shlibs" 2>/dev/null || true
  count=$((count + 1))
done
# Absolute symlinks inside the sysroot point at the host: make them relative to it.
find "$sysroot" -type l -lname '/*' | while read -r link; do
  ln -sfn "$sysroot$(readlink "$link")" "$link"
done
# What update-alternatives does on a real install: OpenBLAS's pthread
# variant as libopenblas, libblas and liblapack.
lib="$sysroot/usr/lib/aarch64-linux-gnu"
for f in libopenblas.so libopenblas.so.0 libblas.so libblas.so.3 liblapack.so liblapack.so.3; do
  [ -e "$lib/openblas-pthread/$f" ] && ln -sfn "openblas-pthread/$f" "$lib/$f"
done
mkdir -p "$lib/pkgconfig"
for f in openblas.pc blas.pc lapack.pc; do
  [ -e "$lib/openblas-pthread/pkgconfig/$f" ] && ln -sfn "../openblas-pthread/pkgconfig/$f" "$lib/pkgconfig/$f"
done
# CMake package files that name libraries by absolute host paths (gloo's):
# the sysroot's copies instead.
grep -rl '"/usr/lib/' "$sysroot/usr/share/cmake" "$lib/cmake" 2>/dev/null | while read -r f; do
  sed -i "s|\"/usr/lib/|\"$sysroot/usr/lib/|g" "$f"
done
rm -rf "$debs"
touch "$sysroot/.complete"
echo "arm64-sysroot: $count Debian packages unpacked into $sysroot"
