#!/usr/bin/env bash
# Installs the pinned Claude Code clients the end-to-end tests run against into
# .cache/claude-code/<version>/ (ignored by git), and reuses them when present.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
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
  command -v npm >/dev/null || { echo "install-clients: npm is needed to install Claude Code $version" >&2; exit 1; }
  echo "install-clients: installing Claude Code $version into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  echo '{"name":"ralph-test-client","private":true}' > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "@anthropic-ai/claude-code@$version" >&2)
  if ! "$exe" --version 2>/dev/null | grep -q "^$version "; then
    echo "install-clients: Claude Code $version did not install a working $exe" >&2
    exit 1
  fi
done
echo "install-clients: Claude Code ${versions[*]} ready" >&2
