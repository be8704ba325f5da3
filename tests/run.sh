#!/usr/bin/env bash
# Runs every test of ralph: unit tests, integration tests of the built
# binaries, and end-to-end tests with the real Claude Code client (installed
# by tests/install-clients.sh into .cache/ when missing).
# Arguments, if any, replace the default selection given to `cargo test`
# (e.g. `tests/run.sh -p ralph-tests --test e2e guard`).
set -euo pipefail
cd "$(dirname "$0")/.."

tests/install-clients.sh
cargo build --locked --workspace --bins
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
if [ $# -eq 0 ]; then
  set -- --workspace --all-targets
fi
cargo test --locked "$@" 2>&1 | tee "$log" || status=$?
# One closing line for the whole run: the sum of every test binary's result.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
