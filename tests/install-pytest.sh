#!/usr/bin/env bash
# Installs pytest (Debian's python3-pytest, for the system's python3) for
# the end-to-end tests of pytest checks (tests/tests/e2e/caches.rs), and
# reuses what is there. Prints the Python that has it on stdout; exits 1,
# saying why on stderr, where it cannot be installed (not root, no
# apt-get): those tests then skip.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

python=/usr/bin/python3
if ! "$python" -c 'import pytest' 2>/dev/null; then
  can_apt || fail "$python has no pytest; install it (apt-get install python3-pytest)"
  say "installing python3-pytest"
  apt_install python3-pytest
fi
say "$("$python" -m pytest --version 2>&1 | head -1)"
echo "$python"
