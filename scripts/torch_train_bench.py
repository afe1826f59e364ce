#!/usr/bin/env python3
"""Training throughput on the CPU: our `train` (burn flex) against PyTorch on the same model
and the same batches, measured in one invocation.

Create the virtual environment (once; `--setup` does exactly this, and skips what is there):

    python3 -m venv target/torch-venv && \
      target/torch-venv/bin/pip install torch==2.15.0 tokenizers==0.23.3 numpy==2.4.6

(Debian may first need `apt-get install -y python3-venv`. The registry's Linux x86_64 `torch`
wheel is the CUDA build: the venv takes about 5.5 GB and the install about 3 minutes; it runs on
the CPU all the same.) Build our trainer once, then run from the repository root:

    cargo build --release --features train --bin train
    python3 scripts/torch_train_bench.py --setup
    python3 scripts/torch_train_bench.py [--preset small] [--steps 8] [--log-every 2] \
        [--max-tokens 4096] [--accum-steps 2] [--rounds 2] [--data ../shared/data/de-en] \
        [--src de --tgt en] [--vocab-size 8000] [--threads N] [--json OUT.json]

The script re-executes itself with the venv's interpreter when the system Python lacks torch,
so plain `python3` works once the venv exists.

What it does
1. Waits (up to `--max-wait` seconds, polling) until the 1-minute load average is at most
   `--max-load`, since other work on the machine's cores would skew both figures; the load
   before each run is reported either way.
2. Runs the engines interleaved, `--rounds` times: ours, torch, ours, torch.
   - ours: `target/release/train --device cpu` on a config written under
     `target/torch-train-bench/` (the corpus, `--vocab-size` Unigram vocabularies, no BLEU at
     validation, a metrics row every `--log-every` steps) with `--preset`, `--max-steps`,
     `--max-tokens`, `--accum-steps` and a validation interval past the end. Its tokens/s come
     from `metrics.csv`: each row holds the target tokens per second of the window since the
     previous row, timed inside the training loop, so start-up (corpus cleaning, tokenizer
     training, tokenization) and the end (validation, checkpoint, export) are not counted.
     The first run trains the tokenizers; later runs get a copy and `--resume` (which loads
     them; with no checkpoint in the fresh run directory training starts from step 0).
   - torch: the same corpus cleaned and split as `src/data` does (trim, 1–200 characters,
     length ratio ≤ 3.5, identical sides, duplicates; dev and test pairs removed from train),
     tokenized with the run's `source.tokenizer.json` / `target.tokenizer.json`, and batched
     as `src/data/batch.rs` does (the same SplitMix64 shuffles, 16384-pair sorting chunks,
     `batch × max(src_len, tgt_len) ≤ max_tokens`), so both engines train on the same
     batches in the same order. The script checks that: our run's batch count, real-token
     count and the target tokens in its last checkpoint must equal the ones computed here.
3. Both engines are timed the same way: windows of `--log-every` optimizer steps, the first
   window left out (first-use allocations, one-off set-up), tokens/s = target tokens of the
   remaining windows / their seconds. Target tokens are real decoder outputs (target + EOS,
   no padding): `Batch::n_tgt_tokens`, the tokens the loss averages over. The figure is the
   mean over the rounds; the ratio is ours / torch.

Threads: torch runs with `torch.set_num_threads(--threads)` (default: the machine's cores);
ours gets `RAYON_NUM_THREADS=--threads` (burn flex parallelises with rayon's global pool).

The PyTorch model (`TorchTransformer` below) is the architecture of `src/model`: post-LayerNorm
encoder-decoder (`nn.TransformerEncoderLayer` / `nn.TransformerDecoderLayer`,
`norm_first=False`, ReLU, no final LayerNorm), separate source and target embeddings scaled by
sqrt(d_model) plus interleaved sinusoidal positions, dropout on embeddings, attention weights,
the FFN hidden layer and every sublayer output, the decoder embedding tied to the output
projection (no bias), a source padding mask in encoder self-attention and cross-attention and
only the causal mask in decoder self-attention. Loss: `F.cross_entropy(label_smoothing=0.05,
ignore_index=<pad>)`, the same as `src/train/loss.rs`. Each batch's loss is divided by
`accum_steps` and back-propagated; after `accum_steps` batches the gradients are clipped to a
global norm of 1.0 and Adam (β 0.9/0.98, ε 1e-9, no weight decay) steps with the Noam rate.
What differs is how, not what: torch fuses the Q/K/V projections into one matrix and runs
attention through `scaled_dot_product_attention` (a fused CPU kernel) where ours makes three
matmuls and materialises the scores; hidden positions get -inf there and -1e9 in ours; torch's
Adam is its default (single-tensor) implementation; the initial weights differ (throughput
does not depend on them).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyvenv

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / "target" / "torch-venv"
WORK = REPO / "target" / "torch-train-bench"
TRAIN_BIN = REPO / "target" / "release" / "train"
PACKAGES = ["torch==2.15.0", "tokenizers==0.23.3", "numpy==2.4.6"]
MODULES = ["torch", "tokenizers", "numpy"]
PAD, UNK, BOS, EOS = 0, 1, 2, 3

# src/config.rs `ModelConfig::preset`: d_model, d_ff, n_heads, layers (each side), dropout.
PRESETS = {
    "tiny": (32, 64, 2, 2, 0.1),
    "small": (256, 1024, 4, 3, 0.1),
    "base": (512, 2048, 8, 6, 0.3),
}
MAX_SEQ_LEN = 150
LAYER_NORM_EPS = 1e-5
# src/train/mod.rs `TrainOptions::default` (configs/de-en.toml sets warmup_steps 4000).
LR_FACTOR, WARMUP_STEPS, LABEL_SMOOTHING, CLIP_NORM = 2.0, 4000, 0.05, 1.0
ADAM_BETAS, ADAM_EPS = (0.9, 0.98), 1e-9
# src/data: CleanConfig, BatchConfig defaults.
MIN_CHARS, MAX_CHARS, MAX_RATIO = 1, 200, 3.5
BUCKET_PAIRS, BATCH_SEED = 16384, 0


# --------------------------------------------------------------------------------------------
# Environment


def wait_for_quiet(max_load: float, max_wait: float) -> dict:
    """Polls the 1-minute load average until it is at most `max_load` or `max_wait` seconds
    have passed; returns what it saw."""
    start = time.monotonic()
    first = os.getloadavg()[0]
    load = first
    while load > max_load and time.monotonic() - start < max_wait:
        print(
            f"1-minute load {load:.2f} > {max_load}: waiting for other work to finish "
            f"({time.monotonic() - start:.0f}/{max_wait:.0f} s)",
            file=sys.stderr,
        )
        time.sleep(15)
        load = os.getloadavg()[0]
    waited = time.monotonic() - start
    if load > max_load:
        print(f"warning: load still {load:.2f} after {waited:.0f} s; measuring anyway", file=sys.stderr)
    return {"initial": round(first, 2), "at_start": round(load, 2), "waited_s": round(waited, 1)}


# --------------------------------------------------------------------------------------------
# Data, exactly as src/data does it


# `char::is_whitespace` (Unicode White_Space); Python's str.strip() also strips U+001C..U+001F.
RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def read_lines(path: Path) -> list[str]:
    """src/data/read.rs: BOM skipped, `\\n` line ends with an optional `\\r`, a final newline
    starts no line."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if not data:
        return []
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [(l[:-1] if l.endswith(b"\r") else l).decode("utf-8") for l in lines]


def read_aligned(source: Path, target: Path) -> list[tuple[str, str]]:
    src, tgt = read_lines(source), read_lines(target)
    if len(src) != len(tgt):
        sys.exit(f"{source} has {len(src)} lines but {target} has {len(tgt)}")
    return list(zip(src, tgt))


def clean(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """src/data/clean.rs with the default CleanConfig."""
    kept, seen = [], set()
    for s, t in pairs:
        s, t = s.strip(RUST_WHITESPACE), t.strip(RUST_WHITESPACE)
        ls, lt = len(s), len(t)
        if ls < MIN_CHARS or lt < MIN_CHARS or ls > MAX_CHARS or lt > MAX_CHARS:
            continue
        lo, hi = min(ls, lt), max(ls, lt)
        ratio = 1.0 if hi == 0 else (math.inf if lo == 0 else hi / lo)
        if ratio > MAX_RATIO or s == t or (s, t) in seen:
            continue
        seen.add((s, t))
        kept.append((s, t))
    return kept


def train_pairs(data: Path, src: str, tgt: str) -> list[tuple[str, str]]:
    """The train split of src/train/run.rs `prepare_data` when dev and test files are given:
    the cleaned corpus in file order without the pairs of dev and test."""
    train = clean(read_aligned(data / f"train.{src}", data / f"train.{tgt}"))
    held = {
        (s.strip(RUST_WHITESPACE), t.strip(RUST_WHITESPACE))
        for split in ("dev", "test")
        for s, t in read_aligned(data / f"{split}.{src}", data / f"{split}.{tgt}")
    }
    return [p for p in train if p not in held]


MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
BATCH_STREAM = 0x4241544348000002


def mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class SplitMix64:
    """src/data/rng.rs."""

    def __init__(self, words: list[int]):
        state = 0
        for w in words:
            state = mix(((state + GOLDEN_GAMMA) & MASK64) ^ w)
        self.state = state

    def next_u64(self) -> int:
        self.state = (self.state + GOLDEN_GAMMA) & MASK64
        return mix(self.state)

    def shuffle(self, items: list) -> None:
        for i in range(len(items) - 1, 0, -1):
            j = (self.next_u64() * (i + 1)) >> 64
            items[i], items[j] = items[j], items[i]


def plan(pairs: list[tuple[list[int], list[int]]], usable: list[int], max_tokens: int, epoch: int):
    """src/data/batch.rs `Batcher::plan`: the batches of `epoch` as lists of pair indices."""
    rng = SplitMix64([BATCH_SEED, BATCH_STREAM, epoch])
    order = list(usable)
    rng.shuffle(order)

    def size(i: int) -> int:
        return max(len(pairs[i][0]), len(pairs[i][1]) + 1)

    batches = []
    for c in range(0, len(order), BUCKET_PAIRS):
        chunk = sorted(order[c : c + BUCKET_PAIRS], key=lambda i: (size(i), len(pairs[i][0]), len(pairs[i][1])))
        rows, longest = [], 0
        for i in chunk:
            l = max(longest, size(i))
            if rows and (len(rows) + 1) * l > max_tokens:
                batches.append(rows)
                rows, longest = [], size(i)
            else:
                longest = l
            rows.append(i)
        if rows:
            batches.append(rows)
    rng.shuffle(batches)
    return batches


def make_batch(pairs, rows):
    """src/data/batch.rs `Batcher::batch`: padded src, BOS + target, target + EOS."""
    import numpy as np

    src_len = max(len(pairs[i][0]) for i in rows)
    tgt_len = max(len(pairs[i][1]) + 1 for i in rows)
    src = np.full((len(rows), src_len), PAD, dtype=np.int64)
    tgt_in = np.full((len(rows), tgt_len), PAD, dtype=np.int64)
    tgt_out = np.full((len(rows), tgt_len), PAD, dtype=np.int64)
    for r, i in enumerate(rows):
        s, t = pairs[i]
        src[r, : len(s)] = s
        tgt_in[r, 0] = BOS
        tgt_in[r, 1 : len(t) + 1] = t
        tgt_out[r, : len(t)] = t
        tgt_out[r, len(t)] = EOS
    n_tgt = sum(len(pairs[i][1]) + 1 for i in rows)
    return src, tgt_in, tgt_out, n_tgt


class Batches:
    """The tokenized train split and its batch plans, epoch after epoch."""

    def __init__(self, text_pairs, run_dir: Path, max_tokens: int):
        from tokenizers import Tokenizer

        toks = []
        for name in ("source.tokenizer.json", "target.tokenizer.json"):
            tok = Tokenizer.from_file(str(run_dir / name))
            tok.encode_special_tokens = True  # as src/tokenizer.rs: `<s>` in text is characters
            toks.append(tok)
        self.vocab = (toks[0].get_vocab_size(), toks[1].get_vocab_size())
        src = toks[0].encode_batch([s for s, _ in text_pairs], add_special_tokens=False)
        tgt = toks[1].encode_batch([t for _, t in text_pairs], add_special_tokens=False)
        self.pairs = [(a.ids, b.ids) for a, b in zip(src, tgt)]
        self.usable = [
            i
            for i, (s, t) in enumerate(self.pairs)
            if s and t and len(s) <= MAX_SEQ_LEN and len(t) + 1 <= MAX_SEQ_LEN
        ]
        self.max_tokens = max_tokens
        first = plan(self.pairs, self.usable, max_tokens, 0)
        self.per_epoch = len(first)
        self.real_tokens = sum(len(self.pairs[i][0]) + len(self.pairs[i][1]) + 1 for i in self.usable)
        self._plans = {0: first}

    def stream(self, n: int) -> list[list[int]]:
        """The first `n` batches of training, crossing epochs as the training loop does."""
        out, epoch = [], 0
        while len(out) < n:
            if epoch not in self._plans:
                self._plans[epoch] = plan(self.pairs, self.usable, self.max_tokens, epoch)
            out.extend(self._plans[epoch][: n - len(out)])
            epoch += 1
        return out

    def step_tokens(self, steps: int, accum: int) -> list[int]:
        """Target tokens of each optimizer step."""
        stream = self.stream(steps * accum)
        return [
            sum(len(self.pairs[i][1]) + 1 for b in stream[k * accum : (k + 1) * accum] for i in b)
            for k in range(steps)
        ]


# --------------------------------------------------------------------------------------------
# Ours


def write_config(path: Path, args) -> None:
    data = args.data.resolve()
    vocab = args.vocab_size
    path.write_text(
        f"""# Written by scripts/torch_train_bench.py; the run directory comes from --run-dir.
run_dir = "unused"
source_lang = "{args.src}"
target_lang = "{args.tgt}"

[corpus]
source = "{data / f'train.{args.src}'}"
target = "{data / f'train.{args.tgt}'}"

[dev]
source = "{data / f'dev.{args.src}'}"
target = "{data / f'dev.{args.tgt}'}"

[test]
source = "{data / f'test.{args.src}'}"
target = "{data / f'test.{args.tgt}'}"

[source_tokenizer]
vocab_size = {vocab}

[target_tokenizer]
vocab_size = {vocab}

[model]
preset = "{args.preset}"

[training]
warmup_steps = {WARMUP_STEPS}
log_every = {args.log_every}
bleu_sentences = 0
""",
        encoding="utf-8",
    )


def run_ours(args, config: Path, run_dir: Path, tokenizers_from: Path | None) -> dict:
    """Runs `train` once and reads its windows from metrics.csv and its stderr."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    cmd = [
        str(args.train_bin), "--config", str(config), "--device", "cpu",
        "--run-dir", str(run_dir), "--preset", args.preset,
        "--max-steps", str(args.steps), "--max-tokens", str(args.max_tokens),
        "--accum-steps", str(args.accum_steps), "--eval-every", "100000000", "--patience", "0",
    ]
    if tokenizers_from is not None:
        for name in ("source.tokenizer.json", "target.tokenizer.json"):
            shutil.copy(tokenizers_from / name, run_dir / name)
        cmd.append("--resume")  # loads the tokenizers; no checkpoint, so step 0
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads))
    log = run_dir / "train.log"
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode
    wall = time.monotonic() - started
    text = log.read_text(encoding="utf-8", errors="replace")
    if rc != 0:
        sys.exit(f"`{' '.join(cmd)}` failed ({rc}); last lines of {log}:\n" + "\n".join(text.splitlines()[-15:]))
    with open(run_dir / "metrics.csv", newline="", encoding="utf-8") as f:
        rows = [(int(r["step"]), float(r["tokens_per_sec"]), float(r["elapsed_secs"])) for r in csv.DictReader(f)]
    m = re.search(
        r"model: (\d+) parameters .*?; (\d+) pairs in (\d+) batches, (\d+) real tokens", text
    )
    states = sorted(run_dir.glob("checkpoints/step-*/state.json"))
    target_tokens = json.loads(states[-1].read_text())["target_tokens"] if states else None
    return {
        "rows": rows,
        "params": int(m.group(1)) if m else None,
        "pairs": int(m.group(2)) if m else None,
        "batches": int(m.group(3)) if m else None,
        "real_tokens": int(m.group(4)) if m else None,
        "target_tokens": target_tokens,
        "process_wall_s": round(wall, 1),
    }


def ours_windows(result: dict, step_tokens: list[int], log_every: int) -> list[dict]:
    """One window per metrics row: its target tokens (from the batch plan, checked against the
    checkpoint) and the seconds the training loop timed, tokens / (tokens per second)."""
    windows, prev = [], 0
    for step, tps, _elapsed in result["rows"]:
        tokens = sum(step_tokens[prev:step])
        windows.append({"steps": (prev + 1, step), "tokens": tokens, "secs": tokens / tps})
        prev = step
    return windows


# --------------------------------------------------------------------------------------------
# PyTorch


def positional_encoding(n_pos: int, d: int):
    """src/reference.rs `positional_encoding`: sin at even, cos at odd features, f64 → f32."""
    import numpy as np

    pos = np.arange(n_pos, dtype=np.float64)[:, None]
    pair = (np.arange(d) // 2 * 2).astype(np.float64)
    angle = pos / np.power(10000.0, pair / d)
    pe = np.where(np.arange(d) % 2 == 0, np.sin(angle), np.cos(angle))
    return pe.astype(np.float32)


def torch_model(preset: str, src_vocab: int, tgt_vocab: int):
    import torch
    from torch import nn
    import torch.nn.functional as F

    d, d_ff, heads, layers, dropout = PRESETS[preset]

    class Embed(nn.Module):
        def __init__(self, vocab: int):
            super().__init__()
            self.embedding = nn.Embedding(vocab, d)
            nn.init.normal_(self.embedding.weight, 0.0, d**-0.5)
            self.register_buffer("pe", torch.from_numpy(positional_encoding(MAX_SEQ_LEN, d)))
            self.dropout = nn.Dropout(dropout)

        def forward(self, tokens):
            return self.dropout(self.embedding(tokens) * math.sqrt(d) + self.pe[: tokens.shape[1]])

    class TorchTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            kw = dict(
                d_model=d, nhead=heads, dim_feedforward=d_ff, dropout=dropout, activation="relu",
                layer_norm_eps=LAYER_NORM_EPS, batch_first=True, norm_first=False,
            )
            self.src_embed, self.tgt_embed = Embed(src_vocab), Embed(tgt_vocab)
            self.encoder = nn.TransformerEncoder(
                nn.TransformerEncoderLayer(**kw), layers, norm=None, enable_nested_tensor=False
            )
            self.decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), layers, norm=None)
            for name, p in self.named_parameters():
                if p.dim() == 2 and "embed" not in name:
                    nn.init.xavier_uniform_(p)

        def forward(self, src, tgt_in):
            src_pad = src == PAD
            memory = self.encoder(self.src_embed(src), src_key_padding_mask=src_pad)
            t = tgt_in.shape[1]
            causal = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
            x = self.decoder(
                self.tgt_embed(tgt_in), memory, tgt_mask=causal, tgt_is_causal=True,
                memory_key_padding_mask=src_pad,
            )
            return F.linear(x, self.tgt_embed.embedding.weight)  # tied, no bias

    return TorchTransformer()


def n_params(preset: str, src_vocab: int, tgt_vocab: int) -> int:
    """src/config.rs `ModelConfig::n_params`."""
    d, d_ff, _, layers, _ = PRESETS[preset]
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    enc = attention + ffn + 4 * d
    dec = 2 * attention + ffn + 6 * d
    return (src_vocab + tgt_vocab) * d + layers * (enc + dec)


def run_torch(args, batches: Batches) -> dict:
    import numpy as np  # noqa: F401
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    model = torch_model(args.preset, *batches.vocab)
    model.train()
    params = [p for p in model.parameters()]
    optim = torch.optim.Adam(params, lr=0.0, betas=ADAM_BETAS, eps=ADAM_EPS)
    d_model = PRESETS[args.preset][0]
    stream = [make_batch(batches.pairs, rows) for rows in batches.stream(args.steps * args.accum_steps)]
    windows, tokens = [], 0
    window_start = time.perf_counter()
    prev = 0
    for step in range(1, args.steps + 1):
        for b in range(args.accum_steps):
            src, tgt_in, tgt_out, n_tgt = stream[(step - 1) * args.accum_steps + b]
            src, tgt_in, tgt_out = map(torch.from_numpy, (src, tgt_in, tgt_out))
            logits = model(src, tgt_in)
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1),
                ignore_index=PAD, label_smoothing=LABEL_SMOOTHING,
            )
            value = loss.item()
            if not math.isfinite(value):
                sys.exit(f"torch: the loss became {value}")
            (loss / args.accum_steps).backward()
            tokens += n_tgt
        torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
        lr = LR_FACTOR * d_model**-0.5 * min(step**-0.5, step * WARMUP_STEPS**-1.5)
        for group in optim.param_groups:
            group["lr"] = lr
        optim.step()
        optim.zero_grad(set_to_none=True)
        if step % args.log_every == 0 or step == args.steps:
            now = time.perf_counter()
            windows.append({"steps": (prev + 1, step), "tokens": tokens, "secs": now - window_start})
            window_start, tokens, prev = now, 0, step
    return {"windows": windows, "params": sum(p.numel() for p in params), "last_loss": value}


# --------------------------------------------------------------------------------------------
# Main


def throughput(windows: list[dict]) -> tuple[float, int, float]:
    """Tokens/s over every window but the first (the whole run if there is only one)."""
    use = windows[1:] or windows
    tokens = sum(w["tokens"] for w in use)
    secs = sum(w["secs"] for w in use)
    return tokens / secs, tokens, secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup", action="store_true", help=f"create {VENV.relative_to(REPO)} and exit")
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=8, help="optimizer steps per run (default 8)")
    ap.add_argument("--log-every", type=int, default=2, help="steps per timing window; the first is left out (default 2)")
    ap.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per batch (default 4096)")
    ap.add_argument("--accum-steps", type=int, default=2, help="batches per optimizer step (default 2)")
    ap.add_argument("--rounds", type=int, default=2, help="ours, torch repeated this many times (default 2)")
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data" / "de-en",
                    help="folder with train/dev/test.{src,tgt} (default ../shared/data/de-en)")
    ap.add_argument("--src", default="de")
    ap.add_argument("--tgt", default="en")
    ap.add_argument("--vocab-size", type=int, default=8000, help="Unigram vocabulary per side (default 8000, as configs/de-en.toml)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both engines (default: the cores)")
    ap.add_argument("--max-load", type=float, default=1.0, help="wait until the 1-minute load is at most this (default 1.0)")
    ap.add_argument("--max-wait", type=float, default=600.0, help="seconds to wait for that (default 600)")
    ap.add_argument("--train-bin", type=Path, default=TRAIN_BIN)
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    if args.setup:
        pyvenv.setup(VENV, PACKAGES, MODULES, "torch is the CUDA build: ~5.5 GB")
        return
    pyvenv.enter(VENV, MODULES, __file__)
    import torch

    if not args.train_bin.exists():
        sys.exit(f"{args.train_bin} is missing; run `cargo build --release --features train --bin train`")
    for split in ("train", "dev", "test"):
        for lang in (args.src, args.tgt):
            if not (args.data / f"{split}.{lang}").exists():
                sys.exit(f"{args.data / f'{split}.{lang}'} is missing; --data needs train, dev and test files")
    if args.steps < 1 or args.log_every < 1 or args.accum_steps < 1 or args.rounds < 1:
        sys.exit("--steps, --log-every, --accum-steps and --rounds must be at least 1")

    work = WORK / f"{args.data.name}-{args.preset}"
    work.mkdir(parents=True, exist_ok=True)
    config = work / "config.toml"
    write_config(config, args)
    load = wait_for_quiet(args.max_load, args.max_wait)
    print(
        f"load {load['at_start']:.2f} (1 min) at start; {args.threads} threads each; "
        f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads",
        file=sys.stderr,
    )

    text_pairs = train_pairs(args.data, args.src, args.tgt)
    runs, batches, step_tokens, checks = [], None, None, {}
    for round_ in range(1, args.rounds + 1):
        for engine in ("ours", "torch"):
            load_before = round(os.getloadavg()[0], 2)
            print(f"round {round_}: {engine} ({args.preset}, {args.steps} steps) …", file=sys.stderr)
            if engine == "ours":
                run_dir = work / f"ours-{round_}"
                result = run_ours(args, config, run_dir, None if round_ == 1 else work / "ours-1")
                if batches is None:
                    batches = Batches(text_pairs, run_dir, args.max_tokens)
                    step_tokens = batches.step_tokens(args.steps, args.accum_steps)
                checks = {
                    "pairs": (result["pairs"], len(batches.usable)),
                    "batches_per_epoch": (result["batches"], batches.per_epoch),
                    "real_tokens": (result["real_tokens"], batches.real_tokens),
                    "target_tokens": (result["target_tokens"], sum(step_tokens)),
                    "params": (result["params"], n_params(args.preset, *batches.vocab)),
                }
                bad = {k: v for k, v in checks.items() if v[0] != v[1]}
                if bad:
                    sys.exit(f"our run's batches differ from the ones computed here (ours, here): {bad}")
                windows = ours_windows(result, step_tokens, args.log_every)
                extra = {"process_wall_s": result["process_wall_s"], "run_dir": str(run_dir.relative_to(REPO))}
            else:
                result = run_torch(args, batches)
                if result["params"] != n_params(args.preset, *batches.vocab):
                    sys.exit(f"torch model has {result['params']} parameters, ours {n_params(args.preset, *batches.vocab)}")
                windows = result["windows"]
                extra = {"last_loss": round(result["last_loss"], 4)}
            tps, tokens, secs = throughput(windows)
            runs.append({
                "engine": engine, "round": round_, "tokens_per_sec": round(tps, 1),
                "measured_tokens": tokens, "measured_secs": round(secs, 2),
                "load_before": load_before, "load_after": round(os.getloadavg()[0], 2),
                "windows": [{**w, "secs": round(w["secs"], 3)} for w in windows], **extra,
            })
            print(f"  {tps:.1f} target tokens/s ({tokens} tokens in {secs:.1f} s)", file=sys.stderr)

    mean = {e: sum(r["tokens_per_sec"] for r in runs if r["engine"] == e) / args.rounds for e in ("ours", "torch")}
    ratio = mean["ours"] / mean["torch"]
    measured = args.steps - args.log_every if args.steps > args.log_every else args.steps
    print(f"\nCPU training, {args.data.name}, max_tokens {args.max_tokens} × accum {args.accum_steps}, "
          f"{args.threads} threads, load {load['at_start']:.2f} at start "
          f"(tokens/s over steps {args.steps - measured + 1}–{args.steps} of {args.steps}; "
          f"load: the 1-minute load average before each run, the previous run's included)")
    print(f"{'preset':<8}{'engine':<16}{'round':>6}{'steps':>7}{'tokens/s':>11}{'ours/torch':>12}{'load':>7}")
    for r in runs:
        mate = next(x for x in runs if x["round"] == r["round"] and x["engine"] == "torch")
        cell = f"{r['tokens_per_sec'] / mate['tokens_per_sec']:.3f}" if r["engine"] == "ours" else ""
        name = "ours (burn)" if r["engine"] == "ours" else f"torch {torch.__version__.split('+')[0]}"
        print(f"{args.preset:<8}{name:<16}{r['round']:>6}{args.steps:>7}{r['tokens_per_sec']:>11.1f}{cell:>12}{r['load_before']:>7.2f}")
    print(f"{args.preset:<8}{'ours mean':<16}{'':>6}{args.steps:>7}{mean['ours']:>11.1f}{ratio:>12.3f}")
    print(f"{args.preset:<8}{'torch mean':<16}{'':>6}{args.steps:>7}{mean['torch']:>11.1f}")

    if args.json:
        report = {
            "preset": args.preset, "data": str(args.data), "src": args.src, "tgt": args.tgt,
            "vocab": list(batches.vocab), "params": n_params(args.preset, *batches.vocab),
            "max_tokens": args.max_tokens, "accum_steps": args.accum_steps, "steps": args.steps,
            "log_every": args.log_every, "threads": args.threads, "torch": torch.__version__,
            "load": load, "checks": {k: v[0] for k, v in checks.items()}, "runs": runs,
            "mean_tokens_per_sec": {k: round(v, 1) for k, v in mean.items()},
            "ratio_ours_over_torch": round(ratio, 4),
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
