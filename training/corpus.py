#!/usr/bin/env python3
"""The training corpus: Go sources from five Debian packages.

Runs on the CPU (no torch). Downloads each package with apt-get (run
`apt-get update` once first) unless its .deb is already in data/deb/,
unpacks it with dpkg -x under data/src/<package>/, and packs the `*.go`
files into two compressed texts:

    training/data/corpus/train.txt.xz     documents separated by "\\0"
    training/data/corpus/heldout.txt.xz   the held-out packages, same format
    training/data/corpus/manifest.json    packages (version, sha256, licences),
                                          rules, counts and every file's path
                                          ("<debian package>:<path>")

The packages (Debian bookworm), and only these:
- golang-1.19-src: the Go distribution's `src/` tree and its test suite
  `test/` (less its `// errorcheck` programs: deliberate compile errors);
- golang-golang-x-tools-dev, golang-google-grpc-dev,
  golang-github-docker-docker-dev, golang-github-containerd-containerd-dev:
  their sources under usr/share/gocode/src (x/tools; gRPC; the Docker
  engine with the parts of docker/cli, libnetwork, buildkit and ipvs the
  package installs; containerd). Third-party code of other authors and
  styles, so the models learn Go beyond the standard library's.

What is kept (and why):
- `*.go` files, `_test.go` included: tests are ordinary, idiomatic Go and
  the target over-fits a small corpus, so more text is worth more;
- only files whose licence, per the package's DEP-5 copyright file (its
  `Files:` stanzas matched against the file's path in the SOURCE package,
  the last match winning), is a permissive licence the file declares
  (PERMISSIVE below: BSD, Expat/MIT, Apache-2.0, the Go licence); an
  expression "A and B" needs both, "A or B" one. Installed paths map to
  source paths per package (SOURCE_PATHS); a file no mapping covers stops
  the run rather than being guessed;
- generated files (a line `// Code generated ... DO NOT EDIT.`: protobuf
  stubs, syscall and unicode tables) are left out: they teach tables, not
  Go; so are `testdata/` and `vendor/` directories (broken programs for
  the tools' tests; other projects' copies) and the stdlib's `misc/`;
- files that compress more than REPETITIVE (20) times with xz are data, not
  code: test/fixedbugs/bug257.go is a million "☺" (the first merges of a
  tokenizer trained with it), test/cmplxdivide1.go a table of numbers.
- Held out, never trained on (neither tokenizer nor models): the stdlib
  packages net/http, encoding/json and text/template and all their
  subpackages. No other Debian Go package enters the corpus (the
  evaluation uses other Debian Go code).

    python3 training/corpus.py [--data training/data] [--no-tests] [--no-test-suite]
"""
import argparse
import fnmatch
import glob
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys

STDLIB = "golang-1.19-src"
GOROOT = "usr/share/go-1.19"
GOCODE = "usr/share/gocode/src"
# Debian package -> [(installed import-path prefix, the same files' path in the source
# package)]; for golang-1.19-src paths are relative to GOROOT on both sides. The Docker
# source package is multi-component (engine/, cli/, libnetwork/, swarmkit/): its -dev package
# installs the engine as github.com/docker/docker and a few vendored trees of the engine.
SOURCE_PATHS = {
    STDLIB: [("", "")],
    "golang-golang-x-tools-dev": [("golang.org/x/tools/", "")],
    "golang-google-grpc-dev": [("google.golang.org/grpc/", "")],
    "golang-github-docker-docker-dev": [
        ("github.com/docker/docker/", "engine/"),
        ("github.com/docker/cli/", "cli/"),
        ("github.com/docker/libnetwork/", "libnetwork/"),
        ("github.com/moby/buildkit/", "engine/vendor/github.com/moby/buildkit/"),
        ("github.com/moby/ipvs/", "engine/vendor/github.com/moby/ipvs/")],
    "golang-github-containerd-containerd-dev": [("github.com/containerd/containerd/", "")],
}
PACKAGES = list(SOURCE_PATHS)
# DEP-5 short names taken as permissive (SPDX in the manifest); anything else is left out
PERMISSIVE = {"Go": "BSD-3-Clause", "BSD-3-clause": "BSD-3-Clause", "BSD-3-Clause": "BSD-3-Clause",
              "BSD-3-clause-Generic": "BSD-3-Clause", "BSD-3-clause-Google": "BSD-3-Clause",
              "BSD-2-Clause": "BSD-2-Clause", "BSD-2-clause": "BSD-2-Clause", "FreeBSD": "BSD-2-Clause",
              "Expat": "MIT", "MIT": "MIT", "X11": "X11", "ISC": "ISC", "Apache-2.0": "Apache-2.0"}
HELDOUT = ["net/http", "encoding/json", "text/template"]
ERRORCHECK = re.compile(r"^// errorcheck", re.M)
GENERATED = re.compile(r"^// Code generated .* DO NOT EDIT\.$", re.M)
SEP = "\0"
REPETITIVE = 20.0            # xz ratio (preset 1) past which a file is data, not code


def sh(cmd, cwd=None):
    print("+", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=cwd)


def fetch_deb(data, package):
    debdir = os.path.join(data, "deb")
    os.makedirs(debdir, exist_ok=True)
    debs = sorted(glob.glob(os.path.join(debdir, f"{package}_*.deb")))
    if not debs:
        sh(["apt-get", "download", package], cwd=debdir)
        debs = sorted(glob.glob(os.path.join(debdir, f"{package}_*.deb")))
    if len(debs) != 1:
        sys.exit(f"corpus.py: expected one {package} .deb in {debdir}, found {debs}")
    return debs[0]


def deb_field(deb, field):
    return subprocess.run(["dpkg-deb", "-f", deb, field], check=True, capture_output=True,
                          text=True).stdout.strip()


def parse_dep5(text):
    """-> [(patterns, licence expression)] in file order (the last match wins)."""
    stanzas = []
    for block in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in block.split("\n"):
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line and not line.startswith("#"):
                key, _, val = line.partition(":")
                key = key.strip()
                fields[key] = val.strip()
        if "Files" in fields and "License" in fields:
            pats = fields["Files"].split()
            lic = fields["License"].split("\n")[0].strip()
            stanzas.append((pats, lic))
    return stanzas


def licence_of(stanzas, path):
    lic = None
    for pats, l in stanzas:
        # DEP-5: '*' matches any run of characters, '/' included; fnmatch's does too
        if any(fnmatch.fnmatchcase(path, p) for p in pats):
            lic = l
    return lic


def permissive(expr):
    """'Apache-2.0 and Go' -> both must be permissive; 'GPL-3+ or Apache-2.0' -> one."""
    if expr is None:
        return False
    if " or " in expr:
        return any(permissive(e.strip()) for e in expr.split(" or "))
    return all(e.strip() in PERMISSIVE for e in expr.split(" and "))


def source_path(package, installed):
    for inst, src in SOURCE_PATHS[package]:
        if installed.startswith(inst):
            return src + installed[len(inst):]
    sys.exit(f"corpus.py: {package}: {installed} is under no import path of SOURCE_PATHS; "
             f"add its source location rather than guessing its licence")


def stdlib_package(rel):
    """'src/net/http/httptest/server.go' -> 'net/http/httptest' (None outside src/)."""
    return os.path.dirname(rel)[len("src/"):] if rel.startswith("src/") else None


def held_out(package, rel):
    pkg = stdlib_package(rel) if package == STDLIB else None
    return pkg is not None and any(pkg == h or pkg.startswith(h + "/") for h in HELDOUT)


def unpack(data, package):
    deb = fetch_deb(data, package)
    sha = hashlib.sha256(open(deb, "rb").read()).hexdigest()
    root = os.path.join(data, "src", package)
    stamp = os.path.join(root, ".unpacked-" + sha[:16])
    if not os.path.exists(stamp):
        sh(["rm", "-rf", root])
        os.makedirs(root)
        sh(["dpkg", "-x", deb, root])
        open(stamp, "w").close()
    return deb, sha, root


def walk_package(package, root, a):
    """(base, [rel paths]) of the package's candidate .go files, sorted."""
    if package == STDLIB:
        base, tops = os.path.join(root, GOROOT), ["src"] + ([] if a.no_test_suite else ["test"])
    else:
        base, tops = os.path.join(root, GOCODE), [""]
    rels = []
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(os.path.join(base, top)):
            dirnames.sort()
            rels += [os.path.relpath(os.path.join(dirpath, n), base) for n in sorted(filenames)
                     if n.endswith(".go")]
    return base, rels


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    ap.add_argument("--no-tests", action="store_true", help="leave out *_test.go files")
    ap.add_argument("--no-test-suite", action="store_true", help="leave out the stdlib's test/ tree")
    ap.add_argument("--xz-preset", type=int, default=6)
    a = ap.parse_args()

    splits = {"train": [], "heldout": []}
    sources, skipped_total = [], {}
    for package in PACKAGES:
        deb, sha, root = unpack(a.data, package)
        version = deb_field(deb, "Version")
        cpath = f"usr/share/doc/{package}/copyright"
        stanzas = parse_dep5(open(os.path.join(root, cpath), encoding="utf-8").read())
        declared = sorted({l for _, l in stanzas})
        base, rels = walk_package(package, root, a)
        skipped = {"testdata": 0, "vendor": 0, "generated": 0, "repetitive": 0, "licence": 0, "tests": 0,
                   "not_utf8_or_nul": 0, "errorcheck": 0}
        left_out_repetitive = []
        left_out, kept_by_licence, kept = {}, {}, {"files": 0, "bytes": 0}
        for rel in rels:
            parts = rel.split("/")
            if "testdata" in parts:
                skipped["testdata"] += 1
                continue
            if "vendor" in parts[:-1]:
                skipped["vendor"] += 1
                continue
            if a.no_tests and rel.endswith("_test.go"):
                skipped["tests"] += 1
                continue
            lic = licence_of(stanzas, source_path(package, rel))
            if not permissive(lic):
                skipped["licence"] += 1
                left_out[rel] = lic
                continue
            raw = open(os.path.join(base, rel), "rb").read()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                skipped["not_utf8_or_nul"] += 1
                continue
            if SEP in text:
                skipped["not_utf8_or_nul"] += 1
                continue
            if GENERATED.search(text):
                skipped["generated"] += 1
                continue
            if len(raw) > 4096 and len(raw) / len(lzma.compress(raw, preset=1)) > REPETITIVE:
                skipped["repetitive"] += 1
                left_out_repetitive.append(rel)
                continue
            if package == STDLIB and rel.startswith("test/") and ERRORCHECK.search(text[:1000]):
                skipped["errorcheck"] += 1
                continue
            split = "heldout" if held_out(package, rel) else "train"
            splits[split].append((f"{package}:{rel}", text))
            kept_by_licence[lic] = kept_by_licence.get(lic, 0) + 1
            kept["files"] += 1
            kept["bytes"] += len(raw)
        for k, v in skipped.items():
            skipped_total[k] = skipped_total.get(k, 0) + v
        sources.append({
            "package": package, "version": version, "deb": os.path.basename(deb), "sha256": sha,
            "origin": f"Debian bookworm (apt-get download {package})",
            "files_under": GOROOT + "/{src,test}" if package == STDLIB else GOCODE,
            "source_paths": {inst or "(GOROOT)": src or "(top)" for inst, src in SOURCE_PATHS[package]},
            "copyright": cpath, "licences_declared": declared,
            "kept_by_licence": {l: {"files": n, "spdx": " ".join(PERMISSIVE.get(w, w) for w in l.split())}
                                for l, n in sorted(kept_by_licence.items())},
            "kept": kept, "skipped": skipped, "left_out_for_licence": left_out,
            "left_out_repetitive": left_out_repetitive})
        print(f"{package} {version}: {kept['files']} files, {kept['bytes'] / 1e6:.1f} MB kept; "
              f"skipped {skipped}")

    out = os.path.join(a.data, "corpus")
    os.makedirs(out, exist_ok=True)
    manifest = {
        "sources": sources,
        "rules": {"kept": "*.go" + (" minus *_test.go" if a.no_tests else "")
                  + " (stdlib: src/ " + ("" if a.no_test_suite else "and test/ minus // errorcheck programs")
                  + "; other packages: " + GOCODE + ")",
                  "tests_included": not a.no_tests,
                  "licences": "per file, the package's DEP-5 copyright (the last matching Files: stanza, "
                              "matched on the file's source-package path); kept where permissive: "
                              + ", ".join(sorted(PERMISSIVE)),
                  "left_out": ["*/testdata/*", "*/vendor/*", "generated files (// Code generated ... DO NOT EDIT.)",
                               f"files over 4 kB that xz (preset 1) compresses more than {REPETITIVE:g} times",
                               "files under a licence not in the permissive list",
                               "non-UTF-8 files or files with NUL"],
                  "heldout_packages": [f"{STDLIB}: {h} (and subpackages)" for h in HELDOUT],
                  "format": "xz-compressed UTF-8, one document per file, documents separated by NUL; "
                            "paths are '<debian package>:<path>'"},
        "skipped": skipped_total,
        "splits": {},
    }
    for split, docs in splits.items():
        blob = SEP.join(t for _, t in docs).encode("utf-8")
        path = os.path.join(out, f"{split}.txt.xz")
        with open(path, "wb") as f:
            f.write(lzma.compress(blob, preset=a.xz_preset))
        by_pkg = {}
        for r, t in docs:
            e = by_pkg.setdefault(r.split(":", 1)[0], {"documents": 0, "bytes": 0})
            e["documents"] += 1
            e["bytes"] += len(t.encode("utf-8"))
        manifest["splits"][split] = {
            "file": os.path.basename(path), "documents": len(docs), "bytes": len(blob),
            "compressed_bytes": os.path.getsize(path),
            "test_files": sum(r.endswith("_test.go") for r, _ in docs),
            "by_package": by_pkg, "sha256": hashlib.sha256(blob).hexdigest(),
            "paths": [r for r, _ in docs]}
        if split == "heldout":
            manifest["splits"][split]["package_list"] = sorted({stdlib_package(r.split(":", 1)[1])
                                                                for r, _ in docs})
        print(f"{split}: {len(docs)} files, {len(blob) / 1e6:.1f} MB text, "
              f"{os.path.getsize(path) / 1e6:.1f} MB xz; "
              + ", ".join(f"{p} {e['documents']} files {e['bytes'] / 1e6:.1f} MB" for p, e in by_pkg.items()))
    # nothing held out may leak into train
    assert not any(held_out(*r.split(":", 1)) for r in manifest["splits"]["train"]["paths"])
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"skipped: {skipped_total}")
    print(f"wrote {out}/manifest.json")
    return 0


def document_packages(manifest_path, split):
    """The Debian package of each document of a split, in order (from manifest.json)."""
    m = json.load(open(manifest_path))
    return [p.split(":", 1)[0] for p in m["splits"][split]["paths"]]


def read_split(path):
    """The documents of a packed split (train.txt.xz / heldout.txt.xz)."""
    with open(path, "rb") as f:
        return lzma.decompress(f.read()).decode("utf-8").split(SEP)


if __name__ == "__main__":
    sys.exit(main())
