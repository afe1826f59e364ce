#!/usr/bin/env bash
# An A/B run of two training settings with equal wall-clock time, scored on dev.
#
#   scripts/ab.sh NAME MINUTES "ARGS A" "ARGS B" [PAIR]
#   e.g. scripts/ab.sh subword-0.3 30 "" "--subword-alpha 0.3"
#
# Both arms start from the same point: a copy of START (a run directory: its newest checkpoint,
# with its optimizer state) when START is set, else the shipped bundle (web/models/PAIR), and
# train at the same time under `nice -n 19` with `train --config configs/PAIR.toml ARGS
# --max-minutes MINUTES`, so they share the cores equally. Then each arm's bundle is scored on
# the dev set with the default decoding (`evaluate --cpu`), and one line is appended to
# target/ab/PAIR.tsv: name, minutes, steps A/B, dev BLEU A/B, dev chrF A/B, val loss A/B.
# Runs live in $WEBNMT_RUNS/ab/NAME-{a,b} (default ~/webnmt-runs), outside the work tree.
# TRAIN_ARGS (default "--warmup-steps 400 --lr-factor 0.3 --eval-every 200 --patience 0": an
# arm trains its minutes, even from a START that stopped early) go to both arms. An arm that
# fails, or trains nothing, stops the A/B and the other arm (so does Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
name="${1:?name of the A/B}"
minutes="${2:?minutes per arm}"
args_a="${3-}"
args_b="${4-}"
pair="${5:-ko-en}"
runs="${WEBNMT_RUNS:-$HOME/webnmt-runs}/ab"
out="target/ab"
common="${TRAIN_ARGS:---warmup-steps 400 --lr-factor 0.3 --eval-every 200 --patience 0}"
src_lang="${pair%-*}"
tgt_lang="${pair#*-}"
mkdir -p "$runs" "$out"
cargo build --locked --release --features train --bin train --bin evaluate

pids=()
# An arm left training alone would write into a folder the next A/B of this name deletes.
stop_arms() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; }
trap stop_arms EXIT
for arm in a b; do
  dir="$runs/$name-$arm"
  rm -rf "$dir"
  if [ -n "${START:-}" ]; then
    mkdir -p "$dir"
    cp -r "$START"/{config.toml,*.tokenizer.json,checkpoints,best} "$dir/"
  fi
  args="$args_a"
  [ "$arm" = b ] && args="$args_b"
  # shellcheck disable=SC2086 # flag lists
  nice -n 19 target/release/train --config "configs/$pair.toml" --run-dir "$dir" --device auto \
    --resume --init-from "web/models/$pair" --max-minutes "$minutes" $common $args \
    >"$dir.log" 2>&1 &
  pids+=($!)
done
# Whichever arm ends first is checked at once (the EXIT trap then stops the other).
declare -A arm_of=(["${pids[0]}"]=a ["${pids[1]}"]=b)
while [ ${#arm_of[@]} -gt 0 ]; do
  status=0
  wait -n -p done "${!arm_of[@]}" || status=$?
  log="$runs/$name-${arm_of[$done]}.log"
  unset "arm_of[$done]"
  [ "$status" = 0 ] || { tail -3 "$log" >&2; echo "that arm failed; see $log" >&2; exit 1; }
  if grep -q 'nothing to resume' "$log"; then
    grep 'nothing to resume' "$log" >&2
    echo "that arm trained nothing; see $log" >&2
    exit 1
  fi
done
pids=()

row="$name\t$minutes"
declare -A bleu chrf steps loss
for arm in a b; do
  dir="$runs/$name-$arm"
  nice -n 19 target/release/evaluate --model "$dir/bundle" --cpu \
    --src "../shared/data/$pair/dev.$src_lang" --ref "../shared/data/$pair/dev.$tgt_lang" \
    --json "$out/$name-$arm.json" >/dev/null
  bleu[$arm]=$(jq -r '.report.bleu.score | . * 100 | round / 100' "$out/$name-$arm.json")
  chrf[$arm]=$(jq -r '.report.chrf.score | . * 100 | round / 100' "$out/$name-$arm.json")
  steps[$arm]=$(jq -r '.metrics.steps' "$dir/bundle/manifest.json")
  loss[$arm]=$(jq -r '.metrics.best_val_loss | . * 1000 | round / 1000' "$dir/bundle/manifest.json")
done
row="$row\t${steps[a]}/${steps[b]}\t${bleu[a]}/${bleu[b]}\t${chrf[a]}/${chrf[b]}\t${loss[a]}/${loss[b]}"
[ -f "$out/$pair.tsv" ] || printf 'name\tminutes\tsteps A/B\tdev BLEU A/B\tdev chrF A/B\tval loss A/B\n' >"$out/$pair.tsv"
printf '%b\n' "$row" | tee -a "$out/$pair.tsv" # %b: the tabs; NAME is not a format
echo "A: ${args_a:-(baseline)}  B: $args_b"
