#!/usr/bin/env bash
# Installs the headless browser the report test screenshots with (Debian's
# chromium), and reuses the one there. Prints its path on stdout.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

# ready PATH: says the browser's version and prints PATH.
ready() {
  say "$("$1" --version 2>/dev/null) ready"
  echo "$1"
}

for name in "${RALPH_TEST_BROWSER:-}" chromium chromium-browser google-chrome; do
  [ -n "$name" ] || continue
  if path=$(command -v "$name" 2>/dev/null) && "$path" --version >/dev/null 2>&1; then
    ready "$path"
    exit 0
  fi
done
can_apt || fail "no chromium; install it (apt-get install chromium) or set RALPH_TEST_BROWSER"
say "installing Debian's chromium"
apt_install --update chromium
ready "$(command -v chromium)"
