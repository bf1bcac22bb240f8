"""Snapshot benchmark: dtrain's engine against restic, DVC and `cp -a`, in one run.

A TuSimple-like volume (clips/<date>/<id>/20.jpg of incompressible bytes plus a JSON label per
clip, and a few 50 MB checkpoints) goes through: first snapshot, snapshot of the unchanged
volume, snapshot after rewriting 1% of the files and adding a 50 MB checkpoint, restore into
a new folder, verify (re-hash all content). Each step is a fresh process (start-up included,
as for a CLI) timed by wall clock; "disk added" is the growth of each tool's repository in
allocated blocks.

    .venv/bin/python bench/snapshots.py                       # 1 GiB, 10,000 files, 3 rounds
    .venv/bin/python bench/snapshots.py --files 2000 --size-mb 200 --repeats 1   # quick

With `--tools ...,cli` each step also runs as the command a user types (`dtrain snapshot
create|restore|verify`, the CLI's start-up included), on a store of its own over the same
volume folder; the `dtrain` column is a minimal script over the engine (`DTRAIN` below).
With `--tools ...,api` the snapshot and restore steps also go through the HTTP API of a
`dtrain server` started for the round (its own store over the same volume folder), timed as
one `curl` request each (after one untimed request: a server's first one builds FastAPI's
route models): the figure of a client that talks to a resident service, as a UI, a notebook or
a pipeline step does, against the fresh Python process of the `dtrain` column.

restic reads the same volume; DVC works on its own copy (the `cp -a` of the first step),
because `dvc add` may rewrite the workspace. Dirty pages are flushed (not timed) before each
step. The whole sequence runs `--repeats` times, each round on a fresh volume and with the
tools of each step in a rotated order; the report gives each tool's median time and, per
step, the median of the per-round ratios (a ratio within one round compares tools under the
same machine load). Everything is deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dtrain.names import counted

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)

REPO = Path(__file__).resolve().parents[1]
CHECKPOINT = 50 << 20
TOOLS = ("dtrain", "nosync", "api", "cli", "restic", "dvc", "cpsync", "disk")
PROGRAMS = {"restic": "restic", "dvc": str(REPO / ".venv/bin/dvc"), "api": "curl"}  # what a tool runs

DTRAIN = """
import sys, time
from pathlib import Path
from dtrain.storage import Engine, Storage
home, durable = Path(sys.argv[1]), sys.argv[4] == "1"
s = Storage(home, engine=Engine(home / "store", durable=durable))
t = time.perf_counter()
step, arg = sys.argv[2], sys.argv[3]
if step == "snapshot":
    s.create_snapshot("bench", name=arg, progress=False)
elif step == "restore":
    s.restore_snapshot(arg, to="restored", progress=False)
else:
    assert s.verify(progress=False).ok
print(time.perf_counter() - t)
"""


# What the disk takes to hold N bytes for sure: N random bytes (rounded up to 4 KiB) written 8 MiB at a
# time with O_DIRECT (no page cache, so no copy in the kernel), then fsync. A durable copy of a volume
# cannot end sooner than this; `cp -a` does not wait for it.
DISK_FLOOR = """
import mmap, os, sys
path, size = sys.argv[1], int(sys.argv[2])
buf = mmap.mmap(-1, 8 << 20)
buf.write(os.urandom(8 << 20))
try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o600)
except OSError:  # a file system without O_DIRECT: through the page cache, then the fsync
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
view = memoryview(buf)
for offset in range(0, size, 8 << 20):
    n = -(-min(8 << 20, size - offset) // 4096) * 4096  # O_DIRECT writes whole 4 KiB blocks
    os.pwrite(fd, view[:n], offset)
os.fsync(fd)
os.close(fd)
"""


def generate(root: Path, files: int, size_mb: int, checkpoints: int, seed: int = 0) -> None:
    """clips/<date>/<id>/{20.jpg, 20.json} pairs and `checkpoints` 50 MB files."""
    rnd = random.Random(seed)
    clips = (files - checkpoints) // 2
    image = max(1, (size_mb * 2**20 - checkpoints * CHECKPOINT - clips * 400) // clips)
    for i in range(clips):
        folder = root / "clips" / f"{5 + i % 3:02d}{10 + i % 20}" / str(1492626047222176976 + i * 977)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "20.jpg").write_bytes(rnd.randbytes(image))
        label = {"lanes": [[rnd.randint(-2, 1280) for _ in range(12)] for _ in range(4)],
                 "h_samples": list(range(240, 720, 40)), "raw_file": f"clips/{folder.name}/20.jpg"}
        (folder / "20.json").write_text(json.dumps(label))
    (root / "models").mkdir(exist_ok=True)
    for k in range(checkpoints):
        (root / "models" / f"ckpt-{k}.pt").write_bytes(rnd.randbytes(CHECKPOINT))


def check_volume(parser: argparse.ArgumentParser, files: int, size_mb: int, checkpoints: int) -> None:
    """Bounds of the generated volume (shared by the scripts that make one): one line and exit 2."""
    ab.bounded(parser, ("--files", files, 2, 10_000_000), ("--size-mb", size_mb, 1, 1 << 20),
               ("--checkpoints", checkpoints, 0, 1000))
    if files < checkpoints + 2:  # the clips need two files (an image and its label) besides the checkpoints
        parser.error(f"--files {files} cannot hold {counted(checkpoints, 'checkpoint')} and a clip: "
                     f"give --files {checkpoints + 2} or more")


def mutate(root: Path, seed: int = 1) -> None:
    """Rewrite 1% of the files with new bytes of the same size; add a 50 MB checkpoint."""
    rnd = random.Random(seed)
    paths = sorted(p for p in root.rglob("*") if p.is_file())
    for p in rnd.sample(paths, max(1, len(paths) // 100)):
        p.write_bytes(rnd.randbytes(p.stat().st_size))
    (root / "models" / "ckpt-new.pt").write_bytes(rnd.randbytes(CHECKPOINT))


def disk(path: Path) -> int:
    """Allocated bytes under `path`, hard links counted once (like du)."""
    if not path.exists():
        return 0
    seen = {}
    for folder, dirs, names in os.walk(path):
        for name in dirs + names:
            st = os.lstat(os.path.join(folder, name))
            seen[st.st_dev, st.st_ino] = st.st_blocks * 512
    return sum(seen.values())


def held(home: Path) -> int:
    """What a dtrain home's store and restored volume take on disk: a step's growth of it is
    what the step added."""
    return disk(home / "store") + disk(home / "volumes/restored")


def timed(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> tuple[float, str]:
    """Wall time of one command. Dirty pages are flushed first, so that no tool pays for the
    write-back of the one before it."""
    os.sync()
    t = time.perf_counter()
    out = subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


class Bench:
    """One round: a fresh volume through every step, each tool in turn."""

    def __init__(self, work: Path, tools: list[str], rotate: int = 0):
        self.work, self.tools, self.rotate = work, tools, rotate
        self.home = work / "dtrain"
        self.volume = self.home / "volumes/bench/data"
        self.dvc = work / "dvc"
        self.restic = work / "restic"
        self.env = dict(os.environ, RESTIC_PASSWORD="bench", RESTIC_CACHE_DIR=str(work / "restic-cache"),
                        PYTHONPATH=str(REPO), DVC_NO_ANALYTICS="1")
        # Python runs from cached bytecode, as an installed tool does (pip compiles it; an
        # editable install writes it on first import): a session that sets PYTHONDONTWRITEBYTECODE
        # would otherwise time the compilation of every module on every step.
        self.env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-c", "import dtrain.storage"], env=self.env, check=True)
        self.rows: dict[str, dict[str, tuple[float, int]]] = {}
        self.server: subprocess.Popen | None = None
        self.api_url = ""

    def record(self, step: str, tool: str, seconds: float, added: int, note: str = "") -> None:
        self.rows.setdefault(step, {})[tool] = (seconds, added)
        print(f"{step:<12} {tool:<8} {seconds:7.2f} s  {added / 2**20:9.1f} MiB {note}", flush=True)

    def in_turn(self, actions: list) -> None:
        """Run a step's tools, starting with a different one each round."""
        k = self.rotate % len(actions) if actions else 0
        for action in actions[k:] + actions[:k]:
            action()

    def dtrain(self, step: str, kind: str, arg: str, tool: str) -> None:
        home = self.home if tool == "dtrain" else self.work / "nosync"
        before = held(home)
        durable = "1" if tool == "dtrain" else "0"
        wall, out = timed([sys.executable, "-c", DTRAIN, str(home), kind, arg, durable], env=self.env)
        added = held(home) - before
        self.record(step, tool, wall, added, f"(in-process {float(out):.2f} s)")

    def ours(self, step: str, kind: str, arg: str) -> list:
        out = [lambda t=t: self.dtrain(step, kind, arg, t) for t in ("dtrain", "nosync") if t in self.tools]
        if "api" in self.tools and kind != "verify":  # the HTTP API has no verify
            out.append(lambda: self.api_step(step, kind, arg))
        if "cli" in self.tools:
            out.append(lambda: self.cli_step(step, kind, arg))
        return out

    def cli_step(self, step: str, kind: str, arg: str) -> None:
        """The command a user types (`dtrain snapshot create|restore|verify`), its own store
        over the same volume folder: the CLI's start-up and output included."""
        home = self.work / "cli"
        before = held(home)
        verb = {"snapshot": ["create", "bench", "--name", arg], "restore": ["restore", arg, "--to", "restored"],
                "verify": ["verify"]}[kind]
        wall, _ = timed([str(Path(sys.executable).with_name("dtrain")), "snapshot", *verb],
                        env=dict(self.env, DTRAIN_HOME=str(home)))
        self.record(step, "cli", wall, held(home) - before)

    def api_step(self, step: str, kind: str, arg: str) -> None:
        """The same verb through the HTTP API of a running `dtrain server`, with curl as the
        client: what a UI, a notebook or a pipeline step pays once the server is up."""
        home = self.work / "api"
        before = held(home)
        if kind == "snapshot":
            path, body = "/snapshots", {"volume": "bench", "name": arg}
        else:
            path, body = f"/snapshots/{arg}/restore", {"to": "restored"}
        wall, _ = timed(["curl", "-sf", "-o", "/dev/null", "-X", "POST", "-H", "content-type: application/json",
                         "-d", json.dumps(body), self.api_url + "/api/v1" + path])
        self.record(step, "api", wall, held(home) - before)

    def shadow(self, name: str) -> Path:
        """A second dtrain home whose volume `bench` is this round's volume folder: another
        store over the same bytes."""
        from dtrain.storage import Storage, btrfs

        home = self.work / name
        other = Storage(home)
        other.create_volume("bench")
        other.close()
        for folder in (home / "volumes/bench/data", home / "volumes/bench"):
            if btrfs.is_subvolume(folder):  # on btrfs the new volume is a subvolume: unlink would not do
                btrfs.delete(folder)
        shutil.rmtree(home / "volumes/bench", ignore_errors=True)
        # Its volume's root is the first home's volumes folder (as a storage class's root would be):
        # a link at the volume's own folder is refused, as dtrain never follows one it did not make.
        with sqlite3.connect(home / "state.db") as conn:
            conn.execute("UPDATE volumes SET root = ? WHERE name = 'bench'", (str(self.home / "volumes"),))
        conn.close()
        return home

    def start_api(self) -> None:
        env = dict(self.env, DTRAIN_HOME=str(self.shadow("api")))
        self.server = subprocess.Popen([sys.executable, "-m", "dtrain.cli.main", "server", "--port", "0"],
                                       env=env, stdout=subprocess.PIPE, text=True)
        line = self.server.stdout.readline()
        if not line.startswith("dtrain server: http://"):
            self.close()
            raise SystemExit(f"the dtrain server did not start: {line!r}")
        self.api_url = line.split()[2].rstrip("/")
        # untimed: a server's first request builds FastAPI's route models and imports the
        # storage engine (~0.2 s, once per server); a running server has long done that
        subprocess.run(["curl", "-sf", "-o", "/dev/null", self.api_url + "/api/v1/volumes"], check=True)

    def close(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=30)
            self.server = None

    def copies(self, step: str, target: str) -> list:
        """`cp -a` of the volume (and `cp -a; sync`, the durable equivalent, with tool cpsync;
        and the disk's floor for the volume's bytes, DISK_FLOOR, with tool disk)."""
        def copy(tool: str) -> None:
            dest = self.work / f"{target}-{tool.replace(' ', '')}"
            cmd = ["cp", "-a", str(self.volume), str(dest)]
            wall, _ = timed(cmd if tool == "cp -a" else ["sh", "-c", f"{' '.join(cmd)} && sync"])
            self.record(step, tool, wall, disk(dest))

        def floor() -> None:
            dest = self.work / f"{target}-disk.bin"
            size = sum(os.lstat(os.path.join(d, n)).st_size for d, _, names in os.walk(self.volume) for n in names)
            wall, _ = timed([sys.executable, "-c", DISK_FLOOR, str(dest), str(size)])
            self.record(step, "disk", wall, os.stat(dest).st_blocks * 512)
            dest.unlink()
        return ([lambda: copy("cp -a")] + ([lambda: copy("cp+sync")] if "cpsync" in self.tools else [])
                + ([floor] if "disk" in self.tools else []))

    def restic_step(self, step: str, args: list[str], target: Path | None = None) -> None:
        before = disk(self.restic) + (disk(target) if target else 0)
        wall, _ = timed(["restic", "-r", str(self.restic), "--no-cache", *args], env=self.env)
        self.record(step, "restic", wall, disk(self.restic) + (disk(target) if target else 0) - before)

    def dvc_step(self, step: str, args: list[str]) -> None:
        before = disk(self.dvc / ".dvc/cache") + disk(self.dvc / "data")
        wall, _ = timed([str(REPO / ".venv/bin/dvc"), *args], cwd=self.dvc, env=self.env)
        self.record(step, "dvc", wall, disk(self.dvc / ".dvc/cache") + disk(self.dvc / "data") - before)

    def snapshot_all(self, step: str, name: str, extra: list = (), dvc: bool = True) -> None:
        actions = self.ours(step, "snapshot", name) + list(extra)
        if "restic" in self.tools:
            actions.append(lambda: self.restic_step(step, ["backup", "-q", str(self.volume)]))
        self.in_turn(actions)
        if dvc and "dvc" in self.tools:  # last, on its own copy of the volume
            self.dvc_step(step, ["add", "-q", "data"])

    def run(self, files: int, size_mb: int, checkpoints: int) -> None:
        sys.path.insert(0, str(REPO))
        from dtrain.storage import Storage

        storage = Storage(self.home)
        vol = storage.create_volume("bench")
        print(f"generating {files} files, {size_mb} MiB in {self.volume} (snapshots: {vol.snapshots})")
        generate(self.volume, files, size_mb, checkpoints)
        storage.close()
        if "nosync" in self.tools:  # a second store over the same volume folder
            self.shadow("nosync")
        if "api" in self.tools:  # a third, behind a running server
            self.start_api()
        if "cli" in self.tools:  # a fourth, for the `dtrain` command
            self.shadow("cli")
        wall, _ = timed(["find", str(self.volume), "-printf", "%s %T@\n"])
        self.record("stat walk", "find", wall, 0)
        if "restic" in self.tools:
            timed(["restic", "-r", str(self.restic), "init", "-q"], env=self.env)
        self.snapshot_all("first", "first", self.copies("first", "copy"), dvc=False)
        if "dvc" in self.tools:
            shutil.copytree(self.volume, self.dvc / "data", symlinks=True)  # DVC's own copy, untimed
            for args in (["init", "--no-scm", "-q"], ["config", "core.analytics", "false"],
                         ["config", "cache.type", "reflink,copy"]):
                timed([str(REPO / ".venv/bin/dvc"), *args], cwd=self.dvc, env=self.env)
            self.dvc_step("first", ["add", "-q", "data"])
        self.snapshot_all("unchanged", "unchanged")
        mutate(self.volume)
        if "dvc" in self.tools:
            mutate(self.dvc / "data")
        self.snapshot_all("1% changed", "changed")
        self.restore_all()
        actions = self.ours("verify", "verify", "")
        if "restic" in self.tools:
            actions.append(lambda: self.restic_step("verify", ["check", "-q", "--read-data"]))
        self.in_turn(actions)

    def restore_all(self) -> None:
        # restored trees are kept until the round ends: on ext4 without a journal, fresh
        # deletions slow the next creates
        actions = self.copies("restore", "restore") + self.ours("restore", "restore", "changed")
        if "restic" in self.tools:
            target = self.work / "restic-restore"
            actions.append(lambda: self.restic_step(
                "restore", ["restore", "-q", "latest", "--target", str(target)], target))
        self.in_turn(actions)
        if "dvc" in self.tools:  # DVC restores a workspace in place: remove it, check it out
            shutil.rmtree(self.dvc / "data")
            self.dvc_step("restore", ["checkout", "-q"])


def remove(work: Path) -> None:
    """Delete a round's folder; btrfs subvolumes (volumes, native snapshots) go whole, since
    the files of a read-only one cannot be unlinked one by one."""
    from dtrain.storage import btrfs

    for folder, dirs, _ in os.walk(work):
        for name in list(dirs):
            path = os.path.join(folder, name)
            if btrfs.is_subvolume(path):
                btrfs.delete(path)
                dirs.remove(name)
    shutil.rmtree(work, ignore_errors=True)


def summarize(rounds: list[dict[str, dict[str, tuple[float, int]]]], against: str = "dtrain") -> tuple[dict, dict]:
    """Median time per (step, tool), disk added in the last round, and per step the median
    (with min and max) over rounds of each tool's time divided by `against`'s in that round."""
    table, ratios = {}, {}
    for step in rounds[-1]:
        table[step] = {tool: (statistics.median(r[step][tool][0] for r in rounds if tool in r.get(step, {})),
                              added) for tool, (_, added) in rounds[-1][step].items()}
        if against not in rounds[-1][step]:
            continue
        ratios[step] = {}
        for tool in rounds[-1][step]:
            if tool != against:
                xs = [r[step][tool][0] / r[step][against][0] for r in rounds if tool in r[step]]
                ratios[step][tool] = (round(statistics.median(xs), 2), round(min(xs), 2), round(max(xs), 2))
    return table, ratios


def print_ratios(ratios: dict, against: str) -> None:
    print(f"other tool's time / {against}'s time, median [min-max] over rounds (higher: {against} faster):")
    for step, by_tool in ratios.items():
        print(f"  {step:<12} " + "  ".join(f"{tool}: {m:.2f}x [{lo:.2f}-{hi:.2f}]"
                                          for tool, (m, lo, hi) in by_tool.items()))


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="files in the volume")
    parser.add_argument("--size-mb", type=int, default=1024, help="total size of the volume in MiB")
    parser.add_argument("--checkpoints", type=int, default=3, help="50 MB checkpoints among the files")
    parser.add_argument("--tools", default="dtrain,restic,dvc",
                        help="comma-separated among dtrain, nosync (dtrain without fsync), api (dtrain "
                             "through a running 'dtrain server', curl as the client), cli (the 'dtrain "
                             "snapshot' command), restic, dvc, "
                             "cpsync ('cp -a; sync'), disk (the disk's time to hold the volume's bytes: "
                             "O_DIRECT writes and fsync, the floor of a durable copy); 'cp -a' always runs")
    parser.add_argument("--repeats", type=int, default=3, help="rounds, each on a fresh volume")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folders")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    check_volume(parser, args.files, args.size_mb, args.checkpoints)
    ab.bounded(parser, ("--repeats", args.repeats, 1, 1000))
    ab.output_file(parser, args.json)
    tools = args.tools.split(",")
    unknown = [t for t in tools if t not in TOOLS]  # a misspelt tool would otherwise be left out, silently
    if unknown:
        parser.error(f"--tools names no tool {unknown[0]!r}: choose from {', '.join(TOOLS)}")
    if "dtrain" not in tools:
        parser.error("--tools must include dtrain: every ratio is against it")
    for tool, program in PROGRAMS.items():  # found missing before a volume is written, not mid-round
        if tool in tools and not (Path(program).is_file() if "/" in program else shutil.which(program)):
            how = "run 'make bench-setup' (restic and DVC)" if tool in ("restic", "dvc") else f"install {program}"
            parser.error(f"--tools {tool} needs {program}, which is not installed: {how}, or leave {tool} out")
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
    rounds = []
    for k in range(args.repeats):
        work = Path(tempfile.mkdtemp(prefix="dtrain-bench-", dir=args.workdir))
        print(f"--- round {k + 1} of {args.repeats}", flush=True)
        bench = Bench(work, tools, rotate=k)
        try:
            bench.run(args.files, args.size_mb, args.checkpoints)
            rounds.append(bench.rows)
        finally:
            bench.close()
            if not args.keep:
                remove(work)
    table, ratios = summarize(rounds)
    print(f"\nmedian of {counted(len(rounds), 'round')}:")
    for step, by_tool in table.items():
        print(f"  {step:<12} " + "  ".join(f"{tool}: {t:.2f} s ({added / 2**20:.1f} MiB)"
                                          for tool, (t, added) in by_tool.items()))
    print_ratios(ratios, "dtrain")
    figures = {"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds, "median": table, "ratios": ratios}
    if "api" in tools:  # the same, against the request to a running server
        figures["ratios_api"] = summarize(rounds, against="api")[1]
        print_ratios(figures["ratios_api"], "api")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
