#!/usr/bin/env bash
# Installs mocha, the test runner of the end-to-end test of an npm project
# whose runner lives in its git-ignored node_modules (tests/tests/e2e/
# worktree_env.rs), into .cache/mocha/<version>/ (ignored by git), and
# reuses it when present. Prints the node_modules folder on stdout.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=10.8.2
dir="$root/.cache/mocha/$version"
package="$dir/node_modules/mocha/package.json"

if ! [ -f "$package" ] || ! grep -q "\"version\": \"$version\"" "$package"; then
  command -v npm >/dev/null || { echo "install-mocha: npm is needed to install mocha $version" >&2; exit 1; }
  echo "install-mocha: installing mocha $version into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  echo '{"name":"ralph-test-runner","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "mocha@$version" >&2)
  grep -q "\"version\": \"$version\"" "$package" ||
    { echo "install-mocha: mocha $version did not install" >&2; exit 1; }
fi
echo "$dir/node_modules"
