#!/usr/bin/env bash
# run-tests.sh BUILD_DIR - runs every test binary in BUILD_DIR/tests, each in its own
# process under a timeout (each case inside also forks with its own timeout), and ends
# with "N passed, N failed, N skipped".  A case that cannot run here prints "SKIP name: why"
# (tests/testhelp.h TSKIP): it counts as skipped, never as passed, and the skips are listed
# again with their reasons before the last line.  Exit status 1 if anything failed.
# FLEET_TEST_WRAPPER (e.g. "valgrind -q") prefixes each binary; FLEET_TEST_FILTER selects
# binaries by substring; FLEET_TESTS by whole name or shell pattern, several space-separated
# ("test_coll* test_net": the sanitizer targets' SAN_TESTS).  FLEET_TSAN_SUPP_TESTS (names
# or patterns) run with TSAN_OPTIONS plus suppressions=FLEET_TSAN_SUPP, every other binary
# with TSAN_OPTIONS as given: `make tsan` gives the Hogwild tests scripts/tsan-hogwild.supp.
set -u
build=${1:-build}
cd "$(dirname "$0")/.." || exit 2
pass=0; fail=0; skip=0; failed_bins=(); skipped=()
per_bin_timeout=${FLEET_TEST_BIN_TIMEOUT:-600}
read -r -a names <<< "${FLEET_TESTS:-*}"
for t in "$build"/tests/test_*; do
  [ -x "$t" ] || continue
  case "$(basename "$t")" in *"${FLEET_TEST_FILTER:-}"*) ;; *) continue ;; esac
  name=$(basename "$t")
  want=0
  for pat in "${names[@]}"; do
    # shellcheck disable=SC2254 # a pattern on purpose
    case "$name" in $pat) want=1; break ;; esac
  done
  [ "$want" -eq 1 ] || continue
  echo "== $name"
  tsan_opts=${TSAN_OPTIONS:-}
  read -r -a supp_names <<< "${FLEET_TSAN_SUPP_TESTS:-}"
  for pat in "${supp_names[@]}"; do
    # shellcheck disable=SC2254 # a pattern on purpose
    case "$name" in $pat) tsan_opts="${tsan_opts:+$tsan_opts:}suppressions=${FLEET_TSAN_SUPP:?}"; echo "  (TSan suppressions: $FLEET_TSAN_SUPP)"; break ;; esac
  done
  out=$(TSAN_OPTIONS=$tsan_opts timeout -k 5 "$per_bin_timeout" ${FLEET_TEST_WRAPPER:-} "$t" 2>&1)
  rc=$?
  printf '%s\n' "$out" | grep -v -E '^[0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$'
  p=$(printf '%s\n' "$out" | grep -c '^PASS ' || true)
  f=$(printf '%s\n' "$out" | grep -c '^FAIL ' || true)
  while IFS= read -r line; do skipped+=("$name ${line#SKIP }"); done < <(printf '%s\n' "$out" | grep '^SKIP ')
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name (binary exited with status $rc)"
    f=1
  fi
  pass=$((pass + p)); fail=$((fail + f)); skip=${#skipped[@]}
  [ "$f" -gt 0 ] && failed_bins+=("$name")
done
if [ "$skip" -gt 0 ]; then
  echo "skipped:"
  printf '  %s\n' "${skipped[@]}"
fi
[ ${#failed_bins[@]} -gt 0 ] && echo "failed binaries: ${failed_bins[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
