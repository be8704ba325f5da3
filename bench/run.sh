#!/usr/bin/env bash
# Benchmarks ralph-stop-hook as Claude Code runs it (one whole process per
# stop, measured with hyperfine) and the pure parts of a stop (criterion),
# and `ralph-ctl serve` (its idle CPU with 10 loops, the time to an update),
# and prints a Markdown table of the results with the machine they ran on.
#
#   bench/run.sh           every measurement, transcripts up to 1 GiB,
#                          projects up to 100,000 files; writes the tables
#                          into docs/benchmarks.md (its last full run)
#   bench/run.sh --quick   few runs, transcripts up to 10 MiB, projects up
#                          to 10,000 files, criterion benches run once
#                          each; prints the table only. Timing is never
#                          judged (CI machines are noisy): it fails only
#                          when a command fails or the hook does not answer
#                          as expected.
#
# The full run also builds the hook of BENCH_BEFORE (default 8395fee, the
# last revision with the fingerprint progress check) into target/ and
# measures it on the same projects, as the target of the full-check rows.
#
# Needs hyperfine with --input (1.16 or later) and GNU time: installs them
# with apt-get when missing; when the installed hyperfine is older, builds
# a pinned one into .cache/hyperfine with cargo.
set -euo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
root=$PWD

HYPERFINE_VERSION=1.20.0
SID=c0563e5b-5d19-4827-8166-f6f26bb447e0
BEFORE=${BENCH_BEFORE:-8395fee}

quick=0
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  -h | --help)
    sed -n '2,23p' "$self" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: bench/run.sh [--quick]" >&2
    exit 2
    ;;
esac

say() { echo "bench: $*" >&2; }
die() {
  echo "bench/run.sh: $*" >&2
  exit 1
}

# ------------------------------------------------------------------ tools

apt_install() {
  command -v apt-get >/dev/null || die "$1 is missing and there is no apt-get; install $1"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  say "installing $1 with apt-get"
  "${sudo[@]}" apt-get install -y "$1" >/dev/null ||
    { "${sudo[@]}" apt-get update >/dev/null && "${sudo[@]}" apt-get install -y "$1" >/dev/null; } ||
    die "cannot install $1"
}

command -v hyperfine >/dev/null || apt_install hyperfine
[ -x /usr/bin/time ] || apt_install time
hyperfine=hyperfine
if ! hyperfine --help | grep -q -- '--input'; then
  hyperfine=$root/.cache/hyperfine/bin/hyperfine
  if ! "$hyperfine" --version 2>/dev/null | grep -qx "hyperfine $HYPERFINE_VERSION"; then
    say "$(command hyperfine --version) has no --input; building hyperfine $HYPERFINE_VERSION into .cache/hyperfine"
    cargo install --quiet --locked hyperfine --version "$HYPERFINE_VERSION" --root "$root/.cache/hyperfine"
  fi
fi

# ------------------------------------------------------------------ build

say "building the release binaries"
cargo build --quiet --release --locked -p ralph-stop-hook -p ralph-ctl
target_dir=${CARGO_TARGET_DIR:-$root/target}
hook=$target_dir/release/ralph-stop-hook
ctl=$target_dir/release/ralph-ctl

# Nothing from the caller's environment may change what the hook does.
while IFS='=' read -r name _; do
  case "$name" in RALPH_* | CB_* | CLAUDE_PROJECT_DIR | CLAUDE_CODE_*) unset "$name" ;; esac
done < <(env)

work=$(mktemp -d "${TMPDIR:-/tmp}/ralph-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The task a loop runs on (a loop refuses the untouched template).
write_task() { printf '# Task\n\nKeep the benchmark project tidy.\n' >"$1/.claude/ralph/PROMPT.md"; }

# A project with a running loop owned by $SID. Every blocked stop advances
# the iteration, so the cap is the highest allowed.
project=$work/project
mkdir -p "$project"
"$ctl" init --project "$project" >/dev/null
write_task "$project"
"$ctl" --project "$project" start --session-id "$SID" --max-iterations 100000 >/dev/null
# The same in a git repository of 50 committed files: the circuit breaker's
# progress check then runs `git status`.
gitproject=$work/gitproject
mkdir -p "$gitproject"
git -C "$gitproject" init -q
for i in $(seq 1 50); do echo "$i" >"$gitproject/file$i.txt"; done
git -C "$gitproject" add -A
git -C "$gitproject" -c user.name=bench -c user.email=bench@example.invalid commit -qm start
"$ctl" init --project "$gitproject" >/dev/null
write_task "$gitproject"
"$ctl" --project "$gitproject" start --session-id "$SID" --max-iterations 100000 >/dev/null
sync

# The hook input: `stop_input FILE [last_assistant_message | -t TRANSCRIPT]`.
# With a message, the transcript is the one the client has written by then:
# the task and that message (the hook waits for it to show the stop's message).
stop_input() {
  local file=$1 extra
  if [ "$2" = -t ]; then
    extra="\"transcript_path\": \"$3\""
  else
    printf '%s\n' '{"type":"user","message":{"role":"user","content":"Do the task"}}' \
      "{\"type\":\"assistant\",\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"$2\"}]}}" \
      >"$file.transcript.jsonl"
    extra="\"transcript_path\": \"$file.transcript.jsonl\", \"last_assistant_message\": \"$2\""
  fi
  cat >"$file" <<EOF
{"session_id": "$SID", "cwd": "${input_project:-$project}", "hook_event_name": "Stop",
 "stop_hook_active": true, "permission_mode": "default", $extra}
EOF
}

# ------------------------------------------------------------ transcripts

# One JSONL line of each kind Claude Code writes, as it writes them.
assistant_tool_line() {
  printf '{"parentUuid":"p%d","isSidechain":false,"type":"assistant","message":{"id":"msg_%d","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":"Let me run the tests."},{"type":"tool_use","id":"toolu_%d","name":"Bash","input":{"command":"cargo test 2>&1 | tail -400"}}],"stop_reason":"tool_use"},"uuid":"a%d","timestamp":"2026-01-01T00:00:00.000Z","sessionId":"%s"}\n' \
    "$1" "$1" "$1" "$1" "$SID"
}
tool_result_line() { # $1: id, $2: the result text (already JSON-escaped)
  printf '{"parentUuid":"a%d","isSidechain":false,"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_%d","type":"tool_result","content":"%s","is_error":false}]},"uuid":"u%d","timestamp":"2026-01-01T00:00:01.000Z","sessionId":"%s"}\n' \
    "$1" "$1" "$2" "$1" "$SID"
}
# The user line that starts each iteration after the first: the hook's
# block, fed back by the client.
feedback_line() {
  printf '{"parentUuid":"e%d","isSidechain":false,"type":"user","message":{"role":"user","content":"Stop hook feedback:\\n[ralph-stop-hook]: ralph: iteration %d. Do the task in PROMPT.md.\\n"},"isMeta":true,"uuid":"f%d","timestamp":"2026-01-01T00:00:00.000Z","sessionId":"%s"}\n' \
    "$1" "$1" "$1" "$SID"
}
# The final message of a history iteration.
iteration_end_line() {
  printf '{"parentUuid":"u16","isSidechain":false,"type":"assistant","message":{"id":"msg_end%d","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":"Iteration %d: fixed two cases. Still working."}],"stop_reason":"end_turn"},"uuid":"e%d","timestamp":"2026-01-01T00:00:02.000Z","sessionId":"%s"}\n' \
    "$1" "$1" "$1" "$SID"
}
tail_lines() {
  printf '{"parentUuid":"u9","isSidechain":false,"type":"assistant","message":{"id":"msg_last","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":"Fixed the parser and its tests; two findings remain.\\nStill working."}],"stop_reason":"end_turn"},"uuid":"last","timestamp":"2026-01-01T00:00:02.000Z","sessionId":"%s"}\n' "$SID"
  printf '{"parentUuid":"last","isSidechain":false,"type":"system","subtype":"stop_hook_summary","hookCount":1,"hookInfos":[{"command":"ralph-stop-hook","durationMs":3}],"uuid":"s1","timestamp":"2026-01-01T00:00:02.100Z","sessionId":"%s"}\n' "$SID"
}

# A block of about 1 MiB: 16 tool calls, each with a 64 KiB test-run result.
make_block() {
  local result i
  result=$(for i in $(seq 1 1000); do printf 'test parser::cases::case_%04d ... \\u001b[32mok\\u001b[0m\\n' "$i"; done)
  for i in $(seq 1 16); do
    assistant_tool_line "$i"
    tool_result_line "$i" "$result"
  done >"$work/block.jsonl"
}

# `make_transcript FILE BYTES [BLOCKS]`: a session as the client writes it.
# The task, then history iterations of about 1 MiB each (a feedback line,
# a block, a final message) up to about BYTES, then the iteration that is
# stopping: one small tool call and its final message (or BLOCKS blocks,
# for the rows that measure the last iteration's own size), and the
# system line the client writes after it. The hook reads the last
# iteration (back to its own feedback line) and the previous one's final
# message, so with BLOCKS unset every size has the same work to do.
make_transcript() {
  local file=$1 bytes=$2 blocks=${3:-0} block_bytes n i
  block_bytes=$(stat -c %s "$work/block.jsonl")
  n=$((bytes / block_bytes))
  {
    printf '{"type":"user","isSidechain":false,"message":{"role":"user","content":"Do the task"},"uuid":"u0","sessionId":"%s"}\n' "$SID"
    for ((i = 1; i <= n; i++)); do
      cat "$work/block.jsonl"
      iteration_end_line "$i"
      feedback_line "$i"
    done
    if [ "$blocks" -eq 0 ]; then
      assistant_tool_line 9
      tool_result_line 9 'test result: ok. 12 passed; 0 failed'
    else
      for ((i = 0; i < blocks; i++)); do cat "$work/block.jsonl"; done
    fi
    tail_lines
  } >"$file"
}

# ------------------------------------------------------------ measurement

if [ "$quick" -eq 1 ]; then
  warmup=3 runs=30 sizes="2KiB:0 10MiB:10485760" iteration_sizes="1MiB:1"
  project_sizes="100 10000" project_warmup=2 project_runs=10
else
  warmup=20 runs=300 sizes="2KiB:0 10MiB:10485760 100MiB:104857600 1GiB:1073741824"
  iteration_sizes="1MiB:1 4MiB:4 16MiB:16"
  project_sizes="100 10000 100000" project_warmup=5 project_runs=100
fi

# `check NAME INPUT WANT`: one run must exit 0, print nothing on stderr, and
# make the session go on (WANT=block: a block, or for an input with
# last_assistant_message the 2.1 form, additionalContext) or print nothing
# at all (WANT=nothing).
check() {
  local name=$1 input=$2 want=$3 out err code=0
  if [ "$want" = block ]; then
    out=$(RALPH_ACTIVE=1 "${target_hook:-$hook}" <"$input" 2>"$work/err") || code=$?
  else
    out=$(env -u RALPH_ACTIVE "$hook" <"$input" 2>"$work/err") || code=$?
  fi
  err=$(cat "$work/err")
  if [ "$code" -ne 0 ] || [ -n "$err" ] ||
    { [ "$want" = block ] && [[ $out != '{"decision":"block"'* && $out != '{"hookSpecificOutput":{"additionalContext"'* ]]; } ||
    { [ "$want" = nothing ] && [ -n "$out" ]; }; then
    die "$name: the hook did not $want (exit $code); stdout: ${out:0:200}; stderr: $err"
  fi
}

# `measure NAME INPUT [ENV=VALUE]`: hyperfine on the hook; sets the median,
# mean and σ (ms) of NAME. With no INPUT, stdin is empty. `prepare` (a
# command run before each run, untimed), `target_hook` (another hook binary)
# and `runs`/`warmup` may be set for one call.
declare -A median mean sd rss
measure() {
  local name=$1 input=$2 csv="$work/$1.csv"
  shift 2
  # Claude Code reads the answer from a pipe; with stdout on /dev/null (what
  # hyperfine gives by default) the hook would refuse to answer instead.
  local args=(-N --style none --output=pipe --warmup "$warmup" --runs "$runs" --export-csv "$csv")
  [ -n "$input" ] && args+=(--input "$input")
  [ -n "${prepare:-}" ] && args+=(--prepare "$prepare")
  env "$@" "$hyperfine" "${args[@]}" -- "'${target_hook:-$hook}'" >/dev/null || die "$name: hyperfine failed"
  read_csv "$name" "$csv"
}
read_csv() { # NAME CSV: the first command's row, seconds to ms
  local line
  line=$(sed -n 2p "$2")
  median[$1]=$(awk -F, '{ printf "%.2f", $4 * 1000 }' <<<"$line")
  mean[$1]=$(awk -F, '{ printf "%.2f", $2 * 1000 }' <<<"$line")
  sd[$1]=$(awk -F, '{ printf "%.2f", $3 * 1000 }' <<<"$line")
}

# `combine NAME K`: NAME from the measurements NAME_1 … NAME_K of equal
# runs: the median of their medians, the mean of their means, and the σ of
# all runs together.
combine() {
  local name=$1 k=$2 i medians="" means="" sds=""
  for ((i = 1; i <= k; i++)); do
    medians+="${median[${name}_$i]} " means+="${mean[${name}_$i]} " sds+="${sd[${name}_$i]} "
  done
  median[$name]=$(tr ' ' '\n' <<<"$medians" | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }')
  read -r mean[$name] sd[$name] < <(awk -v m="$means" -v s="$sds" 'BEGIN {
    n = split(m, a, " "); split(s, b, " ")
    for (i = 1; i <= n; i++) mu += a[i] / n
    for (i = 1; i <= n; i++) v += (b[i] ^ 2 + (a[i] - mu) ^ 2) / n
    printf "%.2f %.2f\n", mu, sqrt(v)
  }')
}

# `peak_rss NAME INPUT [RALPH_ACTIVE=1]`: the largest max-RSS of 5 runs, in MiB.
peak_rss() {
  local name=$1 input=${2:-/dev/null} i kib max=0
  shift 2
  for i in 1 2 3 4 5; do
    if [ -n "${prepare:-}" ]; then eval "$prepare"; fi
    env -u RALPH_ACTIVE "$@" /usr/bin/time -f %M -o "$work/rss" "$hook" <"$input" 2>&1 | cat >/dev/null ||
      die "$name: the hook failed under /usr/bin/time"
    kib=$(tail -n 1 "$work/rss")
    [ "$kib" -gt "$max" ] && max=$kib
  done
  rss[$name]=$(awk -v k="$max" 'BEGIN { printf "%.1f", k / 1024 }')
}

# `with_true NAME TRUE_NAME COMMAND [ENV=VALUE …]`: COMMAND (with
# RALPH_ACTIVE unset) and `/bin/true`, 3 × $runs runs each, in 5 turns
# whose order alternates, so that a machine getting busier favours
# neither; sets NAME and TRUE_NAME as `combine` does.
with_true() {
  local name=$1 base=$2 command=$3 turn order
  shift 3
  for ((turn = 1; turn <= 5; turn++)); do
    order=(/bin/true "$command")
    ((turn % 2)) || order=("$command" /bin/true)
    env -u RALPH_ACTIVE "$@" "$hyperfine" -N --style none --output=pipe --warmup "$warmup" \
      --runs "$((runs * 3 / 5))" --export-csv "$work/$name.csv" -- "${order[@]}" >/dev/null ||
      die "$name: hyperfine failed"
    awk -F, -v c=/bin/true 'NR == 1 || $1 == c' "$work/$name.csv" >"$work/$base-only.csv"
    awk -F, -v c=/bin/true 'NR == 1 || (NR > 1 && $1 != c)' "$work/$name.csv" >"$work/$name-only.csv"
    read_csv "${base}_$turn" "$work/$base-only.csv"
    read_csv "${name}_$turn" "$work/$name-only.csv"
  done
  combine "$base" 5
  combine "$name" 5
}

say "process spawn baseline and the guard (RALPH_ACTIVE unset)"
check guard /dev/null nothing
with_true guard true "'$hook'"
peak_rss guard ""

say "the plugin's guard (ralph-stop-hook --plugin in a project with no loop)"
mkdir -p "$work/no-loop"
plugin_out=$(env -u RALPH_ACTIVE CLAUDE_PROJECT_DIR="$work/no-loop" "$hook" --plugin </dev/null 2>&1) ||
  die "plugin guard: the hook failed"
[ -z "$plugin_out" ] || die "plugin guard: the hook printed: $plugin_out"
with_true plugin_guard plugin_true "'$hook' --plugin" CLAUDE_PROJECT_DIR="$work/no-loop"

say "active loop, last_assistant_message in the input"
stop_input "$work/active.json" "Fixed the parser. Still working."
check active "$work/active.json" block
measure active "$work/active.json" RALPH_ACTIVE=1
peak_rss active "$work/active.json" RALPH_ACTIVE=1

say "active loop in a git repository, last_assistant_message in the input"
input_project=$gitproject stop_input "$work/active-git.json" "Fixed the parser. Still working."
check "active (git)" "$work/active-git.json" block
measure active_git "$work/active-git.json" RALPH_ACTIVE=1
peak_rss active_git "$work/active-git.json" RALPH_ACTIVE=1

make_block
declare -A transcript_bytes transcript_prepare
# `transcript_case KEY BYTES [BLOCKS]`: a project with a running loop of its
# own (whose usage cursor stays on its own transcript), the transcript
# `make_transcript … BYTES [BLOCKS]` of its session, and the hook input of
# its stop, $work/KEY.json; one stop is checked.
transcript_case() {
  local key=$1 file=$work/$1.jsonl p=$work/project-$1
  make_transcript "$file" "$2" "${3:-0}"
  transcript_bytes[$key]=$(stat -c %s "$file")
  mkdir -p "$p"
  "$ctl" init --project "$p" >/dev/null
  write_task "$p"
  "$ctl" --project "$p" start --session-id "$SID" --max-iterations 100000 >/dev/null
  # Flush the new files now: the hook's own fsyncs must not wait for them.
  sync
  input_project=$p stop_input "$work/$key.json" -t "$file"
  # The transcript's iterations call tools: each stop must also see a file
  # change, or the circuit breaker would end the loop after a few stops and
  # the rest would measure a stop that is let through.
  transcript_prepare[$key]="sh -c 'echo x >>$p/progress.txt && sync'"
  check "transcript $key" "$work/$key.json" block
}
transcript_names=() transcript_keys=()
for entry in $sizes; do
  name=${entry%%:*}
  say "transcript fallback: making a $name transcript"
  transcript_case "t$name" "${entry#*:}"
  transcript_bytes[$name]=${transcript_bytes[t$name]}
  transcript_names+=("$name") transcript_keys+=("t$name")
done
# The cost that does grow: the stopping iteration's own size, read whole up
# to the 16 MiB scan bound.
iteration_names=()
for entry in $iteration_sizes; do
  name=${entry%%:*}
  say "transcript fallback: making a last iteration of $name"
  transcript_case "i$name" 0 "${entry#*:}"
  iteration_names+=("$name") transcript_keys+=("i$name")
done
# Every case once per turn, in 5 turns, so that the machine getting busier
# (writing those files back, for one) favours no size: the largest session
# is judged against the smallest.
say "transcript fallback: measuring the cases in 5 turns"
runs_before=$runs warmup_before=$warmup
runs=$((runs / 5)) warmup=5
for ((turn = 1; turn <= 5; turn++)); do
  for key in "${transcript_keys[@]}"; do
    prepare=${transcript_prepare[$key]}
    measure "${key}_$turn" "$work/$key.json" RALPH_ACTIVE=1
  done
done
runs=$runs_before warmup=$warmup_before
for key in "${transcript_keys[@]}"; do
  combine "$key" 5
  prepare=${transcript_prepare[$key]}
  peak_rss "$key" "$work/$key.json" RALPH_ACTIVE=1
  loop_state=$("$ctl" --project "$work/project-$key" status --json)
  grep -q '"status": "running"' <<<"$loop_state" ||
    die "transcript $key: the loop did not keep running: ${loop_state:0:300}"
  rm -rf "$work/$key.jsonl" "$work/project-$key"
done
prepare=""

# ------------------------------------------------------------ project sizes

# `make_tree DIR N`: N small files, 100 to a folder (src/mNNN/pN/fNN.txt).
make_tree() {
  local dir=$1 n=$2 i last folder
  for ((i = 0; i < n; i += 100)); do
    folder=$dir/src/m$(printf %03d $((i / 1000)))/p$(((i / 100) % 10))
    mkdir -p "$folder"
    last=$((i + 99 < n - 1 ? i + 99 : n - 1))
    seq "$i" "$last" | split -l 1 -a 2 -d --additional-suffix=.txt - "$folder/f"
  done
}

# `iteration_transcript FILE TOOL`: one iteration as the real client writes
# it: the prompt, a tool call and its result, the final message. A Write
# edits EDITED (the result says so with a non-empty `structuredPatch`); a
# Bash call runs the tests (it may have changed anything).
iteration_transcript() {
  local file=$1 tool=$2 call result
  if [ "$tool" = write ]; then
    call='{"type":"tool_use","id":"toolu_b1","name":"Write","input":{"file_path":"'$edited'","content":"0\nx\n"}}'
    result='{"parentUuid":"a1","isSidechain":false,"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_b1","type":"tool_result","content":"The file '$edited' has been updated."}]},"uuid":"u1","toolUseResult":{"type":"update","filePath":"'$edited'","content":"0\nx\n","structuredPatch":[{"oldStart":1,"oldLines":1,"newStart":1,"newLines":2,"lines":[" 0","+x"]}],"originalFile":"0\n","userModified":false},"sessionId":"'$SID'"}'
  else
    call='{"type":"tool_use","id":"toolu_b1","name":"Bash","input":{"command":"cargo test","description":"Run the tests"}}'
    result='{"parentUuid":"a1","isSidechain":false,"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_b1","type":"tool_result","content":"test result: ok. 12 passed","is_error":false}]},"uuid":"u1","toolUseResult":{"stdout":"test result: ok. 12 passed","stderr":"","interrupted":false,"isImage":false},"sessionId":"'$SID'"}'
  fi
  {
    printf '{"parentUuid":null,"isSidechain":false,"type":"user","message":{"role":"user","content":"Do the task"},"uuid":"u0","sessionId":"%s"}\n' "$SID"
    printf '{"parentUuid":"u0","isSidechain":false,"type":"assistant","message":{"id":"msg_b1","type":"message","role":"assistant","model":"claude-opus-5-5","content":[%s],"stop_reason":"tool_use"},"uuid":"a1","sessionId":"%s"}\n' "$call" "$SID"
    printf '%s\n' "$result"
    printf '{"parentUuid":"u1","isSidechain":false,"type":"assistant","message":{"id":"msg_b2","type":"message","role":"assistant","model":"claude-opus-5-5","content":[{"type":"text","text":"%s"}],"stop_reason":"end_turn"},"uuid":"a2","sessionId":"%s"}\n' "$final" "$SID"
  } >"$file"
}
final="Made progress on the task. Still working."

# The hook of $BEFORE, for the targets of the full-check rows (full run only).
before_hook="" before_ctl=""
if [ "$quick" -eq 0 ]; then
  say "building the hook of $BEFORE (the progress check this one replaces)"
  mkdir -p "$work/before"
  git archive "$BEFORE" | tar -x -C "$work/before" || die "cannot read revision $BEFORE"
  # git archive gives every file the commit's time: a target folder shared
  # between revisions would take an older build for up to date.
  before_target=$root/target/bench-before/$(git rev-parse --short "$BEFORE")
  cargo build --quiet --release --locked --manifest-path "$work/before/Cargo.toml" \
    --target-dir "$before_target" -p ralph-stop-hook -p ralph-ctl ||
    die "cannot build revision $BEFORE"
  before_hook=$before_target/release/ralph-stop-hook
  before_ctl=$before_target/release/ralph-ctl
fi

# `start_loop CTL PROJECT`: ralph installed and a loop running, from scratch.
start_loop() {
  rm -rf "$2/.claude"
  "$1" init --project "$2" >/dev/null
  write_task "$2"
  "$1" --project "$2" start --session-id "$SID" --max-iterations 100000 >/dev/null
}

# The no-progress count must never end a loop here: a stop that is let
# through costs less, and the hook it is compared with cannot always see the
# edit (its scan stopped at 20,000 files in reverse order). The reading is
# taken all the same.
export CB_NO_PROGRESS_THRESHOLD=1000
# `still_running CTL PROJECT`: every measured stop was a stop of a running
# loop (a loop that ended lets the stop through, which costs less).
still_running() {
  local state
  state=$("$1" --project "$2" status --json)
  grep -q '"status": "running"' <<<"$state" ||
    die "$2: the loop did not keep running: ${state:0:300}"
}

# `paired KEY PROJECT INPUT PAIRS`: the full check of this hook against the
# hook of $BEFORE, run for run. Each pair is one stop of each hook, which
# one goes first alternating, so whatever the machine does at a moment
# falls on both; $project_warmup pairs are run first and not counted. Each
# hook keeps its own loop: its `.claude` folder is moved into the project
# just before its run and out just after (untimed, like the edit before
# each run). Sets KEY_bash (this hook) and KEY_before (median, mean, σ)
# and diff[KEY]: the median of the pairs' differences (this − before) and
# its 95 % confidence interval (order statistics of the sorted
# differences, distribution-free).
declare -A diff
paired() {
  local key=$1 p=$2 input=$3 pairs=$4 i side order args
  local -A home=([this]=$work/claude-this [before]=$work/claude-before)
  local -A hook_of=([this]=$hook [before]=$before_hook) ctl_of=([this]=$ctl [before]=$before_ctl)
  for side in this before; do
    start_loop "${ctl_of[$side]}" "$p"
    target_hook=${hook_of[$side]} check "$key $side" "$input" block
    mv "$p/.claude" "${home[$side]}"
  done
  : >"$work/$key.pairs"
  for ((i = 1 - project_warmup; i <= pairs; i++)); do
    order=(this before)
    ((i % 2)) || order=(before this)
    # (hyperfine pairs the n-th --prepare, --conclude and -n with the n-th
    # command)
    args=()
    for side in "${order[@]}"; do
      args+=(--prepare "sh -c 'mv ${home[$side]} $p/.claude && echo x >>$edited && sync'"
        --conclude "sh -c 'mv $p/.claude ${home[$side]}'" -n "$side")
    done
    RALPH_ACTIVE=1 "$hyperfine" -N --style none --output=pipe --runs 1 --input "$input" \
      --export-csv "$work/pair.csv" "${args[@]}" -- "'${hook_of[${order[0]}]}'" "'${hook_of[${order[1]}]}'" \
      >/dev/null || die "$key: hyperfine failed"
    [ -d "${home[this]}" ] && [ -d "${home[before]}" ] && [ ! -e "$p/.claude" ] ||
      die "$key: a loop's .claude folder was not moved back"
    ((i >= 1)) || continue
    awk -F, '$1 == "this" { t = $4 * 1000 } $1 == "before" { b = $4 * 1000 }
      END { printf "%.4f %.4f\n", t, b }' "$work/pair.csv" >>"$work/$key.pairs"
  done
  # Every timed stop was a real one: each loop is still running, one
  # iteration further per stop (the check's and every pair's).
  local iteration
  for side in this before; do
    mv "${home[$side]}" "$p/.claude"
    still_running "${ctl_of[$side]}" "$p"
    iteration=$("${ctl_of[$side]}" --project "$p" status --json | sed -n 's/.*"iteration": *\([0-9]*\).*/\1/p' | head -n 1)
    [ "${iteration:-0}" -gt "$((pairs + project_warmup))" ] ||
      die "$key: the $side hook's stops did not advance its loop (iteration ${iteration:-?} after $((pairs + project_warmup + 1)) stops)"
    rm -rf "$p/.claude"
  done
  read -r "median[${key}_bash]" "mean[${key}_bash]" "sd[${key}_bash]" < <(pair_stats 1 "$work/$key.pairs")
  read -r "median[${key}_before]" "mean[${key}_before]" "sd[${key}_before]" < <(pair_stats 2 "$work/$key.pairs")
  diff[$key]=$(awk '{ print $1 - $2 }' "$work/$key.pairs" | sort -g | awk '{ v[NR] = $1 } END {
    n = NR; lo = int(n / 2 - 0.98 * sqrt(n)); hi = int(n / 2 + 0.98 * sqrt(n) + 1.999999)
    if (lo < 1) lo = 1
    if (hi > n) hi = n
    printf "%.2f %.2f %.2f\n", v[int((n + 1) / 2)], v[lo], v[hi]
  }')
}
# `pair_stats COLUMN FILE`: median, mean and σ of a column of a pairs file.
pair_stats() {
  cut -d' ' -f"$1" "$2" | sort -g | awk '{ v[NR] = $1; s += $1; q += $1 * $1 }
      END { m = s / NR; w = q / NR - m * m; printf "%.2f %.2f %.2f\n", v[int((NR + 1) / 2)], m, sqrt(w > 0 ? w : 0) }'
}

project_rows=()
for n in $project_sizes; do
  for kind in git scan; do
    p=$work/size-$n-$kind
    say "project of $n files ($kind): building it"
    mkdir -p "$p"
    make_tree "$p" "$n"
    # Files older than the index, as in a real repository: files written in
    # the second the index was would be re-read by every `git status`.
    find "$p" -type f -exec touch -d '1 hour ago' {} +
    if [ "$kind" = git ]; then
      git -C "$p" init -q
      git -C "$p" add -A
      # (no background gc: it would still be writing when the folder goes)
      git -C "$p" -c user.name=bench -c user.email=bench@example.invalid \
        -c gc.auto=0 -c maintenance.auto=false commit -qm start
    fi
    edited=$p/src/m000/p0/f00.txt
    # Before each run, what the iteration's tool did: the same file, edited
    # again (and flushed, like every file made here: the hook's own fsyncs
    # must not wait for it).
    prepare="sh -c 'echo x >>$edited && sync'"
    runs_before=$runs warmup_before=$warmup
    runs=$project_runs warmup=$project_warmup
    for tool in write bash; do
      iteration_transcript "$p.$tool.jsonl" "$tool"
      input_project=$p stop_input "$p.$tool.json" "$final"
      sed -i "s|\"transcript_path\": \"[^\"]*\"|\"transcript_path\": \"$p.$tool.jsonl\"|" "$p.$tool.json"
    done
    start_loop "$ctl" "$p"
    sync
    say "project of $n files ($kind): a stop after a write call"
    check "$n $kind write" "$p.write.json" block
    measure "p${n}_${kind}_write" "$p.write.json" RALPH_ACTIVE=1
    peak_rss "p${n}_${kind}_write" "$p.write.json" RALPH_ACTIVE=1
    still_running "$ctl" "$p"
    say "project of $n files ($kind): a stop after a bash call"
    check "$n $kind bash" "$p.bash.json" block
    peak_rss "p${n}_${kind}_bash" "$p.bash.json" RALPH_ACTIVE=1
    if [ -z "$before_hook" ]; then
      measure "p${n}_${kind}_bash" "$p.bash.json" RALPH_ACTIVE=1
      still_running "$ctl" "$p"
    else
      say "project of $n files ($kind): the same, in pairs with the hook of $BEFORE"
      paired "p${n}_${kind}" "$p" "$p.bash.json" "$project_runs"
    fi
    project_rows+=("$n $kind write" "$n $kind bash")
    runs=$runs_before warmup=$warmup_before prepare=""
    rm -rf "$p"
  done
done
unset CB_NO_PROGRESS_THRESHOLD

size_bytes=$(stat -c %s "$hook")
iteration=$("$ctl" --project "$project" status --json | sed -n 's/.*"iteration": *\([0-9]*\).*/\1/p' | head -n 1)
# Each measured blocked stop must have been a real one: answered, and the
# loop one iteration further.
[ "${iteration:-0}" -gt "$runs" ] ||
  die "the measured stops did not advance the loop (iteration ${iteration:-?} after more than $runs blocked stops): the hook did not answer"

say "criterion benches of the pure parts"
if [ "$quick" -eq 1 ]; then
  cargo bench --quiet --locked -p ralph-core --bench core -- --test >"$work/criterion.txt" 2>&1 ||
    { cat "$work/criterion.txt"; die "criterion benches failed"; }
else
  cargo bench --quiet --locked -p ralph-core --bench core >"$work/criterion.txt" 2>&1 ||
    { cat "$work/criterion.txt"; die "criterion benches failed"; }
fi

# ------------------------------------------------------------------ serve

# `ralph-ctl serve` with 10 loops shown (the project's and 9 queue items',
# all running): its CPU with no client and with a page polling as the page
# does, and the time from a state's change to that page getting it. The
# measuring client is a test of the cli binary (tests/tests/cli/serve.rs),
# run against the release binaries.
say "ralph-ctl serve: idle CPU with 10 loops, and the time to an update"
if [ "$quick" -eq 1 ]; then
  serve_env=(SERVE_BENCH_SECONDS=3 SERVE_BENCH_CHANGES=3)
else
  serve_env=(SERVE_BENCH_SECONDS=10 SERVE_BENCH_CHANGES=10)
fi
env "${serve_env[@]}" RALPH_BIN_DIR="$target_dir/release" \
  cargo test --quiet --locked -p ralph-tests --test cli serve::benchmark_idle_cpu_and_update_latency \
  -- --ignored --nocapture >"$work/serve.txt" 2>&1 ||
  { cat "$work/serve.txt"; die "the serve benchmark failed"; }
serve_line=$(grep -m1 '^serve-bench:' "$work/serve.txt") || { cat "$work/serve.txt"; die "the serve benchmark printed no figures"; }
declare -A serve
for pair in ${serve_line#serve-bench:}; do
  serve[${pair%%=*}]=${pair#*=}
done

# ------------------------------------------------------------------ table

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
verdict() { awk -v ok="$1" 'BEGIN { print (ok ? "met" : "**missed**") }'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
human() {
  awk -v b="$1" 'BEGIN {
    if (b < 10240) printf "%d B", b
    else if (b < 1073741824) printf "%.1f MiB", b / 1048576
    else printf "%.2f GiB", b / 1073741824
  }'
}
max_rss=0
# (The project rows are left out: with git, their peak RSS is git's own.)
for name in guard active active_git "${transcript_names[@]/#/t}" "${iteration_names[@]/#/i}"; do
  max_rss=$(awk -v a="$max_rss" -v b="${rss[$name]}" 'BEGIN { print (b > a ? b : a) }')
done
first=${transcript_names[0]}
last=${transcript_names[${#transcript_names[@]} - 1]}

table() {
  local name
  echo "### ralph-stop-hook"
  echo
  echo "- machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores, $(uname -sr)"
  echo "- date: $(date -u +%Y-%m-%d), ralph $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(rustc --version | cut -d' ' -f1-2), $("$hyperfine" --version)"
  if [ "$quick" -eq 1 ]; then
    echo "- mode: --quick ($runs runs per case; verdicts are indicative only)"
  else
    echo "- mode: full ($runs runs per case, $((runs * 3)) for the guard, $warmup warm-up runs; the guards and the transcript cases in 5 turns; $project_runs for each project case, the full-check ones as $project_runs pairs of runs with the hook of $BEFORE)"
    echo "- a full-check row gives the median of the $project_runs differences (this hook − $BEFORE, each pair run back to back) and its 95 % confidence interval; it is missed when this hook is measurably slower: the whole interval above 0"
  fi
  echo
  echo "Whole process, as Claude Code runs it (hyperfine; times in ms):"
  echo
  echo "| case | median | mean ± σ | peak RSS | target | |"
  echo "|---|---:|---:|---:|---|---|"
  echo "| \`/bin/true\` (process spawn) | ${median[true]} | ${mean[true]} ± ${sd[true]} | – | – | |"
  echo "| guard off (\`RALPH_ACTIVE\` unset) | ${median[guard]} ($(ratio "${median[guard]}" "${median[true]}")× true) | ${mean[guard]} ± ${sd[guard]} | ${rss[guard]} MiB | ≤ 1.5× \`/bin/true\` | $(verdict "$(awk -v a="${median[guard]}" -v b="${median[true]}" 'BEGIN { print a <= 1.5 * b }')") |"
  echo "| plugin guard off (\`--plugin\`, no loop in the project: one stat) | ${median[plugin_guard]} ($(ratio "${median[plugin_guard]}" "${median[plugin_true]}")× true) | ${mean[plugin_guard]} ± ${sd[plugin_guard]} | – | ≤ 1.5× \`/bin/true\` | $(verdict "$(awk -v a="${median[plugin_guard]}" -v b="${median[plugin_true]}" 'BEGIN { print a <= 1.5 * b }')") |"
  echo "| active loop, \`last_assistant_message\` | ${median[active]} | ${mean[active]} ± ${sd[active]} | ${rss[active]} MiB | median < 5 ms | $(verdict "$(awk -v a="${median[active]}" 'BEGIN { print a < 5 }')") |"
  echo "| active loop in a git repository (50 files; includes \`git status\`) | ${median[active_git]} | ${mean[active_git]} ± ${sd[active_git]} | ${rss[active_git]} MiB | – | |"
  for name in "${transcript_names[@]}"; do
    local target="–" judged=""
    if [ "$name" = "$last" ] && [ "$name" != "$first" ]; then
      target="≤ 1.3× the $first time"
      judged=$(verdict "$(awk -v a="${median[t$name]}" -v b="${median[t$first]}" 'BEGIN { print a <= 1.3 * b }')")
    fi
    echo "| transcript fallback, $name session ($(human "${transcript_bytes[$name]}"); the same small last iteration) | ${median[t$name]} ($(ratio "${median[t$name]}" "${median[t$first]}")× $first) | ${mean[t$name]} ± ${sd[t$name]} | ${rss[t$name]} MiB | $target | $judged |"
  done
  for name in "${iteration_names[@]}"; do
    echo "| transcript fallback, a last iteration of $name ($(human "${transcript_bytes[i$name]}"), 16 tool calls per MiB; read whole up to the 16 MiB bound) | ${median[i$name]} ($(ratio "${median[i$name]}" "${median[t$first]}")× $first) | ${mean[i$name]} ± ${sd[i$name]} | ${rss[i$name]} MiB | – | |"
  done
  local first_size=${project_sizes%% *}
  for row in "${project_rows[@]}"; do
    local n kind tool key what target judged ratio_to
    read -r n kind tool <<<"$row"
    key=p${n}_${kind}_$tool
    what=$([ "$kind" = git ] && echo "git" || echo "no git")
    if [ "$tool" = write ]; then
      ratio_to=p${first_size}_${kind}_write
      target="≤ 25 ms"
      judged=$(verdict "$(awk -v a="${median[$key]}" 'BEGIN { print a <= 25 }')")
      echo "| project of $n files, $what: after a Write (the edit is the answer) | ${median[$key]} ($(ratio "${median[$key]}" "${median[$ratio_to]}")× $first_size) | ${mean[$key]} ± ${sd[$key]} | ${rss[$key]} MiB | $target | $judged |"
    else
      target="–" judged=""
      if [ -n "${diff[p${n}_${kind}]:-}" ]; then
        local d lo hi
        read -r d lo hi <<<"${diff[p${n}_${kind}]}"
        target="≤ $BEFORE: ${median[p${n}_${kind}_before]}; this − $BEFORE, run for run: $d [$lo, $hi]"
        # Missed when this hook is measurably slower: the whole interval
        # above zero.
        judged=$(verdict "$(awk -v lo="$lo" 'BEGIN { print lo <= 0 }')")
      fi
      echo "| project of $n files, $what: after a Bash call (full check) | ${median[$key]} | ${mean[$key]} ± ${sd[$key]} | ${rss[$key]} MiB | $target | $judged |"
    fi
  done
  echo
  echo "| | value | target | |"
  echo "|---|---:|---|---|"
  echo "| peak RSS, largest of the cases above but the project rows (whose RSS with git is git's own) | $max_rss MiB | < 8 MiB | $(verdict "$(awk -v a="$max_rss" 'BEGIN { print a < 8 }')") |"
  echo "| \`ralph-stop-hook\` release size (stripped) | $size_bytes bytes ($(mib "$size_bytes")) | < 2 MiB | $(verdict "$((size_bytes < 2097152))") |"
  echo
  echo "Every blocked stop advanced the loop, which ended these runs at iteration $iteration."
  echo
  echo "\`ralph-ctl serve\` with ${serve[loops]} loops shown (CPU over ${serve[seconds]} s, from /proc; ${serve[changes]} state changes):"
  echo
  echo "| case | value | target | |"
  echo "|---|---:|---|---|"
  echo "| CPU, no page open | ${serve[idle_cpu_no_client_pct]} % of a core | < 1 % | $(verdict "$(awk -v a="${serve[idle_cpu_no_client_pct]}" 'BEGIN { print a < 1 }')") |"
  echo "| CPU, a page polling every second (nothing changing) | ${serve[idle_cpu_polled_pct]} % of a core | < 1 % | $(verdict "$(awk -v a="${serve[idle_cpu_polled_pct]}" 'BEGIN { print a < 1 }')") |"
  echo "| an answer with every loop read and rendered (a page's first, or after a change) | ${serve[full_answer_ms]} ms | – | |"
  echo "| a state change to the page, median | ${serve[latency_median_ms]} ms | – | |"
  echo "| a state change to the page, slowest | ${serve[latency_max_ms]} ms | < 2000 ms | $(verdict "$(awk -v a="${serve[latency_max_ms]}" 'BEGIN { print a < 2000 }')") |"
  echo
  echo "Pure parts (criterion, \`cargo bench -p ralph-core --bench core\`; estimate of the mean):"
  echo
  echo "| bench | time |"
  echo "|---|---:|"
  awk '
    /^[^ ]/ && !/time:/ && !/^(Benchmarking|Found|Testing|Success|Gnuplot|  )/ { name = $1 }
    /time:/ {
      if ($1 != "time:") name = $1
      sub(/.*\[/, ""); split($0, t, " ")
      printf "| %s | %s %s |\n", name, t[3], t[4]
    }
    /^Testing / { printf "| %s | ran once (--quick) |\n", $2 }
  ' "$work/criterion.txt"
}

table | tee "$work/results.md"
say "the queue's throughput (bench/queue.sh)"
queue_mode=()
[ "$quick" -eq 1 ] && queue_mode=(--quick)
echo | tee -a "$work/results.md"
bench/queue.sh "${queue_mode[@]}" "$ctl" | tee -a "$work/results.md"
if [ "$quick" -eq 0 ]; then
  # Into docs/benchmarks.md, between its markers: the page's figures are
  # this run's, none copied by hand.
  doc=docs/benchmarks.md
  begin='<!-- bench/run.sh writes from here to the end marker; not edited by hand -->'
  end='<!-- bench/run.sh: end -->'
  grep -qxF "$begin" "$doc" && grep -qxF "$end" "$doc" || die "$doc lacks its markers: $begin / $end"
  awk -v begin="$begin" -v end="$end" -v results="$work/results.md" '
    $0 == begin { print; print ""; while ((getline line < results) > 0) print line; print ""; skip = 1; next }
    $0 == end { skip = 0 }
    !skip { print }
  ' "$doc" >"$work/doc.md"
  cp "$work/doc.md" "$doc"
  say "written into $doc (the last full run)"
fi
