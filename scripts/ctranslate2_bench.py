#!/usr/bin/env python3
"""CTranslate2 baseline for the webnmt benchmark: the same weights on CTranslate2's CPU int8 engine.

Create the virtual environment (once; `--setup` does exactly this, and skips what is there):

    python3 -m venv target/ctranslate2-venv && \
      target/ctranslate2-venv/bin/pip install ctranslate2==4.8.5 tokenizers==0.23.3 \
      numpy==2.4.6 safetensors==0.8.0

(Debian may first need `apt-get install -y python3-venv`.) Run from the repository root:

    python3 scripts/ctranslate2_bench.py --setup
    python3 scripts/ctranslate2_bench.py --model web/models/de-en \
        --src /work/shared/data/de-en/test.de --limit 100 --json OUT.json \
        [--check-greedy ours.jsonl] [--check-beam ours-beam4.jsonl]

The script re-executes itself with the venv's interpreter when the system Python lacks
ctranslate2, so plain `python3` works once the venv exists.

What it does
1. Reads a webnmt bundle (`manifest.json`, `model.safetensors`, `source.tokenizer.json`,
   `target.tokenizer.json`) and converts it into a CTranslate2 model with the spec API
   (`ctranslate2.specs.TransformerSpec`), cached under `target/ctranslate2/<bundle-name>/`
   (rebuilt when the bundle's checksums or this converter change). The bundle's int8 weights
   and per-row scales are carried over unchanged (CT2's scale is the inverse of ours: ours
   W = q * s, CT2's W = q / s'), so both engines run on the same int8 matrices.
2. Translates the first `--limit` lines one sentence at a time (max_batch_size 1) on the CPU,
   greedy and beam 4, with `inter_threads=1, intra_threads=--threads` (2), and reports
   sentences/s, target tokens/s (generated tokens, EOS excluded), p50/p95 ms per sentence
   (tokenize + translate + detokenize) and peak RSS. Warm-up (model load and one translation)
   is not timed. The conversion runs in a child process so that it does not count in the RSS.
3. `--check-greedy FILE` (output of `translate --greedy --json`, one JSON object per input
   line) counts the lines where CT2's greedy token ids equal ours token for token; each of our
   sentences (`sentences[].source`) is translated separately and their ids concatenated.
   `--check-beam FILE` does the same for beam 4 (make it with `translate --beam 4 --groups 1
   --diversity 0 --repetition-penalty 1 --json`). Both rank finished hypotheses by
   logprob / len^0.6 with len counting EOS, but CT2 (patience 1, its default) stops once
   `beam` hypotheses have finished while ours stops only when no live hypothesis can still win,
   so a few beam outputs differ; `--patience 2` made all of them agree on the first 100 de-en
   test lines with float32 compute.
   Each check also runs with float32 compute (the same int8 weights, dequantized on load):
   CT2's int8 GEMMs quantize the activations to int8 as well, which ours does not, so the
   float32 check is the one that validates the conversion.

Model mapping (see src/model/mod.rs): post-LayerNorm (`pre_norm=False`: the attention and FFN
`layer_norm`s are applied after the residual add), no final LayerNorm, embeddings scaled by
sqrt(d_model), sinusoidal positions with *interleaved* sin/cos (CT2's built-in table
concatenates sin|cos, so ours is given explicitly as `position_encodings.encodings`), ReLU FFN,
fused QKV for self-attention, query + fused KV for cross-attention, output projection tied to
the target embedding with no bias, source without EOS, target started by `<s>` and ended by
`</s>`. The maximum target length is min(2 * source tokens + 10, max_seq_len), like ours.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import resource
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pyvenv

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / "target" / "ctranslate2-venv"
CACHE_ROOT = REPO / "target" / "ctranslate2"
PACKAGES = ["ctranslate2==4.8.5", "tokenizers==0.23.3", "numpy==2.4.6", "safetensors==0.8.0"]
MODULES = ["ctranslate2", "tokenizers", "numpy", "safetensors"]
# Bump when the conversion changes, so cached models are rebuilt.
CONVERTER_VERSION = "1"
BOS, EOS = 2, 3


# --------------------------------------------------------------------------------------------
# Bundle reading


def read_safetensors(path: Path) -> dict:
    """Tensors of a safetensors file as numpy arrays (header parsed here: 8-byte LE length,
    JSON header, then the data)."""
    import numpy as np

    dtypes = {"F32": np.float32, "I8": np.int8, "F16": np.float16, "I32": np.int32, "U8": np.uint8}
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data, dtype=dtypes[info["dtype"]], count=(end - start) // np.dtype(dtypes[info["dtype"]]).itemsize, offset=base + start)
        out[name] = arr.reshape(info["shape"]).copy()
    return out


def vocabulary(tokenizer_json: Path) -> list[str]:
    """The tokenizer's pieces in id order (Unigram `model.vocab`)."""
    model = json.loads(tokenizer_json.read_text(encoding="utf-8"))["model"]
    pieces = [p for p, _ in model["vocab"]]
    assert pieces[:4] == ["<pad>", "<unk>", "<s>", "</s>"], pieces[:4]
    assert len(set(pieces)) == len(pieces), "duplicate pieces"
    assert not any(("\n" in p or "\r" in p or p == "") for p in pieces), "unsavable piece"
    return pieces


def positional_encoding(n_pos: int, d: int):
    """src/reference.rs `positional_encoding`: PE[pos, j] = sin/cos(pos / 10000^(2*(j//2)/d)),
    sin at even j, cos at odd j (interleaved), computed in f64 and stored as f32."""
    import numpy as np

    pos = np.arange(n_pos, dtype=np.float64)[:, None]
    pair = (np.arange(d) // 2 * 2).astype(np.float64)[None, :]
    angle = pos / np.power(10000.0, pair / d)
    pe = np.where(np.arange(d)[None, :] % 2 == 0, np.sin(angle), np.cos(angle))
    return pe.astype(np.float32)


# --------------------------------------------------------------------------------------------
# Conversion


def bundle_stamp(bundle: Path) -> str:
    manifest = json.loads((bundle / "manifest.json").read_text())
    h = hashlib.sha256()
    h.update(CONVERTER_VERSION.encode())
    h.update(json.dumps(manifest.get("model", {}), sort_keys=True).encode())
    for name in ("model.safetensors", "source.tokenizer.json", "target.tokenizer.json"):
        info = manifest.get("files", {}).get(name, {})
        digest = info.get("sha256")
        if digest is None:
            digest = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
        h.update(f"{name}:{digest}".encode())
    return h.hexdigest()


def convert(bundle: Path, out_dir: Path) -> dict:
    """Builds the CTranslate2 spec from the bundle and saves it to `out_dir`."""
    import numpy as np
    from ctranslate2.specs import transformer_spec

    cfg = json.loads((bundle / "manifest.json").read_text())["model"]
    t = read_safetensors(bundle / "model.safetensors")
    used = set()

    def get(name):
        used.add(name)
        return t[name]

    def qmat(path):
        """int8 matrix [out, in] and CT2's scale (W = q / scale), from ours (W = q * scale)."""
        q = get(f"{path}.weight")
        s = get(f"{path}.weight_scale").astype(np.float32)
        assert q.dtype == np.int8 and s.shape == (q.shape[0],), path
        return q, (np.float32(1.0) / s).astype(np.float32)

    def set_linear(spec, paths):
        """`spec` = the rows of `paths` stacked (fused projections keep per-row scales)."""
        qs, ss, bs = zip(*[(*qmat(p), get(f"{p}.bias").astype(np.float32)) for p in paths])
        spec.weight = np.ascontiguousarray(np.concatenate(qs, axis=0))
        spec.weight_scale = np.concatenate(ss)
        spec.bias = np.concatenate(bs)

    def set_norm(spec, path):
        spec.gamma = get(f"{path}.gamma").astype(np.float32)
        spec.beta = get(f"{path}.beta").astype(np.float32)

    heads = cfg["n_heads"]
    d = cfg["d_model"]
    encoder = transformer_spec.TransformerEncoderSpec(cfg["n_enc_layers"], heads, pre_norm=False)
    decoder = transformer_spec.TransformerDecoderSpec(cfg["n_dec_layers"], heads, pre_norm=False)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    # Positions: enough rows for any target ours allows (min(2*src+10, max_seq_len)) and any
    # source chunk (<= max_seq_len); CT2 fails past the table, so leave headroom.
    n_pos = max(2 * cfg["max_seq_len"] + 10, 512)
    pe = positional_encoding(n_pos, d)

    emb_q, emb_s = qmat("encoder.embed.embedding")
    encoder.embeddings[0].weight = emb_q
    encoder.embeddings[0].weight_scale = emb_s
    encoder.scale_embeddings = True
    encoder.position_encodings.encodings = pe
    for l, layer in enumerate(encoder.layer):
        p = f"encoder.layers.{l}"
        a = f"{p}.self_attn"
        set_linear(layer.self_attention.linear[0], [f"{a}.query", f"{a}.key", f"{a}.value"])
        set_linear(layer.self_attention.linear[1], [f"{a}.output"])
        set_norm(layer.self_attention.layer_norm, f"{p}.norm1")
        set_linear(layer.ffn.linear_0, [f"{p}.ffn.linear1"])
        set_linear(layer.ffn.linear_1, [f"{p}.ffn.linear2"])
        set_norm(layer.ffn.layer_norm, f"{p}.norm2")

    dq, ds = qmat("decoder.embed.embedding")
    decoder.embeddings.weight = dq
    decoder.embeddings.weight_scale = ds
    decoder.scale_embeddings = True
    decoder.position_encodings.encodings = pe.copy()
    # Tied output projection, no bias (optimize() aliases it to the embedding).
    decoder.projection.weight = dq.copy()
    decoder.projection.weight_scale = ds.copy()
    for l, layer in enumerate(decoder.layer):
        p = f"decoder.layers.{l}"
        a = f"{p}.self_attn"
        c = f"{p}.cross_attn"
        set_linear(layer.self_attention.linear[0], [f"{a}.query", f"{a}.key", f"{a}.value"])
        set_linear(layer.self_attention.linear[1], [f"{a}.output"])
        set_norm(layer.self_attention.layer_norm, f"{p}.norm1")
        set_linear(layer.attention.linear[0], [f"{c}.query"])
        set_linear(layer.attention.linear[1], [f"{c}.key", f"{c}.value"])
        set_linear(layer.attention.linear[2], [f"{c}.output"])
        set_norm(layer.attention.layer_norm, f"{p}.norm2")
        set_linear(layer.ffn.linear_0, [f"{p}.ffn.linear1"])
        set_linear(layer.ffn.linear_1, [f"{p}.ffn.linear2"])
        set_norm(layer.ffn.layer_norm, f"{p}.norm3")

    unused = sorted(set(t) - used)
    if unused:
        raise SystemExit(f"bundle tensors not mapped to the CTranslate2 spec: {unused}")

    src_vocab = vocabulary(bundle / "source.tokenizer.json")
    tgt_vocab = vocabulary(bundle / "target.tokenizer.json")
    assert len(src_vocab) == cfg["src_vocab_size"] and len(tgt_vocab) == cfg["tgt_vocab_size"]
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token = "<unk>"
    spec.config.bos_token = "<s>"
    spec.config.eos_token = "</s>"
    spec.config.decoder_start_token = "<s>"
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = float(cfg["layer_norm_eps"])

    spec.validate()
    # The weights are int8 already: no requantization (quantization=None keeps them and their
    # scales as they are; "int8" would requantize the int8 values as if they were floats).
    # optimize() still aliases the tied projection to the target embedding.
    spec.optimize(quantization=None)
    tmp = out_dir.with_name(out_dir.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    spec.save(str(tmp))
    return {"positions": n_pos, "tensors": len(t)}


def converted_model(bundle: Path, force: bool = False) -> Path:
    """The cached CT2 model of `bundle`, converted (in a child process) when missing or stale."""
    out = CACHE_ROOT / bundle.resolve().name
    stamp = bundle_stamp(bundle)
    stamp_file = out / "webnmt-stamp.txt"
    if not force and stamp_file.exists() and stamp_file.read_text().strip() == stamp:
        return out
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--convert-only", "--model", str(bundle)],
        check=True,
    )
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    stamp_file.write_text(stamp + "\n")
    print(f"converted {bundle} -> {out} in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


# --------------------------------------------------------------------------------------------
# Benchmark


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class Engine:
    def __init__(
        self, bundle: Path, model_dir: Path, compute_type: str, threads: int, device: str = "cpu"
    ):
        import ctranslate2
        import tokenizers

        self.cfg = json.loads((bundle / "manifest.json").read_text())["model"]
        self.src_tok = tokenizers.Tokenizer.from_file(str(bundle / "source.tokenizer.json"))
        self.tgt_tok = tokenizers.Tokenizer.from_file(str(bundle / "target.tokenizer.json"))
        self.src_vocab = vocabulary(bundle / "source.tokenizer.json")
        self.tgt_index = {p: i for i, p in enumerate(vocabulary(bundle / "target.tokenizer.json"))}
        self.translator = ctranslate2.Translator(
            str(model_dir),
            device=device,
            compute_type=compute_type,
            inter_threads=1,
            intra_threads=threads,
        )

    def source_chunks(self, text: str) -> list[list[str]]:
        """Source pieces without special tokens, in chunks of at most max_seq_len (as ours)."""
        ids = self.src_tok.encode(text, add_special_tokens=False).ids
        pieces = [self.src_vocab[i] for i in ids]
        n = self.cfg["max_seq_len"]
        return [pieces[i : i + n] for i in range(0, len(pieces), n)]

    def translate_ids(
        self, text: str, beam: int, length_penalty: float, patience: float = 1.0
    ) -> list[int]:
        """Target token ids (no BOS/EOS) of `text`, its chunks translated one by one."""
        out: list[int] = []
        for chunk in self.source_chunks(text):
            max_len = min(2 * len(chunk) + 10, self.cfg["max_seq_len"])
            r = self.translator.translate_batch(
                [chunk],
                max_batch_size=1,
                beam_size=beam,
                length_penalty=length_penalty,
                patience=patience,
                repetition_penalty=1.0,
                max_decoding_length=max_len,
                num_hypotheses=1,
            )[0]
            out.extend(self.tgt_index[p] for p in r.hypotheses[0])
        return out


def bench(
    engine: Engine, lines: list[str], beam: int, length_penalty: float, patience: float, repeat: int
) -> dict:
    """Times the lines one by one; with `repeat` > 1 the fastest pass is reported (the machine
    is shared), the others' totals are kept in `all_total_s`."""
    engine.translate_ids(lines[0] if lines else "Hallo.", beam, length_penalty, patience)  # warm-up
    passes = []
    for _ in range(max(1, repeat)):
        times, tokens, outputs = [], 0, []
        t_all = time.perf_counter()
        for line in lines:
            t0 = time.perf_counter()
            ids = engine.translate_ids(line, beam, length_penalty, patience)
            text = engine.tgt_tok.decode(ids, skip_special_tokens=True)
            times.append((time.perf_counter() - t0) * 1000.0)
            tokens += len(ids)
            outputs.append({"tokens": ids, "text": text})
        passes.append((time.perf_counter() - t_all, times, tokens, outputs))
    total, times, tokens, outputs = min(passes, key=lambda p: p[0])
    return {
        "beam": beam,
        "length_penalty": length_penalty,
        "patience": patience,
        "passes": len(passes),
        "all_total_s": [p[0] for p in passes],
        "sentences": len(lines),
        "target_tokens": tokens,
        "total_s": total,
        "sentences_per_s": len(lines) / total if total else float("nan"),
        "target_tokens_per_s": tokens / total if total else float("nan"),
        "p50_ms": percentile(times, 0.50),
        "p95_ms": percentile(times, 0.95),
        "mean_ms": sum(times) / len(times) if times else float("nan"),
        "peak_rss_mib": peak_rss_mib(),
        "outputs": outputs,
    }


def read_ours(path: Path) -> list[list[tuple[str, list[int]]]]:
    """Per line of `translate --json` output: (sentence source, best hypothesis ids)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        rows.append(
            [
                (s["source"], list(s["hypotheses"][0]["tokens"]) if s["hypotheses"] else [])
                for s in obj.get("sentences", [])
            ]
        )
    return rows


def check(
    engine: Engine, ours_path: Path, beam: int, length_penalty: float, patience: float, limit: int
) -> dict:
    ours = read_ours(ours_path)[:limit]
    matched, mismatches = 0, []
    for i, sentences in enumerate(ours):
        theirs: list[int] = []
        want: list[int] = []
        for source, ids in sentences:
            theirs.extend(engine.translate_ids(source, beam, length_penalty, patience))
            want.extend(ids)
        if theirs == want:
            matched += 1
        else:
            common = next((k for k, (a, b) in enumerate(zip(theirs, want)) if a != b), min(len(theirs), len(want)))
            mismatches.append({"line": i, "ours": want, "ctranslate2": theirs, "first_diff": common})
    return {"lines": len(ours), "matched": matched, "mismatches": mismatches}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--setup", action="store_true", help=f"create {VENV} and install the packages")
    ap.add_argument("--model", type=Path, help="webnmt bundle directory, e.g. web/models/de-en")
    ap.add_argument("--src", type=Path, help="source text, one sentence per line")
    ap.add_argument("--limit", type=int, default=100, help="first N lines of --src [100]")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--check-greedy", type=Path, help="our `translate --greedy --json` output")
    ap.add_argument("--check-beam", type=Path, help="our beam-4 (1 group, no penalties) output")
    ap.add_argument("--beams", default="1,4", help="beam sizes to time [1,4]")
    ap.add_argument("--length-penalty", type=float, default=0.6, help="α for beam > 1 [0.6]")
    ap.add_argument(
        "--patience",
        type=float,
        default=1.0,
        help="CT2 beam patience [1, CT2's default: stop once `beam` hypotheses finished; "
        "2 matched our beam-4 output on 100 de-en test lines]",
    )
    ap.add_argument("--repeat", type=int, default=1, help="timed passes per run, fastest kept [1]")
    ap.add_argument("--threads", type=int, default=2, help="CT2 intra_threads [2]")
    ap.add_argument("--compute-type", default="int8", help="CT2 compute type [int8]")
    ap.add_argument(
        "--device", default="cpu", choices=["cpu", "cuda"], help="CT2 device [cpu]; cuda on a GPU"
    )
    ap.add_argument("--reconvert", action="store_true", help="ignore the cached conversion")
    ap.add_argument("--convert-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.setup:
        pyvenv.setup(VENV, PACKAGES, MODULES)
        if not args.model:
            return
    pyvenv.enter(VENV, MODULES, __file__)
    if not args.model:
        ap.error("--model is required")
    bundle = args.model

    if args.convert_only:
        out = CACHE_ROOT / bundle.resolve().name
        info = convert(bundle, out)
        print(f"spec built: {info}", file=sys.stderr)
        return

    import ctranslate2

    model_dir = converted_model(bundle, force=args.reconvert)
    if not args.src:
        print(model_dir)
        return
    with open(args.src, encoding="utf-8") as f:
        lines = [l.rstrip("\n") for _, l in zip(range(args.limit), f)]
    lines = [l for l in lines if l.strip()]

    rss_before = peak_rss_mib()
    engine = Engine(bundle, model_dir, args.compute_type, args.threads, args.device)
    results = {
        "engine": "ctranslate2",
        "ctranslate2_version": ctranslate2.__version__,
        "model": str(bundle),
        "converted": str(model_dir),
        "src": str(args.src),
        "device": args.device,
        "compute_type": args.compute_type,
        "inter_threads": 1,
        "intra_threads": args.threads,
        "length_penalty": args.length_penalty,
        "patience": args.patience,
        "peak_rss_mib_before_model": rss_before,
        "runs": {},
    }
    for beam in [int(b) for b in args.beams.split(",") if b]:
        lp = args.length_penalty if beam > 1 else 1.0
        results["runs"][f"beam{beam}"] = bench(engine, lines, beam, lp, args.patience, args.repeat)

    # Token-for-token checks against our engine, with the benchmarked compute type and, to
    # separate conversion errors from int8 activation rounding, with float32 compute (CT2
    # dequantizes the same int8 weights on load; its int8 GEMMs also quantize activations).
    checks = {}
    todo = [(n, f, b, lp) for n, f, b, lp in (
        ("greedy", args.check_greedy, 1, 1.0),
        ("beam4", args.check_beam, 4, args.length_penalty),
    ) if f]
    for name, path, beam, lp in todo:
        checks[name] = check(engine, path, beam, lp, args.patience, args.limit)
    if todo and args.compute_type != "float32":
        f32 = Engine(bundle, model_dir, "float32", args.threads, args.device)
        for name, path, beam, lp in todo:
            checks[f"{name}_float32"] = check(f32, path, beam, lp, args.patience, args.limit)
        del f32
    results["checks"] = checks
    results["peak_rss_mib"] = peak_rss_mib()

    print(f"CTranslate2 {ctranslate2.__version__} on {bundle} ({args.compute_type}, {args.device}, "
          f"{args.threads} threads), {len(lines)} sentences from {args.src}")
    print(f"{'run':<8}{'sent/s':>9}{'tok/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'RSS MiB':>9}")
    for name, r in results["runs"].items():
        print(f"{name:<8}{r['sentences_per_s']:>9.1f}{r['target_tokens_per_s']:>9.0f}"
              f"{r['p50_ms']:>9.2f}{r['p95_ms']:>9.2f}{r['peak_rss_mib']:>9.0f}")
    for name, c in checks.items():
        print(f"check {name}: {c['matched']}/{c['lines']} lines match ours token for token")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
