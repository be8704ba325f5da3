#!/usr/bin/env bash
# Runs every test of ralph: unit and property tests, integration tests of the
# built binaries (bad input, crash safety), end-to-end tests with the real
# Claude Code client (installed by tests/install-clients.sh into .cache/ when
# missing), then a short fuzzing smoke run and the quick benchmark.
#
#   tests/run.sh            everything (what CI runs)
#   tests/run.sh --fast     the cargo tests only
#   tests/run.sh ARGS...    the cargo tests, with ARGS instead of the default
#                           selection (e.g. `tests/run.sh -p ralph-tests --test e2e queue::`
#                           runs one area of the e2e tests, `--test cli` the fast ones)
#
# The end-to-end tests are behind the `e2e` feature of ralph-tests, so that a
# plain `cargo test --workspace` builds and runs everything else without the
# clients. This script turns the feature on whenever ralph-tests is among the
# packages tested (cargo refuses a feature of a package it does not build).
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

# Whether cargo test "$@" builds ralph-tests: no -p/--package selects every
# member (this workspace has no default-members), unless --exclude names it.
tests_ralph_tests() {
  local packages=0 selected=0 prev="" arg
  for arg in "$@"; do
    [ "$arg" = "--" ] && break
    case "$prev" in
      -p | --package)
        packages=1
        [ "$arg" = ralph-tests ] && selected=1
        ;;
      --exclude) [ "$arg" = ralph-tests ] && return 1 ;;
    esac
    case "$arg" in
      -p?* | --package=*)
        packages=1
        case "$arg" in -pralph-tests | --package=ralph-tests) selected=1 ;; esac
        ;;
      --exclude=ralph-tests) return 1 ;;
    esac
    prev=$arg
  done
  [ "$packages" = 0 ] || [ "$selected" = 1 ]
}

features=()
if tests_ralph_tests "$@"; then
  tests/install-clients.sh
  # Unattended runs put the client in its sandbox (bubblewrap and socat).
  tests/install-sandbox.sh
  # The report test screenshots the page in a real browser.
  RALPH_TEST_BROWSER=$(tests/install-browser.sh)
  export RALPH_TEST_BROWSER
  # The live page's tests drive that browser with puppeteer-core (npm).
  RALPH_PUPPETEER=$(tests/install-puppeteer.sh)
  export RALPH_PUPPETEER
  # The real projects ralph is run on, and what they need, fetched once.
  tests/corpus/fetch.sh
  features=(--features ralph-tests/e2e)
fi
cargo build --locked --workspace --bins
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked "${features[@]}" "$@" 2>&1 | tee "$log" || status=$?

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
