#!/usr/bin/env bash
# Runs the tests of ralph in three tiers (docs/testing.md):
#
#   tests/run.sh --fast     unit and property tests, the built binaries on the
#                           command line (cli) and their hardening: no client,
#                           nothing installed
#   tests/run.sh            what CI runs: the --fast tier and the end-to-end
#                           tests (every scenario on Claude Code 2.1.330; on
#                           2.0.77 the scenarios listed by
#                           #[on_both_clients(differs = "why")] or
#                           (area_sample))
#   tests/run.sh --all      the same, then every other scenario on 2.0.77 (the
#                           whole client matrix), a short fuzzing smoke run
#                           and the quick benchmark (each builds a toolchain
#                           and binaries of its own: ASan, release with LTO)
#   tests/run.sh --lint ... the same, with `cargo clippy -D warnings` on every
#                           target first, while the installs run (.ci/run)
#   tests/run.sh ARGS...    the cargo tests, with ARGS instead of the default
#                           selection (e.g. `tests/run.sh -p ralph-tests --test e2e queue::`
#                           runs one area of the e2e tests, `--test cli` the fast ones)
#
# The end-to-end tests are behind the `e2e` feature of ralph-tests, so that a
# plain `cargo test --workspace` builds and runs everything else without the
# clients. With ARGS, this script turns the feature on (and installs what the
# end-to-end tests need) whenever ralph-tests is among the packages tested
# (cargo refuses a feature of a package it does not build).
set -euo pipefail
cd "$(dirname "$0")/.."

tier=ci
# --lint (what .ci/run passes): clippy runs on every target while the
# installs wait on the network, before the build.
lint=0
if [ "${1:-}" = --lint ]; then
  lint=1
  shift
fi
case "${1:-}" in
  --fast)
    tier=fast
    shift
    ;;
  --all)
    tier=all
    shift
    ;;
esac
if [ $# -gt 0 ]; then
  tier=args
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

work=$(mktemp -d)
installs=()
# On any exit: no install left running, no temp file left.
cleanup() {
  local lane
  for lane in "${installs[@]}"; do
    kill "${lane%%:*}" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# What the end-to-end tests need, installed while cargo builds (the installs
# wait on the network and the disk, the build on the processors): apt-get's
# one at a time (dpkg has one lock), npm's beside them. Each lane's output
# is shown once it ends.
start_installs() {
  (
    tests/install-sandbox.sh
    tests/install-browser.sh >"$work/browser"
    tests/corpus/fetch.sh
    # The tools the tests call their install scripts for (caches.rs,
    # worktree_env.rs): there they find them ready, not waiting in a test.
    # Where one cannot be installed (not root), its tests say so and skip.
    tests/install-pytest.sh >/dev/null || true
    tests/install-go.sh >/dev/null || true
  ) >"$work/apt.log" 2>&1 &
  installs+=("$!:$work/apt.log")
  (
    tests/install-clients.sh
    tests/install-puppeteer.sh >"$work/puppeteer"
    tests/install-mocha.sh >/dev/null
    tests/install-prettier.sh >/dev/null
    tests/install-remark.sh >/dev/null
  ) >"$work/npm.log" 2>&1 &
  installs+=("$!:$work/npm.log")
}
finish_installs() {
  local lane failed=0
  for lane in "${installs[@]}"; do
    wait "${lane%%:*}" || failed=1
    cat "${lane#*:}" >&2
  done
  installs=()
  if [ "$failed" = 1 ]; then
    echo "tests/run.sh: an install failed (its output is above)" >&2
    exit 1
  fi
  # The report test screenshots the page in a real browser; the live page's
  # tests drive it with puppeteer-core (npm).
  RALPH_TEST_BROWSER=$(cat "$work/browser")
  RALPH_PUPPETEER=$(cat "$work/puppeteer")
  export RALPH_TEST_BROWSER RALPH_PUPPETEER
}

features=()
if [ "$tier" != fast ] && tests_ralph_tests "$@"; then
  start_installs
  features=(--features ralph-tests/e2e)
fi
if [ "$lint" = 1 ]; then
  # incompatible_msrv is named so that it stays an error whatever the lint
  # groups say: no std API stabilised after the workspace's rust-version.
  cargo clippy --locked --workspace --all-targets --features ralph-tests/e2e -- \
    -D warnings -D clippy::incompatible_msrv
fi
if [ "$tier" = args ]; then
  cargo build --locked --workspace --bins
else
  # The binaries built in the test run's own feature resolution: a plain
  # `cargo build --bins` leaves out the dev-dependencies, whose features
  # (serde's, syn's, ...) then differ from the tests', and `cargo test`
  # built every crate above them a second time. `--all-targets` also
  # builds what `cargo test` runs next; the proc-macro crate is left to
  # it, as a target here it would be built with other debug settings than
  # the tests take it with, and everything that uses it again.
  cargo build --locked "${features[@]}" --workspace --exclude ralph-test-macros --all-targets
fi
[ ${#installs[@]} = 0 ] || finish_installs

# The end-to-end tests wait on their clients (a process start, the mock,
# a check) more than they compute: with one test per core the cores stood
# idle about 40 % of the run. Half as many tests again as cores keeps
# them busy; RUST_TEST_THREADS, when set, decides.
if [ "$tier" = ci ] || [ "$tier" = all ]; then
  cores=$(nproc 2>/dev/null || echo 2)
  RUST_TEST_THREADS=${RUST_TEST_THREADS:-$(( cores * 3 / 2 > 2 ? cores * 3 / 2 : 2 ))}
  export RUST_TEST_THREADS
fi

log="$work/cargo-test.log"
status=0
cargo test --locked "${features[@]}" "$@" 2>&1 | tee "$log" || status=$?

if [ "$tier" = all ] && [ "$status" = 0 ]; then
  echo "== the rest of the client matrix: every other scenario on 2.0.77" >&2
  cargo test --locked "${features[@]}" -p ralph-tests --test e2e -- --ignored 2>&1 |
    tee -a "$log" || status=$?
fi

if [ "$tier" = all ] && [ "$status" = 0 ]; then
  echo "== fuzzing smoke run (fuzz/run.sh --smoke)" >&2
  fuzz/run.sh --smoke || status=$?
  echo "== quick benchmark (bench/run.sh --quick)" >&2
  bench/run.sh --quick || status=$?
fi

# One closing line for the whole run: the sum of every test binary's result.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) g += $i } }
     END { printf "tests: %d passed, %d failed, %d ignored\n", p, f, g }' "$log"
if [ "$status" != 0 ]; then
  echo "tests/run.sh: failed (exit $status)" >&2
fi
exit "$status"
