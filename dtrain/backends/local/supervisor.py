"""One detached supervisor per local job: queue, launch, restart, snapshot, record.

`dtrain submit` stores the job as Pending and starts `python -m dtrain.backends.local.supervisor
HOME NAME` in a new session, then exits; the job outlives it. The supervisor
1. waits for its gang of devices (scheduler.try_allocate, polled);
2. runs the launch plan (bwrap -> torchrun/mpirun -> rankrun -> command);
3. restarts mpi and single-process jobs up to --max-restarts (torchrun restarts its own workers);
4. on success, snapshots the requested volume and links the snapshot to the job;
5. records the final status, releasing the devices. SIGTERM (dtrain delete) stops the job.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dtrain.backends.local import launch, notebook, scheduler
from dtrain.backends.local.devices import inventory
from dtrain.backends.local.store import JobStore
from dtrain.spec import JobSpec

POLL_S = 0.25
GRACE_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_records(job_dir: Path) -> list[dict]:
    out = []
    for path in sorted((job_dir / "ranks").glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return out


def kill_ranks(job_dir: Path, sig: int = signal.SIGKILL) -> None:
    """Last resort: signal every rank's command that is still alive."""
    for rec in rank_records(job_dir):
        if rec.get("pid") and rec.get("exit_code") is None:
            try:
                os.kill(rec["pid"], sig)
            except (ProcessLookupError, PermissionError):
                pass


class Supervisor:
    def __init__(self, home: Path, name: str):
        self.home, self.name = home, name
        self.store = JobStore(home / "state.db")
        row = self.store.job(name)
        self.spec = JobSpec.from_dict(json.loads(row["spec"]))
        self.cwd = self.spec.working_dir or row["cwd"]
        self.job_dir = home / "jobs" / name
        self._storage = None
        self.proc: subprocess.Popen | None = None
        self.stopping = False

    @property
    def storage(self):
        """Opened only for jobs with volumes or a snapshot, so plain jobs start faster."""
        if self._storage is None:
            from dtrain.storage.volumes import Storage
            self._storage = Storage(self.home)
        return self._storage

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        devices = self._wait_for_devices()
        if devices is None:
            return 0
        groups = scheduler.split_devices(devices, self.spec.processes, self.spec.gpu)
        mounts = [launch.Mount(source=self.storage.volume_path(v.volume), target=v.mount_path,
                               read_only=v.read_only) for v in self.spec.resolved_volumes()]
        source = self._source_snapshot()
        attempt, code = 0, 1
        while not self.stopping:
            code = self._run_once(mounts, groups, attempt)
            if code == 0 or self.stopping or self.spec.launcher == "torchrun" or attempt >= self.spec.max_restarts:
                break
            attempt += 1
            self.store.update(self.name, restarts=attempt)
            self.store.add_event(self.name, "Running", f"restarting after exit code {code} "
                                                       f"(restart {attempt} of {self.spec.max_restarts})")
        self._finish(code, source)
        return 0

    def _wait_for_devices(self) -> list[str] | None:
        ids = [g.index for g in inventory()]
        while True:
            got = scheduler.try_allocate(self.store, self.spec, ids)
            if got is not None:
                return got
            if self.stopping or not self.job_dir.exists() or self.store.job(self.name)["status"] != "Pending":
                return None  # deleted, or its DTRAIN_HOME was removed: nobody is waiting any more
            time.sleep(POLL_S)

    def _run_once(self, mounts, groups, attempt: int) -> int:
        port = free_port()
        token = None
        if self.spec.notebook:  # recorded (0600) before it starts, for `dtrain notebook open`
            access = notebook.NotebookAccess.new(port)
            notebook.write_access(self.job_dir, access)
            token = access.token
        plan = launch.plan(self.spec, job_dir=self.job_dir, cwd=self.cwd, mounts=mounts, devices=groups,
                           master_port=port, attempt=attempt, notebook_token=token)
        with open(self.job_dir / "launcher.log", "a") as out:
            out.write(f"--- attempt {attempt}: {' '.join(plan.argv)}\n")
            out.flush()
            try:
                self.proc = subprocess.Popen(plan.argv, env={**os.environ, **plan.env}, cwd=plan.cwd,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            except OSError as err:
                out.write(f"cannot start the launcher: {err}\n")
                return 127
            code = self.proc.wait()
        return 128 - code if code < 0 else code

    def _source_snapshot(self) -> str | None:
        """The snapshot the job's data started from: the volume's head (latest taken or restored)."""
        volume = self.spec.snapshot_volume
        if volume is None:
            return None
        try:
            return self.storage.get_volume(volume).head_snapshot
        except Exception:  # lineage is best effort; a missing volume fails the snapshot later
            return None

    def _finish(self, code: int, source: str | None) -> None:
        if self.stopping:
            return  # dtrain delete already recorded Deleted
        if code != 0:
            self.store.set_status(self.name, "Failed", self._failure_message(code), exit_code=code)
            return
        volume = self.spec.snapshot_volume
        if volume is None:
            self.store.set_status(self.name, "Succeeded", "all processes exited 0", exit_code=0)
            return
        self.store.add_event(self.name, "Running", f"taking a snapshot of volume {volume}")
        try:
            snap = self.storage.create_snapshot(volume, job=self.name, job_spec=self.spec.to_dict(),
                                                source_snapshot=source)
        except Exception as err:  # the training result stays on the volume; say how to snapshot it
            self.store.set_status(self.name, "Failed", f"training succeeded but the snapshot of volume {volume} "
                                  f"failed: {err}; take it with 'dtrain snapshot create {volume} --job {self.name}'",
                                  exit_code=0)
            return
        self.store.set_status(self.name, "Succeeded", f"all processes exited 0; snapshot {snap.name}",
                              exit_code=0, snapshot=snap.name, source_snapshot=source)

    def _failure_message(self, code: int) -> str:
        failed = [r for r in rank_records(self.job_dir) if r.get("exit_code") not in (None, 0)]
        if failed:
            first = failed[0]
            return f"rank {first['rank']} exited with code {first['exit_code']}; see 'dtrain logs {self.name} --rank {first['rank']}'"
        return f"the launcher exited with code {code}; see {self.job_dir / 'launcher.log'}"

    def _on_term(self, _sig, _frame) -> None:
        """Ask the launcher to stop; force it after a grace period. Never block in a handler."""
        self.stopping = True
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            timer = threading.Timer(GRACE_S, self._force_stop)
            timer.daemon = True
            timer.start()

    def _force_stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
        kill_ranks(self.job_dir)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    home, name = Path(argv[0]), argv[1]
    sup = Supervisor(home, name)
    try:
        return sup.run()
    except Exception as err:  # never leave a job Running without a supervisor
        sup.store.set_status(name, "Failed", f"supervisor error: {err}")
        raise
    finally:
        kill_ranks(sup.job_dir)


if __name__ == "__main__":
    sys.exit(main())
