#!/usr/bin/env bash
# Installs Go (Debian's golang-go) for the end-to-end tests of checks that
# build Go (tests/tests/e2e/caches.rs), and reuses what is there. Prints
# the `go` program on stdout; exits 1, saying why on stderr, where it
# cannot be installed (not root, no apt-get): those tests then skip.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

if ! command -v go >/dev/null; then
  can_apt || fail "go is missing; install it (apt-get install golang-go)"
  say "installing golang-go"
  apt_install golang-go
fi
say "$(go version)"
command -v go
