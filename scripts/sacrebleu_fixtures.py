#!/usr/bin/env python3
"""Regenerate the sacreBLEU fixtures in tests/fixtures/sacrebleu/.

The Rust module `webnmt::eval` must agree with sacreBLEU; its test
(`eval::tests::sacrebleu_fixtures`) compares it against the figures this script
wrote into `tests/fixtures/sacrebleu/expected.json`. Those figures are committed:
this script is run by hand, once, when the fixtures change. It never runs in CI
and the Rust tests never call Python.

Usage, from the repository root:

    python3 -m venv /tmp/sacrebleu-venv
    /tmp/sacrebleu-venv/bin/pip install sacrebleu==2.6.0
    /tmp/sacrebleu-venv/bin/python scripts/sacrebleu_fixtures.py          # expected.json only
    /tmp/sacrebleu-venv/bin/python scripts/sacrebleu_fixtures.py --texts  # texts, then expected.json

`--texts` rebuilds the hypothesis/reference text files: references are lines of
`../shared/data/{ko-en,de-en}/test.en` plus lines written for these fixtures (below),
hypotheses are deterministic perturbations of them (`perturb`). Without `--texts`
the committed text files are read as they are.

Files are read as UTF-8, split on '\n' only (each file ends with one '\n'), exactly
as the Rust test reads them.
"""

import argparse
import json
import os
import re
import sys
import unicodedata
from pathlib import Path

PINNED_VERSION = "2.6.0"

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "sacrebleu"
SHARED_DATA = ROOT.parent / "shared" / "data"

# Lines written for the news fixture: URLs, e-mail, entities, digit groups, decimals,
# hyphens, quotes, sacreBLEU's `<skipped>` marker.
NEWS_EXTRA = [
    "Visit https://www.example.com/news/2024/05/01/story.html?id=42&lang=en for the full report.",
    "E-mail press@example.org or call +1 (555) 010-9999 before 5:30 p.m. on Friday.",
    "The company's shares rose 3.5% to $1,234.56 -- a 52-week high -- in New York.",
    '"We\'re not done yet," she said, adding: "the well-known re-election campaign starts now."',
    "Temperatures ranged from -5 to 12 degrees, i.e. colder than the 1990-2000 average.",
    "The U.N. report (published 12/03/2023) cites &quot;serious concerns&quot; &amp; calls for action.",
    "Prices: apples 1.5kg for 2,50 euros; pears 3,000 won each; total ~10,000.",
    "It's the state-of-the-art, 24/7 service... or so they say!",
    "Section 4.2.1 (see p. 17) lists <skipped> items that were left out.",
    "Stocks fell 0.23 percent, to 1,182.17 -- the lowest since 1998.",
]

# Lines written for the Unicode fixture. Python's str.split() whitespace includes
# U+001C..U+001F, which Rust's char::is_whitespace does not; U+200B is whitespace
# for neither.
UNICODE_LINES = [
    "Der Zürcher Bäcker verkauft 1.000 Brötchen für 2,50 € pro Stück.",
    "Le café « Chez Zoé » ouvre à 7 h 30 — même le dimanche !",
    "¿Dónde está la estación? ¡Está aquí, señor!",
    "“Smart quotes” and ‘single ones’ — plus an ellipsis…",
    "東京の天気は晴れです。気温は２５度。",
    "北京市今天下雨，气温15℃。",
    "서울의 인구는 약 1,000만 명이다.",
    "Naïve coöperation in façade design — déjà vu.",
    "Emoji 🙂 and symbols ★ ✓ → ← ≈ ≠ ± ×.",
    "Non-breaking\u00a0space and ideographic\u3000space and thin\u2009space.",
    "Zero\u200bwidth space stays inside a word.",
    "Combining accents: e\u0301te\u0301 versus été.",
    "Mixed: Korean 한국어, Japanese 日本語, Chinese 中文, Greek Ελληνικά, Russian русский.",
    "Ärger über Öl — Straße, Maß und Fuß.",
    "Arabic-Indic digits ٣٫٥ and Devanagari digits १२३ are not ASCII.",
    "Full-width ＡＢＣ １２３ and half-width ABC 123.",
    "The price was ¥1,200 (≈ $8.50), wasn't it?",
    "Łódź, Kraków, and Gdańsk are Polish cities.",
    "İstanbul’da hava güzel; çay içelim mi?",
    "Tab\tseparated\twords and trailing spaces   ",
    "« Guillemets » et ‹ chevrons › — « imbriqués ».",
    "Vietnamese: Tiếng Việt có nhiều dấu.",
    "Ellipsis... vs … and dashes - – — ‒.",
    "Hebrew שלום and Thai สวัสดี in one line.",
    "Unit separator\x1fis whitespace for Python, form\x0cfeed too.",
    "",
]

SHORT_REFS = [
    "Yes.", "No way!", "Thank you.", "Good morning", "See you", "Hello, world",
    "OK", "Stop!", "Why not?", "3.14", "I agree.", "", "Go home", "It works",
    "Well done", "Come in", "Sit down!", "Help!", "Wait here", "Be quiet",
    "Of course", "Not today", "Let's go!", "Bye.",
]
SHORT_HYPS = [
    "Yes", "No way.", "Thanks.", "Good morning", "See ya", "Hello world",
    "Okay", "Stop!", "Why?", "3.14", "I agree!", "", "Go home", "It runs",
    "Well done!", "Enter", "Sit!", "Help me", "Wait", "Quiet",
    "Of course.", "", "Let us go", "Bye",
]

# Tricky strings for the 13a tokenizer itself (Tokenizer13a()(s), no rstrip).
TOKENIZER_CASES = [
    "Hello, world! It's 3.14 or 1,000,000 -- e-mail me at foo@bar.com.",
    "URL: https://example.com/path?q=1&x=2#frag",
    "&quot;quoted&quot; &amp; &lt;tag&gt; &amp;quot; &AMP;",
    "<skipped> text <skipped>",
    "line-\nbreak and\nnewline",
    "a.. b... c,, 1.2.3 1,2,3 ,5 .5 5. 5, x.y",
    "10-20 a-b 3-4-5 -7 x-1 1--2",
    "“Unicode” ‘quotes’ — dash… naïve café 東京。中文，标点！",
    "tab\tand\u00a0nbsp\u3000ideographic\x1cfs\u200bzwsp",
    "$5.00 (approx.) [note] {brace} ~tilde ^caret _under `back` |pipe| \\slash",
    "U.S.A. Mr. Smith's 9.5% vs. 10.% and 'single'",
    "  spaced   out  ",
    "",
    "...",
    ",",
    "1.a a.1 1,a a,1",
    "٣.٥ and １，０００",
    "trailing-\n",
    "x=1;y=2:z<3>w@v?u!t\"s#r$q%p&o(n)m*l+k",
]


def perturb(line: str, i: int) -> str:
    """A deterministic, rule-based corruption of `line`, chosen by the line index."""
    words = line.split(" ")
    kind = i % 7
    if kind == 0:
        return line
    if kind == 1 and len(words) > 3:
        del words[(i * 5) % len(words)]
    elif kind == 2 and len(words) > 3:
        j = (i * 3) % (len(words) - 1)
        words[j], words[j + 1] = words[j + 1], words[j]
    elif kind == 3:
        if re.search(r"[0-9]", line):
            return re.sub(r"[0-9]", lambda m: str((int(m.group()) + 1) % 10), line, count=1)
        words[0] = words[0].lower()
    elif kind == 4:
        j = (i * 11) % len(words)
        words[j:j] = [words[j], words[j]]
    elif kind == 5:
        out, opening = [], True
        for ch in line.rstrip("."):
            if ch == '"':
                out.append("“" if opening else "”")
                opening = not opening
            else:
                out.append(ch)
        return "".join(out)
    elif kind == 6:
        words = words[: max(1, (2 * len(words)) // 3)]
        words[-1] = "thing"
    return " ".join(words)


def strip_accents(line: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", line) if not unicodedata.combining(c))


def to_fullwidth(line: str) -> str:
    """Maps printable ASCII to the full-width forms: no character in common with ASCII."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in line)


def read_lines(path: Path) -> list:
    text = path.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        sys.exit(f"{path} does not end with a newline; rebuild it with --texts")
    return text[:-1].split("\n")


def write_lines(path: Path, lines: list) -> None:
    for line in lines:
        assert "\n" not in line and "\r" not in line, line
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8", newline="\n")


def build_texts() -> None:
    ko = read_lines(SHARED_DATA / "ko-en" / "test.en")
    de = read_lines(SHARED_DATA / "de-en" / "test.en")
    FIXTURES.mkdir(parents=True, exist_ok=True)

    news_ref = ko[0:40] + NEWS_EXTRA
    write_lines(FIXTURES / "news.ref", news_ref)
    # Two rounds of corruption, so most lines differ in more than one place.
    news_hyp = [perturb(perturb(r, i), i // 2 + 5) for i, r in enumerate(news_ref)]
    write_lines(FIXTURES / "news.hyp", news_hyp)

    uni_ref = UNICODE_LINES + de[0:20]
    uni_hyp = []
    for i, r in enumerate(uni_ref):
        if i % 9 == 4:
            uni_hyp.append("")  # an empty hypothesis
        elif r == "":
            uni_hyp.append("Something appeared.")  # against an empty reference
        elif i % 5 == 1:
            uni_hyp.append(strip_accents(perturb(r, i)))
        else:
            uni_hyp.append(perturb(r, i))
    write_lines(FIXTURES / "unicode.ref", uni_ref)
    write_lines(FIXTURES / "unicode.hyp", uni_hyp)

    perfect = de[20:45]
    write_lines(FIXTURES / "perfect.ref", perfect)
    write_lines(FIXTURES / "perfect.hyp", perfect)

    disjoint = [line for line in de[45:90] if line.isascii()][:25]
    write_lines(FIXTURES / "disjoint.ref", disjoint)
    write_lines(FIXTURES / "disjoint.hyp", [to_fullwidth(r) for r in disjoint])

    write_lines(FIXTURES / "short.ref", SHORT_REFS)
    write_lines(FIXTURES / "short.hyp", SHORT_HYPS)

    rev = de[90:115]
    write_lines(FIXTURES / "reversed.ref", rev)
    write_lines(FIXTURES / "reversed.hyp", [" ".join(reversed(r.split(" "))) for r in rev])

    # A filler word between all words: unigrams match, no higher n-gram does, so
    # BLEU's exponential smoothing decides orders 2 to 4.
    inter = de[115:140]
    write_lines(FIXTURES / "interleaved.ref", inter)
    write_lines(FIXTURES / "interleaved.hyp", [" zz ".join(r.split(" ")) for r in inter])

    multi = ko[40:70]
    write_lines(FIXTURES / "multiref.ref", multi)
    write_lines(FIXTURES / "multiref.ref2", [perturb(r, i + 3) for i, r in enumerate(multi)])
    write_lines(FIXTURES / "multiref.hyp", [perturb(r, i + 1) for i, r in enumerate(multi)])


# name, hypothesis file, reference files
PAIRS = [
    ("news", "news.hyp", ["news.ref"]),
    ("unicode", "unicode.hyp", ["unicode.ref"]),
    ("perfect", "perfect.hyp", ["perfect.ref"]),
    ("disjoint", "disjoint.hyp", ["disjoint.ref"]),
    ("short", "short.hyp", ["short.ref"]),
    ("reversed", "reversed.hyp", ["reversed.ref"]),
    ("interleaved", "interleaved.hyp", ["interleaved.ref"]),
    ("multiref", "multiref.hyp", ["multiref.ref", "multiref.ref2"]),
]


def compute_expected() -> dict:
    from sacrebleu.metrics import BLEU, CHRF
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    pairs = []
    for name, hyp_file, ref_files in PAIRS:
        hyps = read_lines(FIXTURES / hyp_file)
        refs = [read_lines(FIXTURES / f) for f in ref_files]
        for f, r in zip(ref_files, refs):
            assert len(r) == len(hyps), f"{f}: {len(r)} lines, {hyp_file}: {len(hyps)}"
        bleu = BLEU()
        b = bleu.corpus_score(hyps, refs)
        chrf = CHRF()
        c = chrf.corpus_score(hyps, refs)
        pairs.append({
            "name": name,
            "hyp": hyp_file,
            "refs": ref_files,
            "lines": len(hyps),
            "bleu": {
                "score": b.score,
                "counts": list(b.counts),
                "totals": list(b.totals),
                "precisions": list(b.precisions),
                "bp": b.bp,
                "ratio": b.ratio,
                "sys_len": b.sys_len,
                "ref_len": b.ref_len,
                "signature": str(bleu.get_signature()),
                "formatted": str(b),
            },
            "chrf": {
                "score": c.score,
                "signature": str(chrf.get_signature()),
                "formatted": str(c),
            },
        })

    tok = Tokenizer13a()
    return {
        "generator": "scripts/sacrebleu_fixtures.py",
        "sacrebleu_version": PINNED_VERSION,
        "pairs": pairs,
        "tokenize_13a": [{"input": s, "output": tok(s)} for s in TOKENIZER_CASES],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", action="store_true",
                        help="also rebuild the text files from ../shared/data")
    args = parser.parse_args()

    if os.environ.get("CI"):
        sys.exit("sacrebleu_fixtures.py regenerates committed fixtures by hand; it never runs in CI")
    try:
        import sacrebleu
    except ImportError:
        sys.exit(f"sacrebleu is not installed: pip install sacrebleu=={PINNED_VERSION}")
    if sacrebleu.__version__ != PINNED_VERSION:
        sys.exit(f"sacrebleu {sacrebleu.__version__} found; the fixtures are pinned to "
                 f"{PINNED_VERSION}: pip install sacrebleu=={PINNED_VERSION}")

    if args.texts:
        build_texts()
    expected = compute_expected()
    out = FIXTURES / "expected.json"
    out.write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for p in expected["pairs"]:
        print(f"{p['name']:11s} {p['bleu']['formatted']}  {p['chrf']['formatted']}")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
