"""How close the snapshot engine's capture is to the least a Python program must do.

The least: every file of the volume opened, read, hashed with BLAKE3 and appended to a file of
its thread's own, by `--threads` threads each taking a contiguous share of the files (no
walk, no records, no flush). Beside it, taking turns round after round, the engine's capture
of the same volume into an empty store (walk, records, packs, index; durable unless
`--no-flush`). Both read a cached volume, each run in a fresh process of its own (one
process doing both made whichever ran second slower). Reports each one's median wall and CPU
time and the ratio of the medians.

    .venv/bin/python bench/capture_floor.py --workdir /work/tmp/floor --repeats 5
    strace -f -c -o /work/tmp/engine.strace .venv/bin/python bench/capture_floor.py --workdir /work/tmp/floor --repeats 1 --only engine

The volume is bench/snapshots.py's (1 GiB, 10,000 files by default), made once under
`--workdir` and kept for later runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import ab  # noqa: E402  (the bounds check)
import snapshots  # noqa: E402  (the generator)
from dtrain.names import counted  # noqa: E402


def least(volume: Path, files: list[str], threads: int, out: Path) -> None:
    """Open, read, hash and append every file: the work a first snapshot cannot skip."""
    from blake3 import blake3

    def work(share: list[str]) -> None:
        buf = memoryview(bytearray(4 << 20))
        root = os.open(volume, os.O_RDONLY | os.O_DIRECTORY)
        dst = os.open(out, os.O_TMPFILE | os.O_RDWR, 0o600)
        pos = 0
        try:
            for rel in share:
                fd = os.open(rel, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=root)
                size, offset = os.fstat(fd).st_size, 0
                while offset < size:
                    n = os.preadv(fd, [buf[:min(len(buf), size - offset)]], offset)
                    if not n:
                        break
                    blake3(buf[:n]).hexdigest()
                    os.pwrite(dst, buf[:n], pos)
                    pos, offset = pos + n, offset + n
                os.close(fd)
        finally:
            os.close(dst)
            os.close(root)

    shares = [files[i * len(files) // threads:(i + 1) * len(files) // threads] for i in range(threads)]
    running = [threading.Thread(target=work, args=(share,)) for share in shares]
    for t in running:
        t.start()
    for t in running:
        t.join()


def engine(volume: Path, store: Path, durable: bool) -> None:
    from dtrain.storage.engine import Engine

    e = Engine(store, durable=durable)
    try:
        with e.pin():
            e.capture(volume)
    finally:
        e.close()


def run_one(side: str, volume: Path, workdir: Path, threads: int, durable: bool) -> tuple[float, float]:
    """One side once, in a fresh process: (wall, CPU) seconds."""
    store = workdir / "store"
    shutil.rmtree(store, ignore_errors=True)  # the last round's, untimed
    os.sync()
    out = subprocess.run([sys.executable, __file__, "--workdir", str(workdir), "--side", side, "--volume", str(volume),
                          "--threads", str(threads), *([] if durable else ["--no-flush"])],
                         check=True, capture_output=True, text=True).stdout
    wall, cpu = out.split()
    return float(wall), float(cpu)


def side_main(args: argparse.Namespace) -> None:
    files = None
    if args.side == "least":  # its list of files, untimed (the engine walks for itself)
        files = sorted(os.path.relpath(os.path.join(d, n), args.volume) for d, _, names in os.walk(args.volume)
                       for n in names)
    wall, cpu = time.perf_counter(), time.process_time()
    if files is not None:
        least(args.volume, files, args.threads, args.workdir)
    else:
        engine(args.volume, args.workdir / "store", not args.no_flush)
    print(time.perf_counter() - wall, time.process_time() - cpu)


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="scratch folder (on the file system to test)")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--checkpoints", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="rounds (1-1000)")
    parser.add_argument("--threads", type=int, default=2, help="threads of the plain loop (1-64)")
    parser.add_argument("--no-flush", action="store_true", help="the engine without fdatasync (not durable)")
    parser.add_argument("--only", choices=["least", "engine"],
                        help="run one side only (to count its system calls: strace -f -c)")
    parser.add_argument("--side", choices=["least", "engine"], help=argparse.SUPPRESS)  # the child's job
    parser.add_argument("--volume", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.side:
        side_main(args)
        return
    ab.bounded(parser, ("--repeats", args.repeats, 1, 1000), ("--threads", args.threads, 1, 64))
    snapshots.check_volume(parser, args.files, args.size_mb, args.checkpoints)
    volume = args.workdir / f"volume-{args.files}-{args.size_mb}-{args.checkpoints}"
    if not volume.is_dir():
        tmp = volume.with_name(volume.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        snapshots.generate(tmp, args.files, args.size_mb, args.checkpoints)
        tmp.rename(volume)
    results: dict[str, list[tuple[float, float]]] = {"least": [], "engine": []}
    for i in range(args.repeats):
        for name in (("least", "engine") if i % 2 == 0 else ("engine", "least")):
            if args.only in (None, name):
                results[name].append(run_one(name, volume, args.workdir, args.threads, not args.no_flush))
    shutil.rmtree(args.workdir / "store", ignore_errors=True)
    for name, label in (("least", f"plain loop, {counted(args.threads, 'thread')}"), ("engine", "engine capture")):
        if results[name]:
            wall = statistics.median(w for w, _ in results[name])
            cpu = statistics.median(c for _, c in results[name])
            print(f"{label}: median wall {wall:.3f} s, CPU {cpu:.3f} s")
    if args.only is None:
        ratio = statistics.median(w for w, _ in results["engine"]) / statistics.median(w for w, _ in results["least"])
        print(f"engine / plain loop (median wall): {ratio:.2f}x")


if __name__ == "__main__":
    main()
