#!/usr/bin/env bash
# Installs puppeteer-core, the driver the live-page tests (tests/tests/e2e/
# serve.rs) steer the installed chromium with, into .cache/puppeteer-core/
# <version>/ (ignored by git), and reuses it when present. Prints the
# folder holding its node_modules on stdout. It downloads no browser:
# puppeteer-core only drives the one tests/install-browser.sh gives.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
version=25.16.0
dir="$root/.cache/puppeteer-core/$version"
package="$dir/node_modules/puppeteer-core/package.json"

if ! [ -f "$package" ] || ! grep -q "\"version\": \"$version\"" "$package"; then
  command -v npm >/dev/null || { echo "install-puppeteer: npm is needed to install puppeteer-core $version" >&2; exit 1; }
  echo "install-puppeteer: installing puppeteer-core $version into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  echo '{"name":"ralph-test-browser-driver","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "puppeteer-core@$version" >&2)
  grep -q "\"version\": \"$version\"" "$package" ||
    { echo "install-puppeteer: puppeteer-core $version did not install" >&2; exit 1; }
fi
echo "install-puppeteer: puppeteer-core $version ready" >&2
echo "$dir"
