"""BLAKE3 for new content; snapshots written with sha256 (every store before the switch) stay
readable, restorable, verifiable and usable as the base of an incremental snapshot."""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

import blake3

from dtrain.storage import hashing
from dtrain.storage.engine import Engine
from dtrain.storage.testing import tree_state


def _snapshot(engine: Engine, src: Path, base=None) -> str:
    with engine.pin():
        manifest, _ = engine.capture(src, base=base)
        manifest_id = uuid.uuid4().hex
        engine.commit(manifest_id, manifest)
    return manifest_id


def test_digest_names_its_algorithm():
    data = b"x" * 100
    assert hashing.digest(data) == "b3-" + blake3.blake3(data).hexdigest()
    assert hashing.digest(data, "sha256") == hashlib.sha256(data).hexdigest()
    for name in (hashing.digest(data), hashing.digest(data, "sha256")):
        h = hashing.hasher_for(name)
        h.update(data)
        assert hashing.matches(name, h)
        assert hashing.algorithm_of(name) == ("blake3" if name.startswith("b3-") else "sha256")


def test_a_sha256_store_stays_readable_after_the_switch(tmp_path):
    src = tmp_path / "vol"
    (src / "sub").mkdir(parents=True)
    (src / "old.bin").write_bytes(os.urandom(300_000))
    (src / "sub/kept.bin").write_bytes(os.urandom(50_000))
    store = tmp_path / "store"
    old_engine = Engine(store, chunk_size=64 << 10, hash_algorithm="sha256", racy_window_ns=0)
    old_id = _snapshot(old_engine, src)
    before = tree_state(src)
    old_engine.close()
    old = Engine(store, chunk_size=64 << 10, racy_window_ns=0).load(old_id)
    assert old.hash == "sha256" and all(len(d) == 64 and "-" not in d for d in old.digests())

    engine = Engine(store, chunk_size=64 << 10, racy_window_ns=0)  # today's default: BLAKE3
    (src / "new.bin").write_bytes(os.urandom(100_000))
    new_id = _snapshot(engine, src, base=old)
    new = engine.load(new_id)
    assert new.hash == "blake3"
    by_path = {e.path: e for e in new.entries}
    assert by_path["sub/kept.bin"].chunks == {e.path: e for e in old.entries}["sub/kept.bin"].chunks  # not re-read
    assert all(d.startswith("b3-") for d in by_path["new.bin"].chunks)
    with engine.pin():
        engine.materialize(engine.load(old_id), tmp_path / "restored")
        stats = engine.verify([old_id, new_id])
    assert tree_state(tmp_path / "restored") == before
    assert not stats.corrupt and not stats.missing and stats.objects == len(old.digests() | new.digests())
    engine.close()
