#!/usr/bin/env bash
# Installs what the client's sandbox needs on Linux (bubblewrap and socat,
# Debian's packages) for the end-to-end tests of unattended runs, and
# reuses what is there.
set -euo pipefail

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v socat >/dev/null || missing+=(socat)
if [ ${#missing[@]} = 0 ]; then
  echo "install-sandbox: bubblewrap and socat ready" >&2
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "install-sandbox: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq "${missing[@]}" >&2
  exit 0
fi
echo "install-sandbox: ${missing[*]} missing; install them (apt-get install ${missing[*]})" >&2
exit 1
