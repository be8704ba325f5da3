#!/usr/bin/env bash
# Installs the pinned Claude Code clients the end-to-end tests run against into
# .cache/claude-code/<version>/ (ignored by git), and reuses them when present.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

versions=(2.1.330 2.0.77)

for version in "${versions[@]}"; do
  dir="$root/.cache/claude-code/$version"
  package="$dir/node_modules/@anthropic-ai/claude-code"
  case "$version" in
    2.0.*) exe="$package/cli.js" ;;
    *) exe="$package/bin/claude.exe" ;;
  esac
  if [ -x "$exe" ] && "$exe" --version 2>/dev/null | grep -q "^$version "; then
    continue
  fi
  npm_install "$dir" ralph-test-client "@anthropic-ai/claude-code@$version" "Claude Code $version"
  "$exe" --version 2>/dev/null | grep -q "^$version " ||
    fail "Claude Code $version did not install a working $exe"
done
say "Claude Code ${versions[*]} ready"
