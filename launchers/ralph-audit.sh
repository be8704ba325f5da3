#!/bin/sh
# Starts a Ralph loop on this project's .claude/ralph/PROMPT.md: finds
# ralph-ctl and runs `ralph-ctl run`, which does the work (see --help).
# Installed by `ralph-ctl init`, which writes where ralph-ctl is below.
# Usage: .claude/ralph/ralph-audit.sh [--headless] [--reset or --resume] [-- CLIENT_ARGS...]

installed=@RALPH_CTL@

script_dir=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd) || exit 1
project=$(CDPATH= cd -- "$script_dir/../.." && pwd) || exit 1

if [ -n "$installed" ] && [ -x "$installed" ]; then
  ctl=$installed
elif [ -n "${RALPH_CTL:-}" ]; then
  ctl=$RALPH_CTL
elif ctl=$(command -v ralph-ctl); then
  :
else
  echo "ralph-audit.sh: cannot find ralph-ctl (not at the path 'ralph-ctl init' wrote, RALPH_CTL is unset, none on PATH); run 'ralph-ctl init' again or set RALPH_CTL" >&2
  exit 1
fi

cd "$project" || exit 1
exec "$ctl" --project "$project" run "$@"
