#!/usr/bin/env bash
# Runs every test of ralph: unit tests, integration tests of the built
# binaries, and end-to-end tests with the real Claude Code client (installed
# by tests/install-clients.sh into .cache/ when missing).
# Extra arguments go to `cargo test` (e.g. `tests/run.sh -p ralph-tests --test e2e guard`).
set -euo pipefail
cd "$(dirname "$0")/.."

tests/install-clients.sh
cargo build --locked --workspace --bins
cargo test --locked --workspace "$@"
