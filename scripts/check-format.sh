#!/usr/bin/env bash
# check-format.sh [--all | BASE] - checks the formatting of C code against .clang-format
# (clang-format 14 or later; Debian's clang-format package, in the test profile of
# scripts/ensure-deps.sh).  Exits 0 when clean, 1 with the diff clang-format wants, 2 when
# clang-format is missing.
#
# By default only the lines of .c and .h files changed since BASE are judged (git
# clang-format --diff: its own lines, not a file's older ones, so touching a file that was
# off-format before does not fail).  The working tree counts, committed or not.  BASE is,
# in order:
#   the argument, or $FORMAT_BASE;
#   the merge base of HEAD and origin/main (or main), when that branch exists and differs
#     from HEAD (a branch before it is merged);
#   HEAD~1 (a clean clone of main, as CI has: the last commit's changes);
#   nothing to compare with (a one-commit clone): every C file, as --all.
# --all checks every tracked C file whole and lists the files off-format.
# `make format-check` runs it; .ci/run runs it first.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

cf=
for c in clang-format-14 clang-format; do command -v "$c" >/dev/null && { cf=$c; break; }; done
if [ -z "$cf" ]; then
  echo "check-format.sh: clang-format is not installed (Debian: clang-format; scripts/ensure-deps.sh test)" >&2
  exit 2
fi
ver=$("$cf" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [ "${ver:-0}" -lt 14 ]; then
  echo "check-format.sh: $cf is version ${ver:-unknown}; .clang-format needs 14 or later" >&2
  exit 2
fi

check_all() {
  local bad=() f
  while IFS= read -r f; do
    "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done < <(git ls-files '*.c' '*.h')
  if [ ${#bad[@]} -gt 0 ]; then
    printf '  %s\n' "${bad[@]}"
    echo "check-format.sh: ${#bad[@]} of $(git ls-files '*.c' '*.h' | wc -l) C files are not formatted as .clang-format says (clang-format -i FILE)"
    return 1
  fi
  echo "check-format.sh: every C file is formatted ($cf)"
}

base=${1:-${FORMAT_BASE:-}}
[ "$base" = --all ] && { check_all; exit; }
if [ -z "$base" ]; then
  for b in origin/main main; do
    if git rev-parse -q --verify "$b" >/dev/null && [ "$(git rev-parse "$b")" != "$(git rev-parse HEAD)" ]; then
      base=$(git merge-base HEAD "$b") && break
    fi
  done
fi
if [ -z "$base" ]; then
  if git rev-parse -q --verify HEAD~1 >/dev/null; then
    base=HEAD~1
  else
    echo "check-format.sh: no commit to compare with: checking every C file"
    check_all
    exit
  fi
fi
git rev-parse -q --verify "$base^{commit}" >/dev/null || { echo "check-format.sh: unknown BASE '$base'" >&2; exit 2; }

gcf=git-${cf}
command -v "$gcf" >/dev/null || gcf=git-clang-format
out=$("$gcf" --binary "$cf" --extensions c,h --diff "$base" -- 2>&1)
rc=$?
# git-clang-format 14 exits 0 whether or not it has a diff to show: the diff is the verdict
if [ $rc -eq 0 ] && ! grep -q '^diff --git' <<<"$out"; then
  echo "check-format.sh: the C lines changed since $(git rev-parse --short "$base") are formatted ($cf)"
  exit 0
fi
echo "$out"
[ $rc -eq 0 ] || { echo "check-format.sh: $gcf failed ($rc)" >&2; exit 2; }
echo "check-format.sh: the lines above changed since $(git rev-parse --short "$base") are not formatted as .clang-format says;"
echo "  fix them with: git clang-format --binary $cf --extensions c,h $base"
exit 1
