#!/usr/bin/env bash
# Installs prettier, the formatter of the command-line test of a project
# whose `npm test` runs `prettier --check .` (tests/tests/cli/formatters.rs:
# `init` keeps ralph's files out of it), into .cache/prettier/<version>/
# (ignored by git), and reuses it when present. Prints the prettier program
# on stdout.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

npm_cached prettier 3.3.3 ralph-test-formatter
echo "$dir/node_modules/.bin/prettier"
