# Sourced by tests/install-*.sh, never run: what they share to install a
# test's tool once (with Debian's apt-get, or npm into .cache/, which git
# ignores) and say so on stderr, each line starting with the script's name
# (`install-go: …`). Their stdout stays theirs: a path, or nothing.

# The calling script's name, as its lines start.
me=$(basename "$0" .sh)
# The repository.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# say WORDS...: one line on stderr, as the script.
say() { echo "$me: $*" >&2; }

# fail WORDS...: says why, and the script exits 1.
fail() {
  say "$@"
  exit 1
}

# can_apt: whether this user can install Debian's packages (root with apt-get).
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }

# apt_install [--update] PACKAGE...: installs them quietly, reading the
# package lists first with --update, else only when the install fails
# without.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if [ "$1" = --update ]; then
    shift
    apt-get update -qq >&2
    apt-get install -y -qq "$@" >&2
    return
  fi
  apt-get install -y -qq "$@" >&2 || { apt-get update -qq >&2 && apt-get install -y -qq "$@" >&2; }
}

# npm_install DIR PROJECT SPEC WHAT: DIR made afresh as an npm project
# named PROJECT with SPEC installed in it; WHAT names it in what is said.
npm_install() {
  local dir=$1 project=$2 spec=$3 what=$4
  command -v npm >/dev/null || fail "npm is needed to install $what"
  say "installing $what into $dir"
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "{\"name\":\"$project\",\"private\":true}" > "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --loglevel=error "$spec" >&2)
}

# has_version PACKAGE_JSON VERSION: whether that package.json is there and
# says VERSION.
has_version() { [ -f "$1" ] && grep -q "\"version\": \"$2\"" "$1"; }

# npm_cached PACKAGE VERSION PROJECT: PACKAGE at VERSION in
# .cache/PACKAGE/VERSION/ (the folder holding its node_modules, set as
# `dir`), installed unless it is there.
npm_cached() {
  local package=$1 version=$2 project=$3
  dir="$root/.cache/$package/$version"
  local installed="$dir/node_modules/$package/package.json"
  has_version "$installed" "$version" && return
  npm_install "$dir" "$project" "$package@$version" "$package $version"
  has_version "$installed" "$version" || fail "$package $version did not install"
}
