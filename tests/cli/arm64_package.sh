#!/usr/bin/env bash
# The arm64 Debian package (make package-arm64): built from this build
# tree, it says arm64, depends on the same Debian packages as the x86
# build's package (dpkg-shlibdeps there, the sysroot's shlibs records here),
# and its own kiln runs from an unpacked root under qemu.
# Usage: arm64_package.sh "qemu-aarch64 -L SYSROOT" BUILD_DIR path/to/x86/build
set -euo pipefail
read -r -a EMULATOR <<<"$1"
build=$2 x86_build=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --build "$build" --target package >"$work/package.log" 2>&1 || { cat "$work/package.log"; exit 1; }
deb=$(ls -t "$build"/kiln_*_arm64.deb | head -1)
arch=$(dpkg-deb -f "$deb" Architecture)
[ "$arch" = arm64 ] || { echo "FAIL: $deb says Architecture: $arch"; exit 1; }
depends=$(dpkg-deb -f "$deb" Depends)
echo "$(basename "$deb"): Depends: $depends"
names() { tr ',' '\n' | sed 's/^ *//; s/ .*//; s/|.*//' | sort -u; }
host_deb=$(ls -t "$x86_build"/kiln_*_amd64.deb 2>/dev/null | head -1 || true)
if [ -n "$host_deb" ]; then
  if ! diff <(dpkg-deb -f "$host_deb" Depends | names) <(echo "$depends" | names); then
    echo "FAIL: the arm64 package depends on other packages than $(basename "$host_deb") (< x86, > arm64)"
    exit 1
  fi
else
  echo "no x86 package in $x86_build to compare the Depends with (make package there)"
fi
dpkg-deb -x "$deb" "$work/root"
readelf -h "$work/root/usr/bin/kiln" | grep -q "Machine: *AArch64" || { echo "FAIL: the package's kiln is not an arm64 program"; exit 1; }
libdir=$(dirname "$(find "$work/root" -name 'libkiln.so.*' | head -1)")
"${EMULATOR[@]}" -E LD_LIBRARY_PATH="$libdir" "$work/root/usr/bin/kiln" info >"$work/info.txt"
grep -q "^architecture: aarch64" "$work/info.txt" || { echo "FAIL: kiln info of the package:"; cat "$work/info.txt"; exit 1; }
echo "the arm64 package's kiln runs: $(grep '^architecture' "$work/info.txt")"
