#!/usr/bin/env python3
"""Live parity of the C tokenizer with Hugging Face's `tokenizers`.

Runs tok-tool (the C tokenizer) and tokenizers.Tokenizer on the same texts and
compares the ids, decode() with and without skip_special_tokens, and checks
that the streaming detokenizer gives exactly decode()'s text. Texts: every
line of parity.txt, parity.txt as one text, every line of corpus.txt and the
corpus as one text; decode also runs on random id sequences (cut characters,
special tokens). All of that for four tokenizers: the fixture itself and
three variants made from it here (GPT-2 regex via ByteLevel(use_regex=true),
ignore_merges=true, extra added tokens with lstrip/rstrip/single_word/
normalized).

Exits 1 on any mismatch, showing the first few, and when `tokenizers` is not
importable.

    parity.py --tool build/tests/tokenizer/tok-tool --fixtures tests/fixtures/tokenizer
"""
import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

SHOW = 8


def split_lines(text):
    """Lines split on \\n only, as tok-tool does; no last empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def c_text(hexstr):
    return bytes.fromhex(hexstr).decode("utf-8")


class Report:
    def __init__(self):
        self.texts = 0
        self.ids = 0
        self.decodes = 0
        self.pretoks = 0
        self.mismatches = []

    def bad(self, where, text, what):
        self.mismatches.append((where, text, what))


def run_tool(tool, *args):
    res = subprocess.run([tool, *map(str, args)], capture_output=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr.decode("utf-8", "replace"))
        raise SystemExit(f"parity.py: {tool} {' '.join(map(str, args))} failed with status "
                         f"{res.returncode}")
    return res.stdout.decode("utf-8").split("\n")[:-1], res.stderr.decode("utf-8", "replace")


def run_texts(tool, mode, tok_path, tmp, texts):
    """tok-tool MODE over texts that may hold any character (\n included)."""
    path = tmp / "texts.hex"
    path.write_text("".join(t.encode("utf-8").hex() + "\n" for t in texts))
    out, log = run_tool(tool, mode, tok_path, path, "--hex")
    if len(out) != len(texts):
        raise SystemExit(f"parity.py: tok-tool {mode} gave {len(out)} records for "
                         f"{len(texts)} texts")
    return out, log


def check_decodes(rep, hf, where, text, ids, fields):
    want = hf.decode(ids, skip_special_tokens=False)
    want_skip = hf.decode(ids, skip_special_tokens=True)
    got, got_skip, stream, stream_skip = (c_text(f) for f in fields)
    rep.decodes += 1
    if got != want:
        rep.bad(where, text, f"decode: C {got!r} HF {want!r}")
    if got_skip != want_skip:
        rep.bad(where, text, f"decode(skip_special): C {got_skip!r} HF {want_skip!r}")
    if stream != got or stream_skip != got_skip:
        rep.bad(where, text, f"stream differs from decode: {stream!r} / {stream_skip!r}")


def check_encode(rep, hf, tool, tok_path, tmp, name, texts):
    out, log = run_texts(tool, "encode", tok_path, tmp, texts)
    refs = hf.encode_batch(texts)
    for i, (text, rec, ref) in enumerate(zip(texts, out, refs)):
        where = f"{name}:{i + 1}"
        fields = rec.split("\t")
        rep.texts += 1
        if fields[0] == "ERROR":
            rep.bad(where, text, f"C refused the text: {fields[1]}")
            continue
        ids = [int(x) for x in fields[0].split()] if fields[0] else []
        rep.ids += len(ref.ids)
        if ids != ref.ids:
            k = next((j for j, (a, b) in enumerate(zip(ids, ref.ids)) if a != b),
                     min(len(ids), len(ref.ids)))
            rep.bad(where, text, f"ids differ at {k}: C {ids[max(0, k - 3):k + 5]} "
                                 f"HF {ref.ids[max(0, k - 3):k + 5]} "
                                 f"(HF tokens {ref.tokens[max(0, k - 3):k + 5]})")
        check_decodes(rep, hf, where, text, ids, fields[1:5])
    return [l.split(": ", 1)[-1] for l in log.splitlines() if "encode:" in l]


def byte_decoder():
    """GPT-2's byte-level table, character → byte."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD))
          + list(range(0xAE, 0x100)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def check_pretok(rep, hf, tool, tok_path, tmp, name, texts):
    """The pre-tokens themselves, on texts without added tokens (Hugging
    Face's pre_tokenize_str does not know about those)."""
    added = [t.content for t in hf.get_added_tokens_decoder().values()]
    texts = [t for t in texts if not any(a in t for a in added)]
    out, _ = run_texts(tool, "pretok", tok_path, tmp, texts)
    table = byte_decoder()
    for i, (text, rec) in enumerate(zip(texts, out)):
        norm = hf.normalizer.normalize_str(text) if hf.normalizer else text
        want = [bytes(table[c] for c in piece) for piece, _ in
                hf.pre_tokenizer.pre_tokenize_str(norm)]
        got = [bytes.fromhex(h) for h in rec.split(" ")] if rec else []
        rep.pretoks += 1
        if got != want:
            rep.bad(f"{name}:{i + 1}", text, f"pre-tokens: C {got[:12]} HF {want[:12]}")


FUZZ = [" ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u3000",
        "\u2028", "\u2009", "\u180e", "\u200d", "\x1c", "\x00", "a", "Z", "xy", "é", "e\u0301",
        "\u0301", "ſ", "'", "'s", "'S", "'ll", "'Ll", "'re", "'VE", "'m", "'d", "1", "42", "٣", "½",
        "Ⅻ", "!", ".", "?!", "...", "-", "_", "中", "文", "😀", "👍🏽", "<|endoftext|>",
        "<|im_end|>", "<|", "Ω", "İ", "ß", "\u1100\u1161", "\u11a8"]


def fuzz_texts(rng, n):
    return ["".join(rng.choice(FUZZ) for _ in range(rng.randint(1, 10))) for _ in range(n)]


def random_id_lines(hf, rng, n_lines):
    vocab = hf.get_vocab_size(with_added_tokens=True)
    byte_ids = []
    for tok, i in hf.get_vocab(with_added_tokens=False).items():
        if len(tok) == 1:
            byte_ids.append(i)
    lines = []
    for _ in range(n_lines):
        kind = rng.random()
        n = rng.randint(0, 24)
        if kind < 0.5:
            ids = [rng.randrange(vocab) for _ in range(n)]
        else:
            # mostly single bytes: cut and broken UTF-8 sequences
            ids = [rng.choice(byte_ids) if rng.random() < 0.8 else rng.randrange(vocab)
                   for _ in range(n)]
        lines.append(ids)
    return lines


def check_random_decode(rep, hf, tool, tok_path, name, tmp, rng):
    seqs = random_id_lines(hf, rng, 300)
    path = tmp / f"{name}-ids.txt"
    path.write_text("".join(" ".join(map(str, s)) + "\n" for s in seqs))
    out, _ = run_tool(tool, "decode", tok_path, path)
    if len(out) != len(seqs):
        rep.bad(name, "", f"tok-tool decode gave {len(out)} records for {len(seqs)}")
        return
    for i, (ids, rec) in enumerate(zip(seqs, out)):
        check_decodes(rep, hf, f"{name}-random-ids:{i + 1}", str(ids), ids, rec.split("\t"))


def make_variants(tokenizers, base, tmp):
    # (name, path, compare pre-tokens too)
    variants = [("qwen2", base, True)]
    data = json.loads(base.read_text(encoding="utf-8"))

    gpt2 = json.loads(json.dumps(data))
    gpt2["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False,
                             "trim_offsets": True, "use_regex": True}
    path = tmp / "gpt2.json"
    path.write_text(json.dumps(gpt2, ensure_ascii=False), encoding="utf-8")
    variants.append(("gpt2-regex", path, True))

    ign = json.loads(json.dumps(data))
    ign["model"]["ignore_merges"] = True
    # Whole words that no merge sequence builds: with ignore_merges they
    # come out as one token, without it BPE splits them.
    vocab = ign["model"]["vocab"]
    for word in ("Ġparity", "Ġcompares", "12345", "ĠĠĠ", "hello", "ĠDON", "Ġdog", "Ġtoken",
                 "ĠÃ©", "ðŁĺĢ", "Ġ<|"):
        if word not in vocab:
            vocab[word] = len(vocab)
    # old-style "a b" merges, the other encoding the loader reads
    ign["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                              for m in ign["model"]["merges"]]
    path = tmp / "ignore-merges.json"
    path.write_text(json.dumps(ign, ensure_ascii=False), encoding="utf-8")
    variants.append(("ignore-merges", path, False))

    from tokenizers import AddedToken
    hf = tokenizers.Tokenizer.from_file(str(base))
    hf.add_tokens([
        AddedToken("<tool>", lstrip=True, rstrip=True, normalized=False),
        AddedToken("dog", single_word=True, normalized=True),
        AddedToken("café", normalized=True),
        AddedToken("e\u0301te\u0301", normalized=True),
        AddedToken(" spaced ", normalized=False),
        AddedToken("<|endoftext|>x", normalized=False),
        AddedToken("ab", normalized=True),
    ])
    hf.add_special_tokens([AddedToken("中文", special=True, normalized=False)])
    path = tmp / "added.json"
    hf.save(str(path))
    variants.append(("added", path, False))
    return variants


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tool", required=True, help="path to tok-tool")
    ap.add_argument("--fixtures", required=True, help="tests/fixtures/tokenizer")
    args = ap.parse_args()
    try:
        import tokenizers
    except ImportError as e:
        print(f"parity.py: cannot import the Python package 'tokenizers' ({e}); the parity "
              "test needs it (pip install tokenizers)", file=sys.stderr)
        return 1

    fixtures = Path(args.fixtures)
    base = fixtures / "tokenizer.json"
    parity = split_lines((fixtures / "parity.txt").read_bytes().decode("utf-8"))
    corpus_text = (fixtures / "corpus.txt").read_bytes().decode("utf-8")
    corpus = split_lines(corpus_text)
    rng = random.Random(1234)
    # Lines never hold \n; these do: runs of three parity lines joined by \n
    # or \r\n, and short random strings of the characters the regex,
    # the normalizer and the added tokens care about.
    windows = ["\n".join(parity[i:i + 3]) for i in range(0, len(parity), 2)]
    windows += ["\r\n".join(parity[i:i + 3]) for i in range(0, len(parity), 7)]
    fuzz = fuzz_texts(rng, 3000)
    sets = [("parity", parity), ("parity-whole", ["\n".join(parity) + "\n"]),
            ("windows", windows), ("fuzz", fuzz), ("corpus", corpus),
            ("corpus-whole", [corpus_text])]
    rep = Report()
    timings = []

    with tempfile.TemporaryDirectory(prefix="dfl-parity-") as tmpdir:
        tmp = Path(tmpdir)
        for name, path, pretok in make_variants(tokenizers, base, tmp):
            hf = tokenizers.Tokenizer.from_file(str(path))
            for src, texts in sets:
                t = check_encode(rep, hf, args.tool, path, tmp, f"{name}/{src}", texts)
                if src in ("parity", "corpus") and name == "qwen2":
                    timings += [f"{src}: {x}" for x in t]
                if pretok:
                    check_pretok(rep, hf, args.tool, path, tmp, f"{name}/{src}/pretok", texts)
            check_random_decode(rep, hf, args.tool, path, name, tmp, rng)

    print(f"tokenizers {tokenizers.__version__}; C encode times: " + "; ".join(timings))
    print(f"parity: {len(parity)} parity lines; {rep.texts} texts encoded, {rep.ids} ids "
          f"compared, {rep.decodes} decodes and {rep.pretoks} pre-tokenizations compared, "
          f"{len(rep.mismatches)} mismatches")
    for where, text, what in rep.mismatches[:SHOW]:
        print(f"MISMATCH {where}: {text[:160]!r}\n    {what[:600]}")
    if len(rep.mismatches) > SHOW:
        print(f"... and {len(rep.mismatches) - SHOW} more")
    return 1 if rep.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
