#!/usr/bin/env bash
# Fetches the corpus of real projects that tests/tests/e2e/real_projects.rs
# runs ralph on, with what each needs to run its own tests, into
# .cache/corpus/ (ignored by git), once: a second run with the same manifest
# does nothing. Everything comes from the package registries through their
# own clients, pinned by version and checksum (the files beside this one):
#
#   attrs 25.3.0          PyPI sdist (src layout), installed editable into a .venv
#   toolz 1.2.0           PyPI sdist, pytest only in a .venv
#   bytes 3.1.2           Debian's source of node-bytes (the upstream tarball,
#                         with its tests), mocha 9.2.0 from npm (package-lock.json)
#   signal-hook-registry  crates.io 1.4.8 (its tests in the .crate), with its
#                         dependencies (its Cargo.lock) in a cargo registry cache
#   go-difflib 1.0.0      Debian's golang-github-pmezard-go-difflib-dev, with
#                         its _test.go; Go from Debian's golang-go
#
# The tests then run offline: they copy a project out of the cache, and its
# dependencies from it, and send traffic only to 127.0.0.1.
#
# RALPH_CORPUS_CACHE names another cache folder.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${RALPH_CORPUS_CACHE:-$root/.cache/corpus}
manifest=$(cat "$here"/fetch.sh "$here"/python-*.txt "$here"/SHA256SUMS "$here"/bytes/* | sha256sum | cut -c1-16)
if [ -e "$cache/ready-$manifest" ]; then
  echo "corpus: ready in $cache" >&2
  exit 0
fi
say() { echo "corpus: $*" >&2; }

# The toolchains: Go and the venv module of Debian's python3 (the Python the
# projects' .venv folders are made with, one every user reaches).
missing=()
command -v go >/dev/null || missing+=(golang-go)
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq "${missing[@]}" >&2
  else
    say "${missing[*]} missing; install them (apt-get install ${missing[*]})"
    exit 1
  fi
fi
command -v cargo >/dev/null || { say "cargo is needed"; exit 1; }

rm -rf "$cache"
mkdir -p "$cache"/{downloads,wheels,sdists,src}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

verify() { (cd "$cache/downloads" && grep " $1\$" "$here/SHA256SUMS" | sha256sum -c --quiet -) ||
  { say "$1 does not match its checksum in tests/corpus/SHA256SUMS"; exit 1; }; }

say "Python: sdists and wheels from PyPI"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
  --no-binary :all: -d "$cache/sdists" -r "$here/python-sources.txt"
python3 -m pip download --quiet --disable-pip-version-check --no-deps --require-hashes \
  --only-binary :all: --python-version 3.11 --implementation cp --platform manylinux2014_x86_64 \
  -d "$cache/wheels" -r "$here/python-wheels.txt"
tar --no-same-owner -xzf "$cache/sdists/attrs-25.3.0.tar.gz" -C "$work"
mv "$work/attrs-25.3.0" "$cache/src/attrs"
tar --no-same-owner -xzf "$cache/sdists/toolz-1.2.0.tar.gz" -C "$work"
mv "$work/toolz-1.2.0" "$cache/src/toolz"

say "Debian: node-bytes' source, go-difflib's package"
# A private apt state with Debian's source index: the machine's own lists
# and configuration are left as they are.
mkdir -p "$cache/apt/lists/partial" "$cache/apt/sources"
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
cat > "$cache/apt/sources/debian-src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
apt_src=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$cache/apt/sources"
  -o "Dir::State::Lists=$cache/apt/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${apt_src[@]}" update -qq >&2
(cd "$cache/downloads" &&
  apt-get "${apt_src[@]}" source --download-only --tar-only -qq node-bytes=3.1.2-1 >&2 &&
  apt-get -o APT::Sandbox::User=root download -qq golang-github-pmezard-go-difflib-dev=1.0.0-3 >&2)
rm -rf "$cache/apt"
verify node-bytes_3.1.2.orig.tar.gz
verify golang-github-pmezard-go-difflib-dev_1.0.0-3_all.deb
tar --no-same-owner -xzf "$cache/downloads/node-bytes_3.1.2.orig.tar.gz" -C "$work"
mv "$work/bytes.js-3.1.2" "$cache/src/bytes"
dpkg-deb -x "$cache/downloads/golang-github-pmezard-go-difflib-dev_1.0.0-3_all.deb" "$work/difflib"
mv "$work/difflib/usr/share/gocode/src/github.com/pmezard/go-difflib" "$cache/src/go-difflib"
# The package predates Go modules: the module file a user adds.
printf 'module github.com/pmezard/go-difflib\n\ngo 1.19\n' > "$cache/src/go-difflib/go.mod"

say "npm: mocha for bytes (its package-lock.json)"
# bytes' devDependencies are cut to its test runner (eslint and nyc are
# not needed to run its tests); the lock file pins mocha's tree with
# integrity hashes, and npm ci checks them.
cp "$here/bytes/package.json" "$here/bytes/package-lock.json" "$cache/src/bytes/"
(cd "$cache/src/bytes" && npm ci --no-audit --no-fund --loglevel=error --cache "$cache/npm" >&2)

say "crates.io: signal-hook-registry and its dependencies"
mkdir -p "$work/crate/src"
printf '[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nsignal-hook-registry = "=1.4.8"\n' \
  > "$work/crate/Cargo.toml"
touch "$work/crate/src/lib.rs"
(cd "$work/crate" && CARGO_HOME="$cache/cargo" cargo fetch --quiet)
cp "$cache"/cargo/registry/cache/*/signal-hook-registry-1.4.8.crate "$cache/downloads/"
verify signal-hook-registry-1.4.8.crate
tar --no-same-owner -xzf "$cache/downloads/signal-hook-registry-1.4.8.crate" -C "$work"
# Its own Cargo.lock (shipped in the .crate) pins what its tests build with;
# fetched outside this repository, whose workspace cargo would take it for.
(cd "$work/signal-hook-registry-1.4.8" && CARGO_HOME="$cache/cargo" cargo fetch --locked --quiet)
mv "$work/signal-hook-registry-1.4.8" "$cache/src/signal-hook-registry"
# The tests copy the registry's index and .crate files (not what cargo
# unpacked) into each HOME's ~/.cargo.
rm -rf "$cache/cargo/registry/src" "$cache/cargo/git"

# Readable by the unprivileged user the tests also run as.
chmod -R a+rX "$cache"
touch "$cache/ready-$manifest"
say "ready in $cache ($(du -sh "$cache" | cut -f1))"
