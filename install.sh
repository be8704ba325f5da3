#!/bin/sh
# Installs ralph's two binaries, ralph-ctl and ralph-stop-hook, side by side
# (ralph-ctl finds the hook beside itself) into cargo's bin folder
# (~/.cargo/bin, or CARGO_INSTALL_ROOT), built from this clone. Arguments
# go to `cargo install` (e.g. --root DIR, --debug, --force).
set -eu
cd "$(dirname "$0")"
if ! command -v cargo >/dev/null 2>&1; then
  echo "install.sh: cargo not found: install Rust (https://rustup.rs), then run this again" >&2
  exit 1
fi
cargo install --locked --path crates/ralph-stop-hook "$@"
cargo install --locked --path crates/ralph-ctl "$@"
echo "Installed ralph-ctl and ralph-stop-hook. Next, in your project: ralph-ctl run --task \"what to do\""
