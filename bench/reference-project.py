#!/usr/bin/env python3
"""bench/reference-project.py make|change PROJECT SESSIONS [SEED] [FILES] -- the benchmark's
reference project, the same on every run.

`make` writes FILES files under PROJECT and 50 MB of agent sessions (JSON lines) under SESSIONS;
`change` rewrites 1% of the files (which 1%, and with what, SEED says: default 7) and appends to
one session.
- FILES 20000 (the default): 300 MB in d<NNN>/s<N>/, half random bytes, half text.
- Any other count, e.g. 200000: a JavaScript- or Python-sized tree with its dependencies,
  pkg<NNN>/mod<N>/, 10 KB a file on average (2 GB at 200,000), a tenth incompressible."""
import os
import random
import sys

REFERENCE_FILES = 20_000
REFERENCE_BYTES = 300 * 2**20
LARGE_MEAN = 10 * 2**10
SESSIONS = 25
SESSION_BYTES = 2 * 2**20
WORDS = [b"fn", b"let", b"return", b"match", b"impl", b"self", b"Result", b"Ok", b"//", b"\n"]


def text(r, size):
    out = bytearray()
    while len(out) < size:
        out += r.choice(WORDS) + b" " + r.randbytes(4).hex().encode() + b" "
    return bytes(out[:size])


class Project:
    def __init__(self, root, files):
        self.root, self.files = root, files
        self.reference = files == REFERENCE_FILES
        # Large trees draw their text from one corpus: building each file word by word would
        # take longer than the benchmark.
        self.corpus = None if self.reference else text(random.Random(1), 4 * 2**20)

    def paths(self):
        for i in range(self.files):
            if self.reference:
                yield os.path.join(self.root, f"d{i % 200:03d}", f"s{i // 200 % 10}", f"f{i:05d}.dat")
            else:
                yield os.path.join(self.root, f"pkg{i % 1000:03d}", f"mod{i // 1000 % 10}", f"f{i:06d}.js")

    def size(self, r):
        mean = REFERENCE_BYTES // REFERENCE_FILES if self.reference else LARGE_MEAN
        return r.randint(mean // 4, mean * 7 // 4)

    def content(self, r, size):
        if self.reference:
            return r.randbytes(size) if r.random() < 0.5 else text(r, size)
        if r.random() < 0.1:
            return r.randbytes(size)
        # A line of its own first: no two files are the same blob.
        head = b"// " + r.randbytes(8).hex().encode() + b"\n"
        at = r.randrange(len(self.corpus) - size)
        return (head + self.corpus[at:at + size])[:size]


def make(project, sessions):
    r = random.Random(20261130)
    for p in project.paths():
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(project.content(r, project.size(r)))
    os.makedirs(sessions, exist_ok=True)
    for s in range(SESSIONS):
        with open(os.path.join(sessions, f"session-{s:02d}.jsonl"), "w") as f:
            written = 0
            while written < SESSION_BYTES:
                line = '{"type":"message","turn":%d,"text":"%s"}\n' % (written, r.randbytes(96).hex())
                written += f.write(line)


def change(project, sessions, seed):
    r = random.Random(seed)
    for p in r.sample(list(project.paths()), project.files // 100):
        size = os.path.getsize(p)
        with open(p, "wb") as f:
            f.write(project.content(r, size))
    with open(os.path.join(sessions, "session-00.jsonl"), "a") as f:
        f.write('{"type":"message","text":"%s"}\n' % r.randbytes(50_000).hex())


if __name__ == "__main__":
    verb, root, sessions = sys.argv[1:4]
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    files = int(sys.argv[5]) if len(sys.argv) > 5 else REFERENCE_FILES
    project = Project(root, files)
    if verb == "make":
        make(project, sessions)
    elif verb == "change":
        change(project, sessions, seed)
    else:
        sys.exit(f"reference-project.py: no verb {verb!r} (make or change)")
