#!/usr/bin/env bash
# The C and C++ files changed since the style was written down (the commit
# that added .clang-format) must be formatted by it, whole files: clang-format
# in dry-run mode names each line it would change. Files nobody has touched
# since keep their layout until someone does (formatting the tree at once
# would bury its history). Untracked and uncommitted changes count too.
# Usage: tools/check_format.sh [CLANG_FORMAT]
set -euo pipefail
cd "$(dirname "$0")/.."
clang_format=${1:-clang-format}
command -v "$clang_format" > /dev/null || { echo "check_format.sh: $clang_format not found (Debian package clang-format)"; exit 1; }
[ -f .clang-format ] || { echo "format: no .clang-format, nothing to check"; exit 0; }
base=$(git log --diff-filter=A --format=%H -- .clang-format | tail -1)
if [ -z "$base" ]; then
  base=HEAD  # .clang-format not yet committed: the uncommitted changes
elif ! git cat-file -e "$base^" 2> /dev/null; then
  # A shallow clone without the style's commit, or the style added by the root commit.
  echo "check_format.sh: the commit that added .clang-format has no parent here; checking the files changed by HEAD"
  base=HEAD~1
  git cat-file -e "$base" 2> /dev/null || base=$(git hash-object -t tree /dev/null)
else
  base="$base^"
fi
# tests/stable/v1.0 is a frozen copy of the 1.0 headers: never edited.
mapfile -t files < <({ git diff --name-only --diff-filter=d "$base" -- '*.c' '*.h' '*.cpp';
                       git ls-files --others --exclude-standard -- '*.c' '*.h' '*.cpp'; } |
                     grep -v '^tests/stable/v1.0/' | sort -u)
if [ ${#files[@]} -eq 0 ]; then
  echo "format: no C or C++ file changed since .clang-format"
  exit 0
fi
"$clang_format" --dry-run --Werror "${files[@]}"
echo "format: the ${#files[@]} C and C++ files changed since .clang-format follow it"
