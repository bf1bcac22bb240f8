"""One detached supervisor per local job: queue, launch, restart, snapshot, record.

`dtrain submit` stores the job as Pending and starts `python -m dtrain.backends.local.supervisor
HOME NAME` in a new session, then exits; the job outlives it. The supervisor
1. waits for its gang of devices (scheduler.try_allocate, polled);
2. runs the launch plan (bwrap -> torchrun/mpirun -> rankrun -> command);
3. after a failure, relaunches the whole gang (every rank, every launcher) up to --max-restarts
   times with exponential backoff; the workloads resume from their newest checkpoint. Each
   attempt's event names the failing rank, its exit code or signal, and the step resumed from;
4. on success, snapshots the requested volume and links the snapshot to the job;
5. records the final status, releasing the devices. SIGTERM (dtrain delete, dtrain suspend) stops
   the job: the launcher gets SIGTERM, the workloads checkpoint, and after GRACE_S everything is
   killed; the command recorded the job's status (Deleted, Suspended) before it sent the signal.

A supervisor started by a later `dtrain` command after the first one was lost (killed, machine
rebooted) finds the job Running with its devices still held, and continues with the next attempt.

Steps 4 and 5, and the words of a failure, are outcome.py's (JobOutcome, a mixin of Supervisor).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dtrain import db
from dtrain.backends.local import launch, notebook, scheduler
from dtrain.backends.local.cgroups import leave_rank_cgroups
from dtrain.backends.local.devices import inventory
# How the job ends (its failure worded, its last record written however busy or full): outcome.py
from dtrain.backends.local.outcome import (FINAL_WRITE_S,  # noqa: F401  (re-exported)
                                           PORT_TRIES, JobOutcome, written_when_unlocked)
from dtrain.procs import Ident, signal_session
from dtrain.replace import replace_file
from dtrain.backends.local.ranks import (GRACE_S, LogRefused, kill_ranks, local_command, open_log, own_causes,
                                         rank_records, record_log_starts, supervisor_token)
from dtrain.backends.local.store import JobStore
from dtrain.spec import JobSpec

POLL_S = 0.25
BACKOFF_S = 1.0  # first restart delay; doubles each restart
BACKOFF_MAX_S = 60.0
REGISTER_S = 30.0  # a new supervisor waits this long for its starter to record its pid, else leaves
ADOPT_S = 2.0  # a new job's supervisor records itself when its submit has not done so by then (killed)
RECONCILE_S = 5.0  # a waiting supervisor looks this often for lost jobs that hold up its turn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backoff(restart: int) -> float:
    """Seconds to wait before restart number `restart` (1, 2, ...): 1, 2, 4, ... capped at BACKOFF_MAX_S."""
    return min(BACKOFF_S * 2 ** (restart - 1), BACKOFF_MAX_S)


class Supervisor(JobOutcome):
    def __init__(self, home: Path, name: str):
        self.home, self.name = home, name
        self.store = JobStore(home / "state.db")
        self.db_file = _file_id(home / "state.db")  # the file it opened: the job's record is there
        row = self.store.job(name)
        self.spec = JobSpec.from_stored(json.loads(row["spec"]))
        self.uid = self.store.uid(row)  # its snapshot's link to this run of the name
        self.cwd = self.spec.working_dir or row["cwd"]
        self.job_dir = home / "jobs" / name
        self._storage = None
        self.proc: subprocess.Popen | None = None
        self.stopping = False
        self._stop_asked: subprocess.Popen | None = None  # the launcher already sent SIGTERM
        self.owner = False  # set once the job's row names this process as its supervisor
        self.refused: str | None = None  # why the launcher was not started: no restart can help
        self.idle: str | None = None  # why an idle notebook was suspended (--idle-timeout)
        self.port_taken: int | None = None  # the port another program took before the notebook's Jupyter bound it
        self.preempted = False  # moved back to Pending by the scheduler, for an in-quota job
        self._timer: threading.Timer | None = None  # the SIGKILL after the grace period
        self.unrestarted = 0  # restarts left when a failure was not restarted: the disk was full (_hopeless)
        self.reserve_given = False  # the home's reserve was given up to record how the job ended (_recorded)

    def cmd(self, words: str) -> str:
        """`dtrain WORDS` as a message this job's record keeps names it, as the Client's hints do: with
        -p and --backend where config.yaml sends the default project elsewhere (read when said: the
        user may have changed it since the job started); plain where config.yaml cannot be read."""
        return local_command(self.home, words, self.spec.project)

    @property
    def storage(self):
        """Opened only for jobs with volumes or a snapshot, so plain jobs start faster."""
        if self._storage is None:
            from dtrain.storage.volumes import Storage
            self._storage = Storage(self.home)
        return self._storage

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        if not self._registered():
            return 0
        row = self.store.job(self.name)
        attempt = row["restarts"]
        mounts, source = None, None
        while True:  # once, or again after each preemption
            if row["status"] == "Running":  # relaunched after the first supervisor was lost
                devices = self.store.job_devices(self.name)
            else:
                if self.store.job_devices(self.name):  # preempted, and the supervisor it had was lost while it stopped
                    self._requeue()
                devices = self._wait_for_devices()
                if devices is None:
                    return 0
            if mounts is None:
                mounts = [launch.Mount(source=self.storage.volume_path(v.volume), target=v.mount_path,
                                       read_only=v.read_only) for v in self.spec.resolved_volumes()]
                source = self._source_snapshot()
            code, attempt = self._attempts(mounts, scheduler.split_devices(devices, self.spec.processes,
                                                                           self.spec.gpu), attempt)
            if not self.preempted or self.stopping or (code == 0 and not self._stopped_by_preemption()):
                break  # 0 before the preemption's SIGTERM: it ended before it could be stopped, and is done
            self._requeue()
            self.preempted = False
            row = self.store.job(self.name)
        self._finish(code, source)
        return 0

    def _attempts(self, mounts, groups, attempt: int) -> tuple[int, int]:
        """Launch the gang, and again after each failure while restarts are left; stops early when
        the job is stopped or preempted. (last exit code, attempt number)."""
        code, port_tries = 1, 1
        while not self.stopping and not self._preempted():
            code = self._run_once(mounts, groups, attempt)
            if self._preempted() and (code != 0 or self._stopped_by_preemption()):
                break  # stopped for an in-quota job: not a failure, no restart spent, nor done if it exited 0
            if code != 0 and not self.stopping and self.port_taken is not None and port_tries < PORT_TRIES:
                # Not the notebook's failure (Kubeflow's controller would start its pod again): no restart spent
                port_tries += 1
                self.store.add_event(self.name, "Running", f"another program took port {self.port_taken} before "
                                     f"Jupyter listened on it; starting Jupyter again on a new port")
                continue
            if code == 0 or self.stopping or attempt >= self.spec.max_restarts:
                break
            if self._hopeless():  # its message says why its restarts were not tried (_failure_message)
                self.unrestarted = self.spec.max_restarts - attempt
                break
            if not self.store.set_status(self.name, "Running", f"attempt {attempt} failed: "
                                         f"{self._failure_message(code)}; restarting every rank in "
                                         f"{backoff(attempt + 1):g} s (restart {attempt + 1} of "
                                         f"{self.spec.max_restarts})", restarts=attempt + 1, only_from="Running"):
                self._preempted()
                break  # deleted or preempted meanwhile
            attempt += 1  # the one that failed is attempt - 1 (its DTRAIN_ATTEMPT, its launcher.log line)
            self._sleep(backoff(attempt))
        return code, attempt

    def _preempted(self) -> bool:
        """Whether the scheduler moved this running job back to Pending for an in-quota job (read
        from the database; remembered until the job is queued again)."""
        if not self.preempted and not self.stopping:
            self.preempted = self.store.status(self.name) == "Pending"
        return self.preempted

    def _stopped_by_preemption(self) -> bool:
        """Whether the last launcher got the preemption's SIGTERM: a workload that writes its
        checkpoint and exits 0 on SIGTERM (a graceful stop) is stopped then, not done."""
        return self.preempted and self.proc is not None and self._stop_asked is self.proc

    def _requeue(self) -> None:
        """A preempted job's launcher has exited: stop what is left of its ranks, then let its
        devices go; `_wait_for_devices` queues it again (nothing if it was deleted or suspended
        meanwhile: the command that did so releases them)."""
        if self._timer is not None:  # the grace period's SIGKILL is for the launcher that stopped, never the next
            self._timer.cancel()
        kill_ranks(self.job_dir)
        self.store.release_preempted(self.name)

    def _registered(self) -> bool:
        """Wait until the command that started us has recorded our pid and start time; a loser of a
        relaunch race leaves. The start time too: a lost supervisor's record names a dead process,
        whose pid a new supervisor (one whose starter then loses the race) may have been given."""
        me = Ident.of(os.getpid())
        token = supervisor_token(me) if me is not None else None
        started = time.monotonic()
        deadline = started + REGISTER_S
        while time.monotonic() < deadline and not self.stopping:
            row = self.store.job(self.name)
            if row["supervisor_pid"] == os.getpid() and row["supervisor_start"] == token:
                self.owner = True
                return True
            if row["status"] not in ("Pending", "Running"):
                return False
            # A new job nobody recorded a supervisor for: its submit was killed between the two
            # writes. Recording ourselves (from none: a starter still alive then finds us there)
            # spares the queue a job that would wait LOST_AFTER_S to be called "never started".
            if row["supervisor_pid"] is None and token is not None and time.monotonic() - started > ADOPT_S:
                try:
                    self.store.replace_supervisor(self.name, old=(None, None), pid=os.getpid(), token=token)
                except Exception as err:
                    if not db.no_room(err):
                        raise
                    # A full disk refused it: the job, which none other supervises, ends saying so (it
                    # died with a traceback in supervisor.log, and the job read "lost")
                    row = self.store.job(self.name)
                    if row["supervisor_pid"] is None and row["status"] == "Pending":
                        self.fail_for_room(err)
                    return False
                continue
            time.sleep(0.05)
        return False

    def _sleep(self, seconds: float) -> None:
        """A restart's backoff: cut short when the job is stopped or preempted (its GPUs, idle
        meanwhile, are wanted by the job that preempted it)."""
        deadline = time.monotonic() + seconds
        while not self.stopping and not self._preempted() and time.monotonic() < deadline:
            time.sleep(min(POLL_S, deadline - time.monotonic()))

    def _wait_for_devices(self) -> list[str] | None:
        ids = [g.index for g in inventory()]
        backend, next_check = None, time.monotonic() + RECONCILE_S
        while True:
            got = scheduler.try_allocate(self.store, self.spec, ids, at_start=self._data_sources)
            if got is not None:
                return got
            if not self.job_dir.is_dir():  # removed by hand (or its whole DTRAIN_HOME): nowhere to run
                self.store.set_status(self.name, "Failed", f"its folder {self.job_dir} was removed while it waited "
                                      f"for its turn; submit it again")
                return None
            if self.stopping or self.store.job(self.name)["status"] != "Pending":
                return None  # deleted: nobody is waiting any more
            if self._forgotten():
                return None
            if time.monotonic() >= next_check:  # a lost job ahead or holding devices: relaunched or Failed, as `list` does
                try:
                    if backend is None:
                        from dtrain.backends.local.backend import LocalBackend
                        backend = LocalBackend(self.home)
                    backend.reconcile_others(self.name)
                except Exception as err:  # noqa: BLE001 - the next command does it instead; this job waits on
                    print(f"supervisor of job {self.name}: could not check the jobs ahead of it: {err}",
                          file=sys.stderr, flush=True)
                next_check = time.monotonic() + RECONCILE_S
            time.sleep(POLL_S)

    def _run_once(self, mounts, groups, attempt: int) -> int:
        port = free_port()
        token, access = None, None
        if self.spec.notebook:  # recorded (0600) before it starts, for `dtrain notebook open`
            access = notebook.NotebookAccess.new(port)
            notebook.write_access(self.job_dir, access)
            token = access.token
        # A job with volumes sees only those: not the other volumes, nor the host folder of one it mounts :ro,
        # nor the snapshot store (every volume's snapshotted content is there, as a pod sees no VolumeSnapshot's).
        # A notebook is the user's own workspace, as their shell is: `dtrain submit`, `snapshot create` run
        # in its terminal need the volumes where dtrain keeps them (a Kubeflow notebook runs kubectl too).
        hidden = (launch.hidden_roots([*self.storage.volume_roots(), self.storage.engine.root], cwd=self.cwd, mounts=mounts)
                  if mounts and not self.spec.notebook else [])
        plan = launch.plan(self.spec, job_dir=self.job_dir, cwd=self.cwd, mounts=mounts, devices=groups,
                           master_port=port, attempt=attempt, notebook_token=token,
                           cores=self.store.job_cores(self.name), hidden=hidden)
        _clear(self.job_dir / "ranks")  # this attempt's records only
        try:  # where this attempt's lines begin in each rank's log: `logs` shows them, `logs --previous` those before
            record_log_starts(self.job_dir, attempt, self.spec.processes)
        except OSError as err:  # a full disk: `logs` then shows the attempt before's lines too; the job runs on
            with contextlib.suppress(OSError):  # the line is on that full disk too: unwritten, it must not end us
                print(f"supervisor of job {self.name}: could not record where attempt {attempt}'s logs begin: {err}",
                      file=sys.stderr, flush=True)
        try:  # never through a link or into a fifo that the job's processes left at its name
            fd = open_log(self.job_dir, "launcher.log")
        except LogRefused as err:
            self.refused = f"the launcher was not started: {err}"
            return 127
        with os.fdopen(fd, "a") as out:
            out.write(f"--- attempt {attempt}: {' '.join(plan.argv)}\n")
            out.flush()
            try:
                # Its own session, so a lost launcher's tree can be found; it dies with us (PDEATHSIG).
                self.proc = subprocess.Popen(plan.argv, env={**launch.inherited_env(os.environ), **plan.env}, cwd=plan.cwd,
                                             stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                             start_new_session=True, preexec_fn=_die_with_parent)
            except OSError as err:
                out.write(f"cannot start the launcher: {err}\n")
                return 127
            ident = Ident.of(self.proc.pid)
            try:
                if ident is not None and not self._launcher_recorded(ident):
                    signal_session(ident, signal.SIGKILL)  # nothing of it could be found, nor its ranks' records kept
                    self.proc.wait()
                    self.port_taken = None
                    return 127
                if self.stopping:  # SIGTERM came while the launcher was being started: _on_term saw none
                    self._stop_launcher()
                code = self._watch(attempt, access)
            except BaseException:  # a full disk, a bug: raised on, never leaving its training running unwatched
                self._stop_session(ident)
                raise
        signal_session(ident, signal.SIGKILL)  # the attempt is over: nothing of it may linger
        self.port_taken = port if (access is not None and code != 0 and not self.stopping
                                   and notebook.taken_by_another(self.job_dir, port)) else None
        return 128 - code if code < 0 else code

    def _stop_session(self, ident: Ident | None) -> None:
        """The launcher's session (its ranks too) killed and the launcher reaped, as an error ends
        the attempt: a supervisor that raises on (in-process, or before PDEATHSIG) leaves nothing running."""
        signal_session(ident, signal.SIGKILL)
        if self.proc.returncode is None:
            self.proc.kill()  # our own unreaped child: its pid cannot name another process yet
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=GRACE_S)

    def _launcher_recorded(self, ident: Ident) -> bool:
        """launcher.json written (how `delete` and a later supervisor find the launcher); False, with
        the job's words in self.refused, where the job's folder was removed first (`rm -r` by hand, or
        a race with one): no restart can run there. A full disk's refusal is raised (fail_for_room)."""
        try:
            _write_json(self.job_dir / "launcher.json", ident.to_record())
            return True
        except OSError as err:
            if db.no_room(err) or self.job_dir.is_dir():
                raise
        self.refused = (f"{self.job_dir} was removed (by hand?) as its processes started, so they were stopped: "
                        f"submit the job again")
        return False

    def _watch(self, attempt: int, access: "notebook.NotebookAccess | None" = None) -> int:
        """Wait for the launcher, recording once the step the workload resumed from; a notebook with
        an --idle-timeout is stopped once Jupyter reports nothing ran for that long."""
        noted, timeout = False, self.spec.idle_timeout if access is not None else None
        started, next_ask = time.time(), time.monotonic()
        next_look = next_ask + 1.0
        while True:  # also after the resumed step is noted: its database is looked at every second
            code = self.proc.poll()
            if not noted:
                resumed = [r for r in rank_records(self.job_dir) if r.get("resumed_step") is not None]
                if resumed:
                    first = max(resumed, key=lambda r: r["resumed_step"])
                    when = first.get("resumed_at")
                    # At the time the rank said it, never after the event that ended this run (a
                    # preemption, a suspension that came before the supervisor looked, or before the line)
                    self.store.add_run_event(self.name, "Running",
                                             f"attempt {attempt}: resumed from step {first['resumed_step']}",
                                             when=when if isinstance(when, (int, float)) else time.time())
                    noted = True
            if code is not None:
                return code
            if not self.stopping and time.monotonic() >= next_look:
                next_look = time.monotonic() + 1.0
                if self._forgotten():
                    self.stopping = True
                    self._stop_launcher()
                elif self._preempted():  # as a suspension: SIGTERM, a checkpoint, SIGKILL after the grace period
                    self._stop_launcher()
            if timeout and self.idle is None and time.monotonic() >= next_ask:
                last = notebook.ask_activity(access, started)
                if last is not None and time.time() - last >= timeout:
                    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(last))
                    self.idle = (f"suspended: no kernel or terminal ran for {timeout} s (--idle-timeout), the last "
                                 f"activity at {since}; its GPUs are free, its files stay on its volume; "
                                 f"'{self.cmd(f'resume {self.name}')}' starts it again")
                    # As `dtrain suspend`: recorded first (the devices are free from here), then stopped
                    self.stopping = self.store.set_status(self.name, "Suspended", self.idle, hold=True) or self.stopping
                    self._stop_launcher()
                next_ask = time.monotonic() + notebook.idle_check_interval(timeout)
            time.sleep(POLL_S)

    def _forgotten(self) -> bool:
        """Whether the state database this supervisor records into is no longer the home's (removed, or
        moved away and replaced): no command can see or stop the job any more, and a job submitted
        again under its name would share its folder. Said in supervisor.log; the caller stops."""
        now = _file_id(self.home / "state.db")
        if now == self.db_file or self.db_file is None:
            return False
        print(f"supervisor of job {self.name}: the state database {self.home / 'state.db'} was removed or replaced "
              f"while the job ran, so nothing can see or stop it any more: stopping it", file=sys.stderr, flush=True)
        return True

    def _data_sources(self, conn) -> dict:
        """The job's columns recorded as it moves to Running (in the scheduler's transaction): the
        snapshots its data started from, once (a relaunch or a preempted job started again keeps
        the first start's): for each mounted volume whose content is a snapshot's, its head (the
        latest restored into it or taken of it). Best effort, as lineage is: nothing on an error."""
        volumes = [v.volume for v in self.spec.resolved_volumes()]
        if not volumes:
            return {}
        from dtrain.storage.volumes import volume_heads
        try:
            if conn.execute("SELECT data_sources FROM jobs WHERE name=?", (self.name,)).fetchone()[0] is not None:
                return {}
            return {"data_sources": json.dumps(volume_heads(conn, volumes))}
        except Exception as err:  # noqa: BLE001 - the job runs without its lineage
            print(f"supervisor of job {self.name}: could not record the snapshots its volumes came from: {err}",
                  file=sys.stderr, flush=True)
            return {}

    def _on_term(self, _sig, _frame) -> None:
        """Ask the launcher to stop; force it after a grace period. Never block in a handler."""
        self.stopping = True
        if self.proc is not None and self.proc.returncode is None:
            self._stop_launcher()

    def _stop_launcher(self) -> None:
        if self._stop_asked is self.proc:
            return
        self._stop_asked = self.proc
        self.proc.terminate()
        self._timer = threading.Timer(GRACE_S, self._force_stop, args=(self.proc,))
        self._timer.daemon = True
        self._timer.start()

    def _force_stop(self, proc: subprocess.Popen) -> None:
        if proc is not self.proc:
            return  # a preempted attempt's, stopped in time: the launcher now is the next one's
        if proc.returncode is None:
            proc.kill()
        kill_ranks(self.job_dir)


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _die_with_parent() -> None:
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _clear(folder: Path) -> None:
    """Remove `folder` and what it holds; a link at its name is removed itself, never followed (rmtree
    refuses a link, and the next attempt's rank records would be written wherever it points)."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        folder.unlink(missing_ok=True)
    else:
        shutil.rmtree(folder, ignore_errors=True)


def _write_json(path: Path, data: dict) -> None:
    replace_file(path, json.dumps(data))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    home, name = Path(argv[0]), argv[1]
    leave_rank_cgroups()  # submitted from inside a job: this job is not that job's (its limits, its end)
    sup = Supervisor(home, name)
    try:
        return sup.run()
    except Exception as err:  # never leave a job Running without a supervisor
        if sup.owner and db.no_room(err):  # not a bug: no traceback, the job says what to free
            return sup.fail_for_room(err)
        if sup.owner:
            sup.store.set_status(name, "Failed", f"supervisor error: {err}{own_causes(sup.job_dir)}")
        raise
    finally:
        if sup.owner:
            kill_ranks(sup.job_dir)
            try:  # held while a deleted or suspended job's processes stopped
                sup.store.release(name)
            except Exception as err:  # noqa: BLE001 - the next reconcile releases them, once we are gone
                print(f"supervisor of job {name}: could not release its devices: {err}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
