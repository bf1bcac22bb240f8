"""A/B of manifest parsing (its checks included) between two checkouts, in one process, interleaved.

The snapshot, restore, diff and verify paths read manifests with `Manifest.parse`; this replays,
for each, the parses one command makes (as counted on a 15,000-path volume: an unchanged volume's
snapshot, a restore and a diff against the volume now read one manifest; a diff of two snapshots
reads both; a verify's sweep reads every manifest and its check reads them again), with each
checkout's own `dtrain/storage/manifest.py` (it imports nothing of dtrain) loaded side by side.
Each replay starts as a fresh command would: whatever the module remembers is forgotten first.
Times are CPU time of this thread (the machine's other load barely moves them), medians over
rounds, the order of the two flipping every round.

    git worktree add --detach /tmp/old HEAD~1
    .venv/bin/python bench/manifest_checks.py --old /tmp/old --new . --workdir /work/tmp/mc --repeats 30
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ab  # noqa: E402
import snapshots  # noqa: E402  (the generator)
from dtrain.names import counted  # noqa: E402

# the manifests each command parses: 'a' the base snapshot's, 'b' a later one's (2 snapshots stored)
PATHS = {"snapshot (unchanged volume)": "a", "restore": "a", "diff A (volume now)": "a", "diff A B": "ab",
         "verify A": "aba", "verify (all)": "abab"}


def _module(tree: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, tree / "dtrain" / "storage" / "manifest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _blobs(workdir: Path, files: int) -> dict[str, bytes]:
    """Two stored manifests of a generated volume (this checkout's code makes them, once)."""
    from dtrain.storage import Storage

    home = workdir / "home"
    storage = Storage(home)
    if not storage.list_snapshots():
        vol = storage.create_volume("bench")
        snapshots.generate(vol.path, files, max(1, files // 1000), 0)  # paths matter here, not bytes
        storage.create_snapshot("bench", name="a", progress=False)
        for i, p in enumerate(sorted(vol.path.rglob("*.json"))[: files // 100]):
            p.write_text(f'{{"rewritten": {i}}}')
        storage.create_snapshot("bench", name="b", progress=False)
    out = {s.name: (storage.engine.root / "manifests" / f"{s.id}.json.gz").read_bytes()
           for s in storage.list_snapshots()}
    storage.close()
    return out


def _replay(module, blobs: dict[str, bytes], which: str) -> float:
    getattr(module, "_SOUND", {}).clear()  # a fresh command remembers nothing
    t = time.thread_time()
    for k in which:
        module.Manifest.parse(blobs[k], k)
    return time.thread_time() - t


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    ab.add_checkouts(parser, repeats=30, unit="replays of each path")
    parser.add_argument("--workdir", type=Path, required=True, help="scratch folder for the generated store")
    parser.add_argument("--files", type=int, default=10_000, help="files in the volume (paths: about 1.5x)")
    args = ab.checked(parser, argv)
    ab.bounded(parser, ("--files", args.files, 100, 10_000_000))
    blobs = _blobs(args.workdir, args.files)
    modules = {"old": _module(args.old.resolve(), "manifest_old"), "new": _module(args.new.resolve(), "manifest_new")}
    entries = len(modules["new"].Manifest.parse(blobs["a"]).entries)
    print(f"{entries} entries per manifest; CPU ms per command's parses, median of {counted(args.repeats, 'round')}")
    print(f"{'path':30s} {'parses':>6s} {'old':>9s} {'new':>9s} {'old/new':>8s}")
    for path, which in PATHS.items():
        times = {k: [] for k in modules}
        for i in range(args.repeats):
            for k in ab.order(i):
                times[k].append(_replay(modules[k], blobs, which))
        old, new = (statistics.median(times[k]) * 1e3 for k in ("old", "new"))
        print(f"{path:30s} {len(which):6d} {old:9.1f} {new:9.1f} {old / new:7.2f}x")


if __name__ == "__main__":
    main()
