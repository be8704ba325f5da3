#!/usr/bin/env bash
# Installs what the client's sandbox needs on Linux (bubblewrap and socat,
# Debian's packages) for the end-to-end tests of unattended runs, and
# reuses what is there.
set -euo pipefail
source "$(dirname "$0")/install-lib.sh"

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v socat >/dev/null || missing+=(socat)
if [ ${#missing[@]} = 0 ]; then
  say "bubblewrap and socat ready"
  exit 0
fi
can_apt || fail "${missing[*]} missing; install them (apt-get install ${missing[*]})"
say "installing ${missing[*]}"
apt_install --update "${missing[@]}"
