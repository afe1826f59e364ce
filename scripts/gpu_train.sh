#!/usr/bin/env bash
# Training on a lent GPU machine (an H200 for a few minutes): measure, then train the rest of the
# budget with the fastest setting, and bring the checkpoint back with its optimizer state.
#
# Here (no GPU needed), once per change of code or data:
#   scripts/gpu_train.sh prepare [PAIR]
#     builds `train` (release), strips and compresses it and packs it with the pair's corpus
#     and the Vulkan loader package into gpu/ (ignored by git; it travels with `carry`; the
#     shipped bundle travels as a tracked file).
# On the device machine (the `run` tool: carry ["gpu"], timeout_s 600):
#   scripts/gpu_train.sh train [PAIR] [MINUTES]          (default ko-en 8)
#     1. probes each setting for PROBE_STEPS optimizer steps (default 40): batch sizes
#        PROBE_TOKENS (default "65536 32768 16384 8192" padded tokens, the likely fastest first)
#        in PRECISIONS (default "f32 f16"; DEVICE=cpu with PRECISIONS=f32 rehearses the script
#        without a GPU), and reads the target tokens/s of the steps after the first window from
#        metrics.csv; a probe gets PROBE_SECONDS (default 120; the one that trains the
#        tokenizers, from scratch, no limit: a probe stopped there still counts the windows it
#        logged), and probing stops once it has taken PROBE_SHARE (default 0.4) of MINUTES, so
#        the training keeps the rest;
#     2. trains for the rest of MINUTES with the fastest setting, starting from the shipped
#        bundle's weights (a checkpoint with its Adam state is ~165 MB for ko-en `small`, over
#        the 64 MiB that travels to the machine), or with INIT_FROM=none from random weights
#        and tokenizers of its own (trained once, by the first probe); the warm-up is divided by
#        the batch's multiple k of 4096 tokens, so the rate at a given token count grows by
#        sqrt(k). TRAIN_ARGS are more flags for the probes and the run (a recipe, e.g.
#        "--src-vocab 8000 --tgt-vocab 8000 --dropout 0.3 --label-smoothing 0.2"; a schedule's
#        --lr-factor / --warmup-steps there replace the config's before the scaling; the flags
#        the script sets itself are refused there);
#     3. writes the run (newest checkpoint with optim.bpk and state.json, bundle) as one tar
#        in 15 MB parts under /tmp/webnmt-out, and copies the first 4 parts, the probe table,
#        metrics.csv, the log and run.sha256 (the parts' count and sha256) to $OUT. When the
#        main run fails, the checkpoints it wrote come back, or else the fastest probe's.
#   scripts/gpu_train.sh fetch K      copies parts 4K..4K+3 to $OUT (the tool returns at most
#                                     8 files, 64 MiB together, a call); call it while the
#                                     machine is warm
# Here again:
#   scripts/gpu_train.sh unpack DIR [PAIR]   checks the run.tar.NN parts (copy every call's
#     files_at files, run.sha256 included, into one folder DIR first) against the count and
#     sha256 in run.sha256 and joins them into $WEBNMT_RUNS/PAIR-gpu (default
#     ~/webnmt-runs). Score it with `SKIP_TRAIN=1 RUN_DIR=... scripts/improve.sh PAIR`; train
#     on from it on the CPU with a new run from its bundle (`INIT_FROM=.../bundle RUN_DIR=NEW
#     scripts/improve.sh PAIR`): its checkpoints hold the GPU's batch plan and scaled
#     schedule, which do not fit configs/PAIR.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="${1:-}"
shift || true
pair="${1:-ko-en}"
src_lang="${pair%-*}"
tgt_lang="${pair#*-}"
pack=gpu

case "$cmd" in
prepare)
  cargo build --locked --release --features train --bin train
  rm -rf "$pack" && mkdir -p "$pack/data/$pair" "$pack/gl"
  grep -qx '/gpu/' .git/info/exclude 2>/dev/null || echo '/gpu/' >>.git/info/exclude
  # Stripped and compressed: the working tree and the carried paths travel within 64 MiB.
  strip -o "$pack/train" target/release/train
  xz -T0 -6 "$pack/train"
  cp ../shared/data/"$pair"/* "$pack/data/$pair/"
  xz -T0 -6 "$pack/data/$pair"/train.*
  o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
  mkdir -p /tmp/amd64/partial
  # shellcheck disable=SC2086
  apt-get $o update -qq && (cd "$pack/gl" && apt-get $o download -qq libvulkan1)
  du -sh "$pack"
  ;;
train)
  minutes="${2:-8}"
  out="${OUT:-/tmp/webnmt-out-final}"
  work=/tmp/webnmt-gpu
  parts=/tmp/webnmt-out
  rm -rf "$parts" # parts of an earlier call on this machine must not join this run's
  mkdir -p "$work" "$parts" "$out"
  exec > >(tee "$out/gpu_train.log") 2>&1
  start=$SECONDS
  for f in "$pack"/gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]; then
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  fi
  nvidia-smi --query-gpu=name,memory.total --format=csv || true
  # The config reads ../../shared/data/PAIR relative to configs/: lay the corpus out there
  # (the device machine has no ../shared; a machine that has one keeps it as it is).
  if [ ! -f "../shared/data/$pair/train.$src_lang" ]; then
    mkdir -p ../shared/data/"$pair"
    for f in "$pack/data/$pair"/*; do
      case "$f" in
      *.xz) xz -dc "$f" >"../shared/data/$pair/$(basename "${f%.xz}")" ;;
      *) cp "$f" "../shared/data/$pair/" ;;
      esac
    done
  fi
  train=/tmp/webnmt-train
  xz -dc "$pack/train.xz" >"$train"
  chmod +x "$train"
  bundle="web/models/$pair"
  config="configs/$pair-gpu.toml"
  base_lr=$(grep -E '^lr_factor' "$config" | head -1 | sed 's/.*= *//; s/ *#.*//')
  base_warmup=$(grep -E '^warmup_steps' "$config" | head -1 | sed 's/.*= *//; s/ *#.*//')
  # TRAIN_ARGS: the recipe's flags; its schedule (if any) is the base that gets scaled.
  read -ra extra <<<"${TRAIN_ARGS:-}"
  recipe=()
  for ((i = 0; i < ${#extra[@]}; i++)); do
    case "${extra[i]}" in
    --lr-factor) base_lr="${extra[i + 1]}" i=$((i + 1)) ;;
    --lr-factor=*) base_lr="${extra[i]#*=}" ;;
    --warmup-steps) base_warmup="${extra[i + 1]}" i=$((i + 1)) ;;
    --warmup-steps=*) base_warmup="${extra[i]#*=}" ;;
    --eval-every* | --max-steps* | --precision* | --max-tokens* | --accum-steps* | --log-every* | \
      --max-minutes* | --device* | --run-dir* | --init-from* | --resume* | --config*)
      # train refuses a flag given twice: every probe would fail, and the machine's minutes with it.
      echo "TRAIN_ARGS: ${extra[i]%%=*} is set by this script (see the comment at the top); leave it out" >&2
      exit 2
      ;;
    *) recipe+=("${extra[i]}") ;;
    esac
  done
  init=(--init-from "$bundle") tok=""
  [ "${INIT_FROM:-}" = none ] && init=()
  # new_run DIR: an empty run directory. From scratch, the first probe trains the tokenizers
  # and every later directory gets a copy (a run given --resume loads them, not training its own).
  new_run() {
    rm -rf "$1" && mkdir -p "$1"
    [ -n "$tok" ] && cp "$tok"/*.tokenizer.json "$1/"
    return 0
  }
  scaled() { # scaled TOKENS -> "lr warmup" for a batch of TOKENS padded tokens
    # The warm-up covers the same tokens (steps ÷ k for k times the batch); with the Noam
    # factor unchanged, the rate at any token count then grows by sqrt(k).
    local w
    w=$(awk -v t="$1" -v w="$base_warmup" 'BEGIN { k = t / 4096; printf "%d\n", (w / k < 50 ? 50 : w / k) }')
    echo "$base_lr $w" # the factor as given (printf would round it)
  }
  echo "precision tokens target_tok_per_s" >"$out/probe.txt"
  best="" best_rate=0
  probe_limit=$(awk -v m="$minutes" -v f="${PROBE_SHARE:-0.4}" 'BEGIN { printf "%d", m * 60 * f }')
  for tokens in ${PROBE_TOKENS:-65536 32768 16384 8192}; do
    for precision in ${PRECISIONS:-f32 f16}; do
      if [ -n "$best" ] && [ $((SECONDS - start)) -ge "$probe_limit" ]; then
        echo "probing stops: ${probe_limit} s (PROBE_SHARE of $minutes minutes) used; skipping $precision $tokens"
        continue
      fi
      read -r lr warmup < <(scaled "$tokens")
      dir="$work/probe-$precision-$tokens"
      new_run "$dir"
      # The probe that trains the run's tokenizers (from scratch, the first) has no time limit:
      # cut short, it would leave every later probe to train them again.
      limit="${PROBE_SECONDS:-120}"
      [ "${INIT_FROM:-}" = none ] && [ -z "$tok" ] && limit=0
      if timeout "$limit" "$train" --config "$config" --device "${DEVICE:-gpu}" --run-dir "$dir" "${init[@]}" --resume "${recipe[@]}" \
        --precision "$precision" --max-tokens "$tokens" --accum-steps 1 --lr-factor "$lr" \
        --warmup-steps "$warmup" --max-steps "${PROBE_STEPS:-40}" --eval-every 100000 --log-every "${PROBE_LOG:-10}" \
        >"$dir.log" 2>&1; then
        note=""
      else
        # Stopped at the time limit (status 124) or failed: the windows it logged still measure.
        note=" (stopped: exit $?)"
        tail -3 "$dir.log"
      fi
      # metrics.csv: the rows after the first (shader compilation, autotuning) window, or that
      # one when it is the only one (PROBE_STEPS <= PROBE_LOG); 0 when it logged none.
      rate=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "tokens_per_sec") c = i; next }
        NR == 2 { first = $c; next } { s += $c; n++ }
        END { printf "%.0f\n", n ? s / n : first + 0 }' "$dir/metrics.csv" 2>/dev/null || echo 0)
      echo "$precision $tokens $rate$note" | tee -a "$out/probe.txt"
      if [ "${INIT_FROM:-}" = none ] && [ -z "$tok" ] && [ -f "$dir/target.tokenizer.json" ]; then tok="$dir"; fi
      if [ "$rate" -gt "$best_rate" ]; then best_rate=$rate best="$precision $tokens"; fi
    done
  done
  [ -n "$best" ] || { echo "every probe failed; see the logs above" >&2; exit 1; }
  read -r precision tokens <<<"$best"
  read -r lr warmup < <(scaled "$tokens")
  left=$(awk -v m="$minutes" -v s=$((SECONDS - start)) 'BEGIN { printf "%.2f", m - s / 60 - 1 }')
  if awk -v l="$left" 'BEGIN { exit !(l < 0.5) }'; then
    # (--max-minutes 0 would mean no limit, and a negative one is refused.)
    echo "fastest: $precision, $tokens tokens/batch ($best_rate target tokens/s); the probes" \
      "left $left minutes, too few to train: bringing back that probe's run, which stopped at" \
      "its step limit with that probe's schedule (resume it with --max-steps above" \
      "${PROBE_STEPS:-40} and its --lr-factor $lr --warmup-steps $warmup; next time lower" \
      "PROBE_STEPS or PROBE_TOKENS, or give more MINUTES)"
    run="$work/probe-$precision-$tokens"
  else
    echo "fastest: $precision, $tokens tokens/batch ($best_rate target tokens/s); training" \
      "$left minutes with lr factor $lr, warm-up $warmup"
    run="$work/run"
    new_run "$run"
    if ! "$train" --config "$config" --device "${DEVICE:-gpu}" --run-dir "$run" "${init[@]}" \
      --resume "${recipe[@]}" --precision "$precision" --max-tokens "$tokens" --accum-steps 1 \
      --lr-factor "$lr" --warmup-steps "$warmup" --max-minutes "$left" --eval-every 500; then
      echo "the main run failed (above); bringing back what it saved" >&2
    fi
  fi
  has_checkpoint() { ls -d "$1"/checkpoints/step-*/ >/dev/null 2>&1; }
  if ! has_checkpoint "$run"; then
    # The fastest probe's run, else any probe's that finished (one stopped by its time limit
    # saved none).
    for d in "$work/probe-$precision-$tokens" "$work"/probe-*/; do
      if has_checkpoint "$d"; then
        echo "$run saved no checkpoint: bringing back $d instead" >&2
        run="${d%/}"
        break
      fi
    done
    has_checkpoint "$run" || { echo "no run saved a checkpoint: nothing to bring back (see the logs above)" >&2; exit 1; }
  fi
  newest=$(ls -d "$run"/checkpoints/step-*/ | sort -V | tail -1)
  # The bundle is there when the run exported one (a failed run may not have).
  (cd "$run" && tar cf - config.toml data.txt metrics.csv ./*.tokenizer.json \
    $([ -d bundle ] && echo bundle) "checkpoints/$(basename "$newest")") |
    split -b 15000000 -d -a 2 - "$parts/run.tar."
  ls -l "$parts"
  cp "$run/metrics.csv" "$out/"
  n=0
  for f in "$parts"/run.tar.*; do
    [ $n -lt 4 ] && cp "$f" "$out/"
    n=$((n + 1))
  done
  # unpack checks these before joining the parts (a file of its own: the log's tee may still be
  # writing when the tool collects $OUT).
  echo "run.tar: $n parts, sha256 $(cat "$parts"/run.tar.* | sha256sum | cut -d' ' -f1)" | tee "$out/run.sha256"
  if [ "$n" -gt 4 ]; then
    echo "fetch the other $((n - 4)) parts with: scripts/gpu_train.sh fetch 1 (then 2, ...)"
  fi
  ;;
fetch)
  k="${1:?which group of 4 parts (1, 2, ...)}"
  parts=(/tmp/webnmt-out/run.tar.*)
  for i in $(seq $((4 * k)) $((4 * k + 3))); do
    [ "$i" -lt ${#parts[@]} ] && cp "${parts[$i]}" "$OUT/"
  done
  ls -l "$OUT"
  ;;
unpack)
  dir="${1:?folder holding the fetched run.tar.NN parts}"
  pair="${2:-ko-en}"
  dest="${WEBNMT_RUNS:-$HOME/webnmt-runs}/$pair-gpu"
  want=$(grep -E '^run.tar: [0-9]+ parts, sha256 [0-9a-f]{64}$' "$dir/run.sha256" 2>/dev/null) || {
    echo "$dir/run.sha256 is missing or not 'run.tar: N parts, sha256 ...': copy the train call's files into $dir" >&2
    exit 1
  }
  shopt -s nullglob
  found=("$dir"/run.tar.*)
  shopt -u nullglob
  have="run.tar: ${#found[@]} parts, sha256 $(cat "${found[@]}" </dev/null | sha256sum | cut -d' ' -f1)"
  if [ "$have" != "$want" ]; then
    echo "the parts in $dir do not make the run: expected '$want', found '$have'; fetch the missing parts (scripts/gpu_train.sh fetch K on the machine)" >&2
    exit 1
  fi
  # Joined beside the destination and moved in whole: a failed join leaves no half run to resume.
  rm -rf "$dest.partial" && mkdir -p "$dest.partial"
  cat "$dir"/run.tar.* | tar xf - -C "$dest.partial"
  # A run unpacked before (perhaps resumed since) is kept aside, not mixed in: its newer
  # checkpoints would be the ones `train --resume` takes.
  if [ -n "$(ls -A "$dest" 2>/dev/null)" ]; then
    aside="$dest.$(date +%Y%m%d-%H%M%S)"
    mv "$dest" "$aside"
    echo "moved the run already in $dest to $aside"
  fi
  rm -rf "$dest" && mv "$dest.partial" "$dest"
  # best/ stays on the machine (55 MB more to fetch); the newest checkpoint's weights stand in
  # for it, so a resumed run can export even before it beats the recorded best loss.
  if [ ! -f "$dest/best/model.bpk" ]; then
    mkdir -p "$dest/best"
    cp "$(ls -d "$dest"/checkpoints/*/ | sort | tail -1)model.bpk" "$dest/best/model.bpk"
  fi
  echo "unpacked into $dest: $(ls "$dest")"
  ;;
*)
  awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" >&2 # the comment at the top
  exit 2
  ;;
esac
