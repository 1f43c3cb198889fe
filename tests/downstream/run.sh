#!/usr/bin/env bash
# Installs the build in BUILD_DIR into a fresh prefix, then builds and runs
# tests/downstream against it twice: with find_package(kiln) (and an
# extension built against the installed stable headers) and with pkg-config;
# builds each example extension of extensions/ against it and runs its test;
# runs the installed CLI, and the CLI of the Debian package (make package).
# Usage: run.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$src/tests/downstream" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DKILN_TEST_EXTENSION_SOURCE="$src/tests/stable/test_extension.cpp" \
  -DKILN_FROZEN_STABLE_HEADERS="$src/tests/stable/v1.0" > "$work/configure.log"
cmake --build "$work/build" > "$work/build.log"
"$work/build/downstream"
# The example extensions, each its own project against the installed package.
for ext in "$src"/extensions/*/; do
  name=$(basename "$ext")
  cmake -S "$ext" -B "$work/ext-$name" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/ext-$name.log"
  cmake --build "$work/ext-$name" >> "$work/ext-$name.log"
  "$work/ext-$name/${name}_test"
done
libdir=$(dirname "$(find "$work/prefix" -name libkiln.so | head -1)")
PKG_CONFIG_PATH="$libdir/pkgconfig" c++ "$src/tests/downstream/main.cpp" -o "$work/downstream-pc" \
  $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs kiln) -Wl,-rpath,"$libdir"
"$work/downstream-pc"
"$work/prefix/bin/kiln" info > /dev/null
# The Debian package, installed by dpkg into an empty root (unpacked: its
# ldconfig trigger cannot run in a root without a system, and the libraries
# it depends on are the host's): its CLI runs from there.
cmake --build "$build" --target package > "$work/package.log"
mkdir -p "$work/root/var/lib/dpkg/info" "$work/root/var/lib/dpkg/updates"
touch "$work/root/var/lib/dpkg/status"
dpkg --root="$work/root" --force-depends --unpack "$(ls -t "$build"/kiln_*.deb | head -1)" > "$work/dpkg.log" 2>&1
grep -q "^Package: kiln" "$work/root/var/lib/dpkg/status"
"$work/root/usr/bin/kiln" info > /dev/null
# Included with add_subdirectory by a parent project: it configures (tests
# and benchmarks off, outputs in the parent's layout). Building it there
# would compile kiln a second time, so only the configuration is checked.
mkdir -p "$work/parent"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(parent LANGUAGES CXX)\nadd_subdirectory(%s kiln)\nadd_executable(app main.cpp)\ntarget_link_libraries(app PRIVATE kiln::kiln)\n' \
  "$src" > "$work/parent/CMakeLists.txt"
cp "$src/tests/downstream/main.cpp" "$work/parent/"
cmake -S "$work/parent" -B "$work/parent/build" -G Ninja > "$work/parent.log"
grep -q "build app" "$work/parent/build/build.ninja" || { echo "add_subdirectory: no app target"; exit 1; }
if grep -q "kiln-tests" "$work/parent/build/build.ninja"; then echo "add_subdirectory: kiln's tests are built"; exit 1; fi
echo "downstream: find_package, pkg-config, the installed CLI, the .deb's CLI and add_subdirectory work"
