#!/usr/bin/env python3
"""bench/reference-project.py make|change PROJECT SESSIONS [SEED] -- the benchmark's reference project,
the same on every run: `make` writes 20,000 files (300 MB, half random bytes, half text) under
PROJECT and 50 MB of agent sessions (JSON lines) under SESSIONS; `change` rewrites 1% of the
files (which 1%, and with what, SEED says: default 7) and appends to one session."""
import os
import random
import sys

FILES = 20_000
PROJECT_BYTES = 300 * 2**20
SESSIONS = 25
SESSION_BYTES = 2 * 2**20


def content(r, size):
    if r.random() < 0.5:
        return r.randbytes(size)
    words = [b"fn", b"let", b"return", b"match", b"impl", b"self", b"Result", b"Ok", b"//", b"\n"]
    out = bytearray()
    while len(out) < size:
        out += r.choice(words) + b" " + r.randbytes(4).hex().encode() + b" "
    return bytes(out[:size])


def paths(project):
    for i in range(FILES):
        yield os.path.join(project, f"d{i % 200:03d}", f"s{i // 200 % 10}", f"f{i:05d}.dat")


def make(project, sessions):
    r = random.Random(20261130)
    mean = PROJECT_BYTES // FILES
    for p in paths(project):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(content(r, r.randint(mean // 4, mean * 7 // 4)))
    os.makedirs(sessions, exist_ok=True)
    for s in range(SESSIONS):
        with open(os.path.join(sessions, f"session-{s:02d}.jsonl"), "w") as f:
            written = 0
            while written < SESSION_BYTES:
                line = '{"type":"message","turn":%d,"text":"%s"}\n' % (written, r.randbytes(96).hex())
                written += f.write(line)


def change(project, sessions, seed=7):
    r = random.Random(seed)
    every = list(paths(project))
    for p in r.sample(every, FILES // 100):
        size = os.path.getsize(p)
        with open(p, "wb") as f:
            f.write(content(r, size))
    with open(os.path.join(sessions, "session-00.jsonl"), "a") as f:
        f.write('{"type":"message","text":"%s"}\n' % r.randbytes(50_000).hex())


if __name__ == "__main__":
    verb, project, sessions = sys.argv[1:4]
    if verb == "change" and len(sys.argv) > 4:
        change(project, sessions, int(sys.argv[4]))  # another 1%
    else:
        {"make": make, "change": change}[verb](project, sessions)
