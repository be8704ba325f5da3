#!/bin/sh
# Installs ralph's two binaries, ralph-ctl and ralph-stop-hook, side by side
# (ralph-ctl finds the hook beside itself) into cargo's bin folder
# (~/.cargo/bin, or CARGO_INSTALL_ROOT), built from this clone. Arguments
# go to `cargo install` (e.g. --root DIR, --debug, --force).
set -eu
cd "$(dirname "$0")"
if ! command -v cargo >/dev/null 2>&1; then
  cargo_home="${CARGO_HOME:-${HOME:-~}/.cargo}"
  if [ -x "$cargo_home/bin/cargo" ]; then
    echo "install.sh: cargo is in $cargo_home/bin, which is not on PATH: run \`. \"$cargo_home/env\"\` (or open a new shell), then ./install.sh again" >&2
  else
    {
      echo "install.sh: cargo (Rust's build tool) is not on PATH, and ralph is built from source."
      echo "Install Rust 1.89 or later with rustup (https://rustup.rs):"
      echo "    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh"
      echo "then open a new shell (or run \`. \"\$HOME/.cargo/env\"\`) and run ./install.sh again."
      echo "A C linker is needed too (build-essential on Debian, Xcode's command line tools on macOS)."
      echo "The build takes about 3.5 minutes on 2 cores."
    } >&2
  fi
  exit 1
fi
echo "install.sh: building ralph-stop-hook and ralph-ctl in release mode (about 3.5 minutes on 2 cores)" >&2
cargo install --locked --path crates/ralph-stop-hook "$@"
cargo install --locked --path crates/ralph-ctl "$@"
echo "Installed ralph-ctl and ralph-stop-hook. Next, in your project: ralph-ctl run --task \"what to do\""
