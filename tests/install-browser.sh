#!/usr/bin/env bash
# Installs the headless browser the report test screenshots with (Debian's
# chromium), and reuses the one there. Prints its path on stdout.
set -euo pipefail

for name in "${RALPH_TEST_BROWSER:-}" chromium chromium-browser google-chrome; do
  [ -n "$name" ] || continue
  if path=$(command -v "$name" 2>/dev/null) && "$path" --version >/dev/null 2>&1; then
    echo "install-browser: $("$path" --version 2>/dev/null) ready" >&2
    echo "$path"
    exit 0
  fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "install-browser: installing Debian's chromium" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq chromium >&2
  path=$(command -v chromium)
  echo "install-browser: $("$path" --version 2>/dev/null) ready" >&2
  echo "$path"
  exit 0
fi
echo "install-browser: no chromium; install it (apt-get install chromium) or set RALPH_TEST_BROWSER" >&2
exit 1
