#!/usr/bin/env bash
# Installs pytest (Debian's python3-pytest, for the system's python3) for
# the end-to-end tests of pytest checks (tests/tests/e2e/caches.rs), and
# reuses what is there. Prints the Python that has it on stdout; exits 1,
# saying why on stderr, where it cannot be installed (not root, no
# apt-get): those tests then skip.
set -euo pipefail

python=/usr/bin/python3
if ! "$python" -c 'import pytest' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "install-pytest: installing python3-pytest" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq python3-pytest >&2 || { apt-get update -qq >&2 && apt-get install -y -qq python3-pytest >&2; }
  else
    echo "install-pytest: $python has no pytest; install it (apt-get install python3-pytest)" >&2
    exit 1
  fi
fi
echo "install-pytest: $("$python" -m pytest --version 2>&1 | head -1)" >&2
echo "$python"
