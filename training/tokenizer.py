#!/usr/bin/env python3
"""The tokenizer and the token arrays that travel to the GPU machine.

Runs on the CPU with Hugging Face `tokenizers` (no torch):

1. trains a byte-level BPE of 8192 ids on the TRAIN split only, built the way
   Qwen2/Qwen3 tokenizers are and as our C tokenizer reads them (NFC; Split
   on the Qwen2 regex, isolated; ByteLevel without its own regex; ByteLevel
   decoder), special tokens <|endoftext|> = 0 and <|mask|> = 1 (only these
   two: the end of a document / eos, and the drafter's mask token);
2. encodes both splits into uint16 streams, each document preceded by
   <|endoftext|> and the stream closed by one: [0, doc1…, 0, doc2…, 0];
3. samples the prompts the target's greedy continuations start from, each
   inside one document of its split (a quarter at the document's start);
   the train prompts are drawn package by package (corpus.py's manifest says
   which Debian package each document comes from), each package's share in
   proportion to the square root of its tokens, so the four third-party
   packages (a quarter of the text) get about half of the prompts and the
   drafter learns to draft code that is not the standard library's;
4. optionally (--check-c TOOL) encodes documents with our C tokenizer
   (build/tests/tokenizer/tok-tool) and requires identical ids.

Outputs (under --data, default training/data):
    tokenizer.json                 the tokenizer (ships in models/<name>/)
    tokens/train.u16.xz            xz of the raw little-endian uint16 stream
    tokens/heldout.u16.xz
    tokens/prompts.npz             train [N, P] and heldout [M, P] uint16,
                                   with their stream offsets and train_package
                                   (index into meta.json's "packages")
    tokens/meta.json               counts, seeds, sha256 of every array

    python3 training/tokenizer.py [--check-c build/tests/tokenizer/tok-tool]
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

try:
    from tokenizers import (Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, trainers)
except ImportError:
    sys.exit("tokenizer.py needs the Hugging Face 'tokenizers' package")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import write_xz  # noqa: E402
from corpus import document_packages, read_split  # noqa: E402

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = ["<|endoftext|>", "<|mask|>"]
EOT, MASK = 0, 1
VOCAB_SIZE = 8192


def build(docs, vocab_size):
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    # whole documents, so pre-tokens that span lines ("{\n", "\n\t\t") are seen as they are
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    for i, s in enumerate(SPECIAL):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    assert tok.get_vocab_size() == vocab_size, tok.get_vocab_size()
    return tok


def encode_docs(tok, docs):
    return [e.ids for e in tok.encode_batch(docs, add_special_tokens=False)]


def stream(ids_list):
    """[0, doc1…, 0, doc2…, 0] as uint16, and each document's first token offset."""
    n = sum(len(x) + 1 for x in ids_list) + 1
    out = np.empty(n, np.uint16)
    starts = np.empty(len(ids_list), np.int64)
    p = 0
    for i, ids in enumerate(ids_list):
        out[p] = EOT
        p += 1
        starts[i] = p
        out[p:p + len(ids)] = ids
        p += len(ids)
    out[p] = EOT
    assert p + 1 == n
    return out, starts


def sample_prompts(rng, ids_list, starts, n, plen, doc_start_share=0.25):
    """n prompt windows of plen tokens, each inside one document (no <|endoftext|>)."""
    lens = np.array([len(x) for x in ids_list])
    ok = np.nonzero(lens >= plen)[0]
    weights = (lens[ok] - plen + 1).astype(np.float64)
    docs = rng.choice(ok, size=n, p=weights / weights.sum())
    at_start = rng.random(n) < doc_start_share
    off = np.where(at_start, 0, (rng.random(n) * (lens[docs] - plen + 1)).astype(np.int64))
    return starts[docs] + off


def sample_by_package(rng, ids_list, starts, packages, n, plen):
    """n prompt offsets: each package's share ∝ sqrt(its tokens), sampled inside it as
    sample_prompts does. -> (offsets in a random order, package index of each, names)."""
    names = sorted(set(packages), key=packages.index)
    pk = np.array([names.index(p) for p in packages])
    tokens = np.array([sum(len(ids_list[i]) for i in np.nonzero(pk == k)[0]) for k in range(len(names))],
                      np.float64)
    share = np.sqrt(tokens) / np.sqrt(tokens).sum()
    counts = np.floor(share * n).astype(np.int64)
    counts[np.argmax(share)] += n - counts.sum()
    offs, labels = [], []
    for k, c in enumerate(counts):
        docs = np.nonzero(pk == k)[0]
        o = sample_prompts(rng, [ids_list[i] for i in docs], starts[docs], int(c), plen)
        offs.append(o)
        labels.append(np.full(len(o), k, np.int64))
    offs, labels = np.concatenate(offs), np.concatenate(labels)
    order = rng.permutation(n)   # the short-context cut (the last quarter) must not pick a package
    return offs[order], labels[order], names


def check_c(tool, tok_path, tok, docs, max_docs, rng):
    """Our C tokenizer must give the very same ids (whole documents, hex-passed)."""
    pick = docs if len(docs) <= max_docs else [docs[i] for i in
                                               sorted(rng.choice(len(docs), max_docs, replace=False))]
    want = encode_docs(tok, pick)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "docs.hex")
        with open(path, "w") as f:
            for d in pick:
                f.write(d.encode("utf-8").hex() + "\n")
        res = subprocess.run([tool, "encode", tok_path, path, "--hex"], capture_output=True)
    if res.returncode != 0:
        sys.exit(f"tok-tool failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
    lines = res.stdout.decode().split("\n")[:-1]
    assert len(lines) == len(pick), (len(lines), len(pick))
    bad = 0
    for i, (line, w) in enumerate(zip(lines, want)):
        field = line.split("\t")[0]
        got = [int(x) for x in field.split()] if field else []
        if line.startswith("ERROR") or got != w:
            bad += 1
            if bad <= 3:
                k = next((j for j, (a, b) in enumerate(zip(got, w)) if a != b), min(len(got), len(w)))
                print(f"  mismatch in document {i} at token {k}: C {got[k:k + 8]} HF {w[k:k + 8]}")
    ntok = sum(len(w) for w in want)
    print(f"C tokenizer parity: {len(pick) - bad}/{len(pick)} documents identical ({ntok} tokens)")
    return bad == 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--vocab", type=int, default=VOCAB_SIZE)
    ap.add_argument("--prompts", type=int, default=32768, help="train prompts")
    ap.add_argument("--heldout-prompts", type=int, default=1024)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--seed", type=int, default=20261203)
    ap.add_argument("--check-c", metavar="TOK_TOOL", help="compare ids with the C tokenizer")
    ap.add_argument("--check-docs", type=int, default=1500, help="train documents checked (all held-out ones are)")
    ap.add_argument("--reuse", action="store_true", help="keep an existing tokenizer.json")
    a = ap.parse_args()

    corpus = os.path.join(a.data, "corpus")
    train_docs = read_split(os.path.join(corpus, "train.txt.xz"))
    held_docs = read_split(os.path.join(corpus, "heldout.txt.xz"))
    tok_path = os.path.join(a.data, "tokenizer.json")
    if a.reuse and os.path.exists(tok_path):
        tok = Tokenizer.from_file(tok_path)
    else:
        tok = build(train_docs, a.vocab)
        tok.save(tok_path, pretty=True)
    print(f"{tok_path}: {tok.get_vocab_size()} ids, {os.path.getsize(tok_path)} bytes")

    rng = np.random.default_rng(a.seed)
    out = os.path.join(a.data, "tokens")
    os.makedirs(out, exist_ok=True)
    meta = {"vocab": tok.get_vocab_size(), "special": {s: i for i, s in enumerate(SPECIAL)},
            "layout": "[0, doc1..., 0, doc2..., 0] little-endian uint16, xz", "seed": a.seed,
            "tokenizer_sha256": hashlib.sha256(open(tok_path, "rb").read()).hexdigest(), "splits": {}}
    prompts = {}
    for split, docs, n in (("train", train_docs, a.prompts), ("heldout", held_docs, a.heldout_prompts)):
        ids = encode_docs(tok, docs)
        arr, starts = stream(ids)
        assert arr.max() < tok.get_vocab_size()
        assert not any(EOT in x or MASK in x for x in ids), "special ids inside a document"
        path = os.path.join(out, f"{split}.u16.xz")
        write_xz(path, arr)
        if split == "train":
            pkgs = document_packages(os.path.join(corpus, "manifest.json"), split)
            assert len(pkgs) == len(docs), (len(pkgs), len(docs))
            offs, labels, names = sample_by_package(rng, ids, starts, pkgs, n, a.prompt_len)
            prompts["train_package"] = labels
            meta["packages"] = names
            meta["train_prompts_by_package"] = {p: int((labels == k).sum()) for k, p in enumerate(names)}
            doc_pk = np.array([names.index(p) for p in pkgs])
            meta["train_tokens_by_package"] = {p: int(sum(len(ids[i]) for i in np.nonzero(doc_pk == k)[0]))
                                               for k, p in enumerate(names)}
            meta["bytes_per_token_by_package"] = {
                p: round(sum(len(docs[i].encode("utf-8")) for i in np.nonzero(doc_pk == k)[0])
                         / meta["train_tokens_by_package"][p], 3) for k, p in enumerate(names)}
            print(f"train prompts by package: {meta['train_prompts_by_package']}")
            print(f"train tokens by package: {meta['train_tokens_by_package']}")
            print(f"bytes/token by package: {meta['bytes_per_token_by_package']}")
        else:
            offs = sample_prompts(rng, ids, starts, n, a.prompt_len)
        p = np.stack([arr[o:o + a.prompt_len] for o in offs]).astype(np.uint16)
        assert not (p == EOT).any()
        prompts[split] = p
        prompts[split + "_offsets"] = offs
        nbytes = sum(len(d.encode("utf-8")) for d in docs)
        meta["splits"][split] = {"tokens": int(arr.size), "documents": len(docs),
                                 "bytes_per_token": round(nbytes / max(1, arr.size - len(docs) - 1), 3),
                                 "file": os.path.basename(path), "file_bytes": os.path.getsize(path),
                                 "sha256_u16": hashlib.sha256(arr.tobytes()).hexdigest(),
                                 "prompts": int(n)}
        print(f"{split}: {arr.size} tokens ({meta['splits'][split]['bytes_per_token']} bytes/token), "
              f"{os.path.getsize(path) / 1e6:.1f} MB xz, {n} prompts of {a.prompt_len}")
    ppath = os.path.join(out, "prompts.npz")
    np.savez_compressed(ppath, **prompts)
    meta["prompts"] = {"file": "prompts.npz", "len": a.prompt_len, "doc_start_share": 0.25,
                       "file_bytes": os.path.getsize(ppath)}
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"wrote {out}/ (prompts.npz {os.path.getsize(ppath) / 1e6:.1f} MB)")

    if a.check_c:
        ok = check_c(a.check_c, tok_path, tok, held_docs, len(held_docs), rng)
        ok = check_c(a.check_c, tok_path, tok, train_docs, a.check_docs, rng) and ok
        if not ok:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
