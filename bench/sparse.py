"""A 1 GiB file of holes: snapshot and restore times, and the disk the restored copy takes.

    .venv/bin/python bench/sparse.py --tree /tmp/old_ab --workdir /work/tmp/sparse
    .venv/bin/python bench/sparse.py --tree . --workdir /work/tmp/sparse

--tree is the dtrain checkout whose storage code runs (an older one for a before/after); the
work folder (a fresh dtrain home in it) is removed at the end. Prints one JSON line.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import ab  # the checkout check (bench/ is this script's folder, first on sys.path)


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=ab.checkout, default=Path(__file__).resolve().parents[1],
                        help="the dtrain checkout whose storage code runs (default: this one)")
    parser.add_argument("--workdir", type=Path, required=True, help="scratch folder (on the file system to test)")
    parser.add_argument("--gib", type=int, default=1, help="size of the file of holes, GiB (1-1024)")
    args = parser.parse_args()
    if not 1 <= args.gib <= 1024:
        parser.error(f"--gib {args.gib} is out of range: give 1 to 1024")
    if args.workdir.exists():
        parser.error(f"--workdir {args.workdir} exists: give a new folder (it is removed at the end)")
    sys.path.insert(0, str(args.tree.resolve()))
    from dtrain.storage.volumes import Storage

    try:
        store = Storage(args.workdir / "home")
        store.create_volume("v")
        with open(store.volume_path("v") / "holes.img", "wb") as f:
            f.truncate(args.gib << 30)
        t = time.perf_counter()
        store.create_snapshot("v", name="s")
        snap = time.perf_counter() - t
        t = time.perf_counter()
        store.restore_snapshot("s", to="w")
        restore = time.perf_counter() - t
        used = os.stat(store.volume_path("w") / "holes.img").st_blocks * 512
        store.close()
    finally:
        shutil.rmtree(args.workdir, ignore_errors=True)
    print(json.dumps({"tree": str(args.tree), "gib": args.gib, "snapshot_s": round(snap, 3),
                      "restore_s": round(restore, 3), "restored_mib_on_disk": used >> 20}))


if __name__ == "__main__":
    main()
