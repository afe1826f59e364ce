#!/usr/bin/env bash
# One round of "keep improving the shipped model": train at low priority (`nice -n 19`) for a
# budget, then replace the shipped bundle only if the new one scores higher on dev.
#
#   scripts/improve.sh [PAIR] [MINUTES]        # default: ko-en 120
#
# 1. Builds `train` and `evaluate` (release).
# 2. Trains under `nice -n 19` (builds and tests keep the cores) in $WEBNMT_RUNS/PAIR
#    (default ~/webnmt-runs: outside the work tree, so checkpoints never reach git). The run
#    resumes from its newest checkpoint when there is one, with its optimizer state; otherwise
#    it starts from the shipped bundle's weights (web/models/PAIR) with a fresh optimizer and a
#    short warm-up, or, with INIT_FROM=none, from random weights and tokenizers of its own (a
#    new recipe: give its flags in TRAIN_ARGS, e.g. --src-vocab 8000, in every round). `--max-minutes MINUTES` ends it with a validation, checkpoint and export.
# 3. Scores the run's new bundle and the shipped one on the pair's dev set with the default
#    decoding (the bundles' int8 weights in burn on the CPU: `evaluate --cpu`).
# 4. Copies the new bundle into web/models/PAIR only when its dev BLEU beats the shipped one by
#    at least MIN_GAIN (default 0.5), and says so; otherwise leaves the shipped model alone.
#    Every round therefore leaves the shipped model better or unchanged. Commit the bundle
#    yourself after reading the scores (target/improve/PAIR/*.json).
#
# Environment: WEBNMT_RUNS, MIN_GAIN, TRAIN_ARGS (flags for `train`; default
# "--warmup-steps 400 --lr-factor 0.3 --eval-every 200 --patience 0": a continuation's learning
# rate peaks at 9.4e-4, about the last rate of the H200 run that made the first ko-en bundle; a
# checkpoint is at most 200 steps (12–22 CPU minutes) old;
# and no early stopping: the dev-BLEU gate below judges a round, and the news validation loss
# stays flat for thousands of steps while dev BLEU still moves; keep the same flags across
# rounds, the schedule is computed from them; a run that stopped early goes on with
# `--patience 0`), SKIP_TRAIN=1 (only compare and
# promote), RUN_DIR (another run's directory, e.g. an A/B arm or an unpacked GPU run),
# INIT_FROM (the bundle a new run starts from; default the shipped one; `none`: from scratch).
set -euo pipefail
shopt -s inherit_errexit # a failing score() inside $(…) stops the script
cd "$(dirname "$0")/.."

pair="${1:-ko-en}"
minutes="${2:-120}"
runs="${WEBNMT_RUNS:-$HOME/webnmt-runs}"
min_gain="${MIN_GAIN:-0.5}"
config="configs/$pair.toml"
shipped="web/models/$pair"
run_dir="${RUN_DIR:-$runs/$pair}"
run_dir="${run_dir%/}" # its log is "$run_dir.log", beside it
mkdir -p "$(dirname "$run_dir")" # the log opens before train creates the run directory
out="target/improve/$pair"
[ -f "$config" ] || { echo "no $config: name a pair that has a config (ko-en, de-en)" >&2; exit 2; }
[ -d "$shipped" ] || { echo "no shipped bundle $shipped" >&2; exit 2; }
src_lang="${pair%-*}"
tgt_lang="${pair#*-}"
dev_src="../shared/data/$pair/dev.$src_lang"
dev_ref="../shared/data/$pair/dev.$tgt_lang"
[ -f "$dev_src" ] && [ -f "$dev_ref" ] || { echo "no dev set $dev_src / $dev_ref" >&2; exit 2; }
mkdir -p "$runs" "$out"

echo "==> building train and evaluate"
cargo build --locked --release --features train --bin train --bin evaluate

if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  init_from="${INIT_FROM:-$shipped}"
  init=(--init-from "$init_from") from="$init_from"
  [ "$init_from" = none ] && init=() from="random weights"
  if [ -d "$run_dir/checkpoints" ] && ls "$run_dir/checkpoints" | grep -q .; then
    echo "==> resuming $run_dir for $minutes minutes"
  else
    echo "==> starting $run_dir from $from for $minutes minutes"
  fi
  # --init-from only applies when there is no checkpoint; --resume only when there is one.
  # shellcheck disable=SC2086 # TRAIN_ARGS is a list of flags
  nice -n 19 target/release/train --config "$config" --run-dir "$run_dir" --device auto \
    --resume "${init[@]}" --max-minutes "$minutes" ${TRAIN_ARGS:---warmup-steps 400 --lr-factor 0.3 --eval-every 200 --patience 0} \
    2>&1 | tee -a "$run_dir.log"
fi
[ -f "$run_dir/bundle/manifest.json" ] || { echo "no bundle in $run_dir/bundle: train first" >&2; exit 1; }

score() { # score BUNDLE NAME -> prints dev BLEU; fails (no stale score) when evaluate does
  rm -f "$out/$2.json" "$out/$2.txt"
  nice -n 19 target/release/evaluate --model "$1" --cpu --src "$dev_src" --ref "$dev_ref" \
    --json "$out/$2.json" --output "$out/$2.txt" >&2 || return 1
  jq -r '.report.bleu.score' "$out/$2.json"
}
echo "==> dev BLEU, default decoding"
# Again: another build may have replaced evaluate during the hours of training.
cargo build --locked --release --features train --bin evaluate
# The shipped model's score is kept beside a hash of what made it (the bundle, the evaluate
# binary, the dev set): scored again only when one of them changed, so both scores of a gate
# come from the same decoder.
sha=$(cat "$shipped"/*.json "$shipped"/model.safetensors target/release/evaluate "$dev_src" \
  "$dev_ref" | sha256sum | cut -d' ' -f1)
if [ -f "$out/shipped.json" ] && [ "$(cat "$out/shipped.sha" 2>/dev/null)" = "$sha" ]; then
  old=$(jq -r '.report.bleu.score' "$out/shipped.json")
else
  old=$(score "$shipped" shipped)
  echo "$sha" >"$out/shipped.sha"
fi
new=$(score "$run_dir/bundle" candidate)
echo "shipped $old, candidate $new (needs +$min_gain)"
if awk -v n="$new" -v o="$old" -v g="$min_gain" 'BEGIN { exit !(n >= o + g) }'; then
  cp "$run_dir"/bundle/{manifest.json,model.safetensors,source.tokenizer.json,target.tokenizer.json} "$shipped/"
  echo "==> promoted: $shipped now holds the candidate (dev BLEU $old -> $new); commit it"
else
  echo "==> kept the shipped model: the candidate is not $min_gain BLEU better"
fi
