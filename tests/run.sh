#!/usr/bin/env bash
# Runs every test of ralph: unit and property tests, integration tests of the
# built binaries (bad input, crash safety), end-to-end tests with the real
# Claude Code client (installed by tests/install-clients.sh into .cache/ when
# missing), then a short fuzzing smoke run and the quick benchmark.
#
#   tests/run.sh            everything (what CI runs)
#   tests/run.sh --fast     the cargo tests only
#   tests/run.sh ARGS...    the cargo tests, with ARGS instead of the default
#                           selection (e.g. `tests/run.sh -p ralph-tests --test e2e guard`)
set -euo pipefail
cd "$(dirname "$0")/.."

extras=1
if [ "${1:-}" = "--fast" ]; then
  extras=0
  shift
fi
if [ $# -gt 0 ]; then
  extras=0
else
  set -- --workspace --all-targets
fi

tests/install-clients.sh
cargo build --locked --workspace --bins
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked "$@" 2>&1 | tee "$log" || status=$?

if [ "$extras" = 1 ] && [ "$status" = 0 ]; then
  echo "== fuzzing smoke run (fuzz/run.sh --smoke)" >&2
  fuzz/run.sh --smoke || status=$?
  echo "== quick benchmark (bench/run.sh --quick)" >&2
  bench/run.sh --quick || status=$?
fi

# One closing line for the whole run: the sum of every test binary's result.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
if [ "$status" != 0 ]; then
  echo "tests/run.sh: failed (exit $status)" >&2
fi
exit "$status"
