#!/usr/bin/env bash
# Installs mocha, the test runner of the end-to-end test of an npm project
# whose runner lives in its git-ignored node_modules (tests/tests/e2e/
# worktree_env.rs), into .cache/mocha/<version>/ (ignored by git), and
# reuses it when present. Prints the node_modules folder on stdout.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

npm_cached mocha 10.8.2 ralph-test-runner
echo "$dir/node_modules"
