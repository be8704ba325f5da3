#!/usr/bin/env bash
# Installs Go (Debian's golang-go) for the end-to-end tests of checks that
# build Go (tests/tests/e2e/caches.rs), and reuses what is there. Prints
# the `go` program on stdout; exits 1, saying why on stderr, where it
# cannot be installed (not root, no apt-get): those tests then skip.
set -euo pipefail

if ! command -v go >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install-go: installing golang-go" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq golang-go >&2 || { apt-get update -qq >&2 && apt-get install -y -qq golang-go >&2; }
  else
    echo "install-go: go is missing; install it (apt-get install golang-go)" >&2
    exit 1
  fi
fi
echo "install-go: $(go version)" >&2
command -v go
