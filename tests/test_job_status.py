"""A local job's status has one owner (JobStore) and one table of allowed changes."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

import dtrain
from dtrain.backends.local import scheduler
from dtrain.backends.local.store import TRANSITIONS, JobStore
from dtrain.spec import JobSpec

STATUSES = ("Pending", "Running", "Succeeded", "Failed", "Deleted", "Suspended")
# The path that brings a new (Pending) job to each status through allowed changes only.
ROUTE = {"Pending": (), "Running": ("Running",), "Succeeded": ("Running", "Succeeded"),
         "Failed": ("Failed",), "Deleted": ("Deleted",), "Suspended": ("Running", "Suspended")}


def job_in(store: JobStore, name: str, status: str) -> JobSpec:
    spec = JobSpec(name=name, command=("true",), gpu=1)
    store.insert_job(spec, cwd="/", node="here")
    for step in ROUTE[status]:
        assert store.set_status(name, step, f"to {step}")
    assert store.status(name) == status
    return spec


def test_the_table_pins_the_lifecycle():
    assert set(TRANSITIONS) == set(STATUSES)
    # Pending: a relaunch; Succeeded: a preempted job that had ended before it could be stopped
    assert TRANSITIONS["Pending"] == {"Pending", "Running", "Succeeded", "Failed", "Deleted", "Suspended"}
    # Running: a restart; Pending: preempted (queued again)
    assert TRANSITIONS["Running"] == {"Running", "Pending", "Succeeded", "Failed", "Deleted", "Suspended"}
    assert TRANSITIONS["Suspended"] == {"Pending", "Deleted"}  # resumed (queued again); deleted
    assert TRANSITIONS["Succeeded"] == TRANSITIONS["Failed"] == {"Deleted"}
    assert TRANSITIONS["Deleted"] == set()


@pytest.mark.parametrize("old,new", list(itertools.product(STATUSES, STATUSES)))
def test_every_change_follows_the_table(store, old, new):
    job_in(store, "j", old)
    events = len(store.events("j"))
    allowed = new in TRANSITIONS[old]
    assert store.set_status("j", new, "why") is allowed
    row = store.job("j")
    assert row["status"] == (new if allowed else old)
    assert len(store.events("j")) == events + allowed  # a refused change leaves no trace
    if allowed and new in ("Succeeded", "Failed", "Deleted"):
        assert row["finished"] is not None
    if allowed and new == "Suspended":
        assert row["finished"] is None and store.job_devices("j") == []  # not ended, and holds nothing


def test_allocation_and_running_are_one_transaction(store):
    spec = job_in(store, "a", "Pending")
    assert scheduler.try_allocate(store, spec, ["0", "1"]) == ["0"]
    row = store.job("a")
    assert (row["status"], row["started"] is not None, store.job_devices("a")) == ("Running", True, ["0"])
    assert [e["status"] for e in store.events("a")] == ["Pending", "Running"]
    assert store.set_status("a", "Succeeded", "done") and store.job_devices("a") == []  # released with it


def test_a_suspended_job_gives_its_devices_back_and_is_allocated_again_once_resumed(store):
    spec = job_in(store, "a", "Pending")
    assert scheduler.try_allocate(store, spec, ["0"]) == ["0"]
    assert store.set_status("a", "Suspended", "suspended") and store.job_devices("a") == []
    assert scheduler.try_allocate(store, spec, ["0"]) is None  # not while Suspended
    store.resume("a", "resumed")
    assert scheduler.try_allocate(store, spec, ["0"]) == ["0"] and store.status("a") == "Running"


def test_a_deleted_job_is_never_allocated(store):
    spec = job_in(store, "gone", "Deleted")
    assert scheduler.try_allocate(store, spec, ["0"]) is None
    assert store.allocations() == {} and store.status("gone") == "Deleted"


def test_update_cannot_bypass_the_table(store):
    job_in(store, "j", "Succeeded")
    with pytest.raises(AssertionError):
        store.update("j", status="Running")


def test_only_the_store_writes_the_status_column():
    """No SQL outside store.py sets jobs.status or inserts job events."""
    pkg = Path(dtrain.__file__).parent
    for path in pkg.rglob("*.py"):
        if path == pkg / "backends/local/store.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                sql = " ".join(node.value.split()).upper()
                assert not (sql.startswith("UPDATE JOBS") or "INTO JOB_EVENTS" in sql), f"{path}: {node.value}"
