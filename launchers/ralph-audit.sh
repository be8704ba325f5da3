#!/usr/bin/env bash
# Starts a Ralph loop on this project's .claude/ralph/PROMPT.md.
# Installed by `ralph-ctl init`; see `ralph-audit.sh --help`.
set -u

usage() {
  cat <<'USAGE'
Usage: .claude/ralph/ralph-audit.sh [--headless] [--reset] [-- CLIENT_ARGS...]

Starts Claude Code on .claude/ralph/PROMPT.md and keeps it working, through the
ralph Stop hook, until the work is done, the iteration cap is reached or the
circuit breaker opens.

  --headless   run `claude -p --output-format json` (no terminal UI)
  --reset      clear the previous loop's state first
  --           everything after it goes to the Claude Code client

Environment: RALPH_CLAUDE (client command, default `claude`; may carry
arguments, e.g. "node /path/to/cli.js"), RALPH_CTL (ralph-ctl),
RALPH_MAX_ITERATIONS, RALPH_COMPLETION_SIGNAL, RALPH_CIRCUIT_BREAKER_THRESHOLD,
RALPH_PROMPT_FILE.

Exit codes: 0 complete, 1 error, 2 usage, 3 a loop is already running,
10 max iterations, 11 circuit open, 12 interrupted, 13 state gone,
127 client not found.
USAGE
}

headless=0
reset=0
while [ $# -gt 0 ]; do
  case "$1" in
    --headless) headless=1 ;;
    --reset) reset=1 ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "ralph-audit.sh: unknown option '$1' (client arguments go after --; see --help)" >&2; exit 2 ;;
  esac
  shift
done

script_dir=$(cd "$(dirname "$0")" && pwd) || exit 1
project=$(cd "$script_dir/../.." && pwd) || exit 1
cd "$project" || exit 1

ctl=${RALPH_CTL:-@RALPH_CTL@}
if [ ! -x "$ctl" ]; then
  ctl=$(command -v ralph-ctl) || {
    echo "ralph-audit.sh: cannot find ralph-ctl (looked for $ctl and on PATH); set RALPH_CTL or run 'ralph-ctl init' again" >&2
    exit 1
  }
fi
client=${RALPH_CLAUDE:-claude}
client_cmd=("$client")
if ! command -v "$client" >/dev/null 2>&1; then
  # RALPH_CLAUDE may also be a command with arguments, e.g. "node /opt/claude-code/cli.js".
  read -r -a client_cmd <<< "$client"
  if [ ${#client_cmd[@]} -eq 0 ] || ! command -v "${client_cmd[0]}" >/dev/null 2>&1; then
    echo "ralph-audit.sh: cannot find the Claude Code client '$client'; install it (npm install -g @anthropic-ai/claude-code) or set RALPH_CLAUDE" >&2
    exit 127
  fi
fi

if [ "$reset" = 1 ]; then
  "$ctl" --project "$project" reset >/dev/null || exit
fi
started=$("$ctl" --project "$project" start) || exit
session_id=${started%% *}
max=${started##* }
prompt=$("$ctl" --project "$project" prompt) || exit

export RALPH_ACTIVE=1
# Claude Code ends a turn after 8 consecutive blocks unless this is raised;
# 0 disables the cap, so a value of 0 or one already above the loop's needs is kept.
cap=$((max + 5))
if [ -z "${CLAUDE_CODE_STOP_HOOK_BLOCK_CAP:-}" ] || { [ "$CLAUDE_CODE_STOP_HOOK_BLOCK_CAP" != 0 ] && [ "$CLAUDE_CODE_STOP_HOOK_BLOCK_CAP" -lt "$cap" ] 2>/dev/null; }; then
  export CLAUDE_CODE_STOP_HOOK_BLOCK_CAP=$cap
fi

# A Ctrl-C reaches the client; the launcher waits for it, then records the end.
trap 'true' INT
if [ "$headless" = 1 ]; then
  "${client_cmd[@]}" -p "$prompt" --output-format json --session-id "$session_id" "$@"
else
  "${client_cmd[@]}" "$prompt" --session-id "$session_id" "$@"
fi
client_exit=$?
trap - INT

"$ctl" --project "$project" finish --session-id "$session_id" --client-exit "$client_exit"
