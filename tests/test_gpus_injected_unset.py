"""A GPU job submitted with DTRAIN_GPUS unset, resumed or queued where DTRAIN_GPUS is set: told as
the server's warning tells it (a job of before, whose setting is unknown, is not)."""

from __future__ import annotations

import pytest

from conftest import job_store
from dtrain import JobSpec
from dtrain.backends.local import scheduler
from dtrain.errors import QuotaError


def _jobs(home, status: str) -> None:
    """'real' (submitted with DTRAIN_GPUS unset) and 'old' (a job of before: nothing recorded), 4 GPUs each."""
    with job_store(home) as store:
        for name in ("real", "old"):
            store.insert_job(JobSpec(name=name, command=("true",), gpu=4), cwd="/", node="here", gpus_injected=None)
            if status != "Pending":
                assert store.set_status(name, status, status.lower())
        store.conn.execute("UPDATE jobs SET gpus_injected=NULL WHERE name='old'")
        store.conn.commit()


def test_resume_with_dtrain_gpus_set_names_the_unset_submit_and_how_to_resume_it(tmp_path, monkeypatch):
    """It said 'needs 4 GPUs ... but this machine has 2; lower --processes or --gpu', of a job that fits
    the GPUs it was submitted with, as it does for a job whose submit is unknown."""
    from dtrain.backends.local.backend import LocalBackend

    home = tmp_path / "home"
    monkeypatch.setenv("DTRAIN_HOME", str(home))
    _jobs(home, "Suspended")
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    backend = LocalBackend(home)
    with pytest.raises(QuotaError) as told:
        backend.resume("real")
    assert str(told.value) == (
        "job 'real' was scheduled with DTRAIN_GPUS unset but this process sees 2 GPUs (DTRAIN_GPUS=2): start it "
        "with the same inventory, e.g. 'env -u DTRAIN_GPUS dtrain server' or 'env -u DTRAIN_GPUS dtrain resume real'")
    with pytest.raises(QuotaError) as unknown:
        backend.resume("old")
    assert str(unknown.value).endswith("but this machine has 2; lower --processes or --gpu"), str(unknown.value)
    assert [backend.get(n).status for n in ("real", "old")] == ["Suspended", "Suspended"]  # nothing changed


def test_a_queued_job_submitted_with_dtrain_gpus_unset_says_how_to_queue_it_with_its_gpus(tmp_path, monkeypatch):
    """Its supervisor under DTRAIN_GPUS=2 said 'it never starts here; delete it and submit it with
    fewer', as of a job whose submit is unknown, though it fits the GPUs it was submitted with."""
    home = tmp_path / "home"
    monkeypatch.setenv("DTRAIN_HOME", str(home))
    _jobs(home, "Pending")
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    with job_store(home) as store:
        for name in ("real", "old"):
            assert scheduler.try_allocate(store, JobSpec(name=name, command=("true",), gpu=4), ["0", "1"]) is None
        real, old = store.job("real")["message"], store.job("old")["message"]
    assert real == ("waiting: needs 4 GPUs but this machine now has 2 (its supervisor has DTRAIN_GPUS=2; it was "
                    "submitted with DTRAIN_GPUS unset): it never starts so; 'dtrain suspend real', then "
                    "'env -u DTRAIN_GPUS dtrain resume real' queues it with the GPUs it was submitted with, or delete "
                    "it and submit it with fewer"), real
    assert old.startswith("waiting: needs 4 GPUs but this machine now has 2: it never starts here;"), old
