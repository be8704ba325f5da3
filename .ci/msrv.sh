#!/usr/bin/env bash
# Checks the minimum supported Rust version the workspace declares
# (`rust-version` under [workspace.package] in Cargo.toml) with the one
# toolchain this machine has:
#
#   1. every workspace member inherits it (`rust-version.workspace = true`),
#      so that cargo and clippy's `incompatible_msrv` lint know it;
#   2. no package in Cargo.lock (dependencies of every kind, every platform)
#      declares a `rust-version` above it.
#
# The third check is clippy's `incompatible_msrv` lint, which .ci/run runs as
# an error: no std API stabilised after the declared version is used. None of
# these sees language features or Cargo features newer than the MSRV.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "msrv: $*" >&2
  exit 1
}

if ! command -v jq >/dev/null; then
  command -v apt-get >/dev/null || die "jq is missing and there is no apt-get; install jq"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  echo "msrv: installing jq with apt-get" >&2
  "${sudo[@]}" apt-get install -y jq >/dev/null ||
    { "${sudo[@]}" apt-get update >/dev/null && "${sudo[@]}" apt-get install -y jq >/dev/null; } ||
    die "cannot install jq"
fi

declared=$(sed -n 's/^rust-version *= *"\([0-9.]*\)" *$/\1/p' Cargo.toml)
[ "$(printf '%s\n' "$declared" | grep -c .)" = 1 ] ||
  die "Cargo.toml must declare exactly one rust-version under [workspace.package], found: ${declared:-none}"

problems=$(cargo metadata --locked --format-version 1 | jq -r --arg msrv "$declared" '
  def version: split(".") | map(tonumber) | (. + [0, 0, 0])[:3];
  .workspace_members as $members
  | .packages[]
  | if (.id | IN($members[])) then
      select(.rust_version != $msrv)
      | "workspace member \(.name) declares rust-version \(.rust_version // "none"), not the workspace'"'"'s \($msrv): add `rust-version.workspace = true` to its Cargo.toml"
    else
      select(.rust_version != null and (.rust_version | version) > ($msrv | version))
      | "\(.name) \(.version) needs Rust \(.rust_version), above the declared \($msrv): raise rust-version in Cargo.toml or pin an older \(.name)"
    end')

if [ -n "$problems" ]; then
  printf 'msrv: %s\n' "$problems" >&2
  exit 1
fi
echo "msrv: rust-version $declared: every member declares it, no locked package needs a newer Rust" >&2
