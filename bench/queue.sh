#!/usr/bin/env bash
# Benchmarks a queue run's throughput: items per hour with 1 worker, with 2
# workers in one process, and with 3 machines of 2 workers each (clones of
# one bare repository on this machine, draining one backlog through it with
# --remote). Each item's client is a stand-in for `claude -p` that waits
# LATENCY seconds (the model's latency), commits one file and says the item
# is done; the project's check is `true`. Prints a Markdown table.
#
#   bench/queue.sh [--quick] [RALPH_CTL]
#
# --quick: 6 items and 1 s of latency (a smoke run: the figures are only
# indicative); else 12 items and 5 s. The goal: N workers drain at least
# 0.8 × N times one worker's rate.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

items=12
latency=5
if [ "${1:-}" = --quick ]; then
  items=6
  latency=1
  shift
fi
ctl=${1:-}
if [ -z "$ctl" ]; then
  cargo build --quiet --release --locked -p ralph-ctl -p ralph-stop-hook
  ctl=${CARGO_TARGET_DIR:-$root/target}/release/ralph-ctl
fi
ctl=$(cd "$(dirname "$ctl")" && pwd)/$(basename "$ctl")

say() { echo "bench: $*" >&2; }

while IFS='=' read -r name _; do
  case "$name" in RALPH_* | CLAUDE_PROJECT_DIR | CLAUDE_CODE_*) unset "$name" ;; esac
done < <(env)
export GIT_AUTHOR_NAME=bench GIT_AUTHOR_EMAIL=bench@localhost
export GIT_COMMITTER_NAME=bench GIT_COMMITTER_EMAIL=bench@localhost

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-queue-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export HOME=$work/home
mkdir -p "$HOME"

# The stand-in client: the item's title from its text, the model's
# latency, one commit, the result object `claude -p` prints.
client=$work/client.sh
cat >"$client" <<EOF
#!/bin/sh
[ "\$1" = --version ] && { echo '2.0.77 (Claude Code)'; exit 0; }
title=\$(sed -n 's/^## Your item: //p' | head -n 1)
sleep $latency
file=\$(printf '%s' "\$title" | tr -c 'A-Za-z0-9' '-').txt
echo "\$title" > "\$file" && git add "\$file" && git commit -q -m "\$title"
printf '{"type":"result","subtype":"success","is_error":false,"result":"%s is done.\\\\nRALPH_AUDIT_COMPLETE_NO_FINDINGS","total_cost_usd":0.01}\n' "\$title"
EOF
chmod +x "$client"
export RALPH_CLAUDE=$client

# A project with ralph set up and a plan of $items items, committed.
project() {
  local dir=$1 i
  git init -q -b main "$dir"
  mkdir -p "$dir/.claude/ralph"
  printf '{"verify": [{"name": "check", "command": "true"}]}\n' >"$dir/.claude/ralph/config.json"
  (cd "$dir" && "$ctl" init >/dev/null 2>"$dir.init") || { cat "$dir.init" >&2; return 1; }
  {
    echo "# Plan"
    echo
    for i in $(seq 1 "$items"); do echo "- [ ] task $i"; done
  } >"$dir/PLAN.md"
  git -C "$dir" add -A
  git -C "$dir" commit -q -m plan
}

# Seconds (with a fraction) `$@` takes.
timed() {
  local start end
  start=$(date +%s.%N)
  "$@"
  end=$(date +%s.%N)
  awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }'
}

drain() { # dir workers [remote]
  local dir=$1 workers=$2
  shift 2
  (cd "$dir" && "$ctl" run --queue plan:PLAN.md --workers "$workers" --no-sandbox "$@" >/dev/null 2>"$dir.err") ||
    { cat "$dir.err" >&2; return 1; }
}

landed() { git -C "$1" log --format=%s main | grep -c '^Tick task ' || true; }

say "1 worker, $items items, ${latency} s of latency each"
project "$work/one"
t1=$(timed drain "$work/one" 1)
[ "$(landed "$work/one")" -eq "$items" ] || { say "1 worker: not every item landed"; exit 1; }

say "2 workers in one process"
project "$work/two"
t2=$(timed drain "$work/two" 2)
[ "$(landed "$work/two")" -eq "$items" ] || { say "2 workers: not every item landed"; exit 1; }

say "3 machines of 2 workers, through one bare remote"
project "$work/m0"
git init -q --bare -b main "$work/remote.git"
git -C "$work/m0" remote add origin "$work/remote.git"
git -C "$work/m0" push -q origin main
for m in 1 2; do
  git clone -q "$work/remote.git" "$work/m$m"
  (cd "$work/m$m" && "$ctl" init >/dev/null 2>&1) || { say "init failed in a clone"; exit 1; }
done
three() {
  local pids=() m rc=0
  for m in 0 1 2; do
    drain "$work/m$m" 2 --remote origin &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  return $rc
}
t6=$(timed three)
[ "$(landed "$work/remote.git")" -eq "$items" ] || { say "3 machines: not every item landed once"; exit 1; }

rate() { awk -v n="$items" -v t="$1" 'BEGIN { printf "%.0f", n * 3600 / t }'; }
r1=$(rate "$t1")
verdict() { # workers seconds
  awk -v n="$1" -v t="$2" -v t1="$t1" 'BEGIN { s = t1 / t; printf "%.2f× (%s)", s, (s >= 0.8 * n ? "met" : "missed") }'
}
echo "### Queue throughput"
echo
echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; date: $(date -u +%Y-%m-%d), ralph $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "- $items items of a plan; each item one iteration whose client waits $latency s (the model's latency) and commits one file; check \`true\`; no sandbox"
echo
echo "| workers | time | items per hour | speed-up over 1 worker | goal |"
echo "|---|---:|---:|---:|---|"
echo "| 1 | $t1 s | $r1 | 1× | – |"
echo "| 2 in one process | $t2 s | $(rate "$t2") | $(verdict 2 "$t2") | ≥ 1.6× |"
echo "| 3 machines × 2 (one bare remote, \`--remote\`) | $t6 s | $(rate "$t6") | $(verdict 6 "$t6") | ≥ 4.8× |"
