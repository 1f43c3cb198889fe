#!/usr/bin/env bash
# The C and C++ lines changed since the style was written down (the commit
# that added .clang-format) must follow it: git clang-format formats just
# those lines, and any change it would make fails the check (its diff is
# printed). Lines nobody has touched since keep their layout until someone
# does (formatting the whole tree at once would bury its history).
# Uncommitted changes count too.
# Usage: tools/check_format.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v git-clang-format > /dev/null ||
  { echo "check_format.sh: git-clang-format not found (Debian package clang-format)"; exit 1; }
[ -f .clang-format ] || { echo "format: no .clang-format, nothing to check"; exit 0; }
base=$(git log --diff-filter=A --format=%H -- .clang-format | tail -1)
if [ -z "$base" ]; then
  base=HEAD  # .clang-format not yet committed: the uncommitted changes
elif git cat-file -e "$base^" 2> /dev/null; then
  base="$base^"
else
  # A shallow clone without the style's commit's parent: what HEAD changed.
  echo "check_format.sh: the commit that added .clang-format has no parent here; checking HEAD's changes"
  base=HEAD~1
  git cat-file -e "$base" 2> /dev/null || { echo "format: a single commit here, nothing to compare"; exit 0; }
fi
# tests/stable/v1.0 is a frozen copy of the 1.0 headers: never edited.
mapfile -t files < <(git diff --name-only --diff-filter=d "$base" -- '*.c' '*.h' '*.cpp' | grep -v '^tests/stable/v1.0/')
if [ ${#files[@]} -eq 0 ]; then
  echo "format: no C or C++ file changed since .clang-format"
  exit 0
fi
diff=$(git clang-format --diff --extensions c,h,cpp "$base" -- "${files[@]}" || true)
if grep -q '^diff\|^@@' <<< "$diff"; then
  echo "$diff"
  echo "format: lines changed since .clang-format do not follow it (above: what clang-format would make"
  echo "of them; with the changes staged, 'git clang-format $base' applies it)"
  exit 1
fi
echo "format: the lines changed since .clang-format in ${#files[@]} C and C++ files follow it"
