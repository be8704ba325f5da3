#!/usr/bin/env bash
# Installs remark-cli, the markdown formatter of the command-line test of a
# project whose `npm test` runs `remark . --frail --output`
# (tests/tests/cli/formatters.rs), into .cache/remark-cli/<version>/
# (ignored by git), and reuses it when present. Prints the remark program
# on stdout.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

npm_cached remark-cli 12.0.1 ralph-test-markdown
echo "$dir/node_modules/.bin/remark"
