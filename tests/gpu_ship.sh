#!/usr/bin/env bash
# Makes the shipped tuning records of this machine's GPU kind (tuner/shipped.h):
# tunes every spec of tuned/models.jsonl on all of the machine's GPUs into one
# cache, stops before the command's time limit, and exports what is tuned so
# far to $OUT/<gpu>.jsonl (for tuned/). A stopped tune loses nothing: the cache
# keeps every trial, so the next call on a warm machine goes on where this one
# stopped, until it prints "all N specs tuned".
#   usage (repo root): bash tests/gpu_ship.sh [SECONDS]   (default 540)
# Environment: DIST (install tree, default .dist), WORK (default .device/ship),
# OUT (where the records and logs go), SEED (default 1).
set -u
DIST=${DIST:-.dist}
Q="$DIST/bin/qjit"
WORK=${WORK:-.device/ship}
FINAL=${OUT:-/tmp/qjit_ship_out}
SECONDS_LEFT=${1:-540}
mkdir -p "$WORK" "$FINAL"
DB="$WORK/ship.db"
MODELS=tuned/models.jsonl

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$gpu" | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//')
echo "== $(date -u +%FT%TZ) shipped tuning for $gpu: $(nvidia-smi -L | wc -l) GPU(s), $(nproc) host threads"

t0=$(date +%s)
# The shipped folder of this tree seeds nothing here: every record is tuned from scratch.
QJIT_SHIPPED= timeout -s INT "$SECONDS_LEFT" "$Q" tune --manifest "$MODELS" --missing --devices all --cache "$DB" \
  --seed "${SEED:-1}" >"$WORK/tune.out" 2>"$WORK/tune.log"
rc=$?
echo "  tune: exit $rc after $(($(date +%s) - t0)) s (124: stopped at the limit; call again)"

"$Q" export --cache "$DB" -o "$FINAL/$slug.jsonl" 2>/dev/null
python3 - "$FINAL/$slug.jsonl" <<'PY'
import json, sys
records = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by_op = {}
for r in records:
    if r.get("tuned"):
        by_op[r["spec"]["op"]] = by_op.get(r["spec"]["op"], 0) + 1
print(f"  tuned so far: {sum(by_op.values())} ({', '.join(f'{k} {v}' for k, v in sorted(by_op.items()))}) -> {sys.argv[1]}")
PY
cp "$WORK/tune.log" "$FINAL/ship_tune.log"
if [ "$rc" = 0 ]; then echo "  every spec of $MODELS is tuned: copy $slug.jsonl into tuned/"; fi
