"""Resuming a suspended job while its processes still stop (ranks Terminating), from the CLI, the
HTTP API and the dashboard; and one wording for a rank `exec` cannot name, at every door."""

from __future__ import annotations

import subprocess
import time

import pytest

from conftest import DTRAIN, SLOW_STOP, Dtrain, rank_record
from server_util import wait_until


def _stopping(dt: Dtrain, tmp_path, name: str = "job") -> subprocess.Popen:
    """Job `name` runs SLOW_STOP and is being suspended (the `dtrain suspend` returned, still waiting
    for it): its rank reads Terminating until the file `gate` appears."""
    (tmp_path / "slow.py").write_text(SLOW_STOP)
    dt("submit", name, "--working-dir", str(tmp_path), "--", "python", "slow.py")
    wait_until(lambda: "up" in dt("logs", name).stdout, what="job started")
    suspend = subprocess.Popen([DTRAIN, "suspend", name], env=dt.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    wait_until(lambda: "writing a checkpoint" in dt("logs", name).stdout, what="job stopping")
    assert [p["status"] for p in dt.json("describe", "job", name)["processes"]] == ["Terminating"]
    return suspend


@pytest.mark.slow
def test_a_resume_while_the_ranks_still_stop_starts_the_job_once_with_no_lost_supervisor(dt: Dtrain, tmp_path):
    """The resume waits for the last supervisor, then queues the job: no command reading the job
    meanwhile (the `suspend` still returning, a dashboard's poll) takes it for a lost one, with a
    'lost' event and a second supervisor started in its place."""
    suspend = _stopping(dt, tmp_path)
    resume = subprocess.Popen([DTRAIN, "resume", "job"], env=dt.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    time.sleep(1)
    (tmp_path / "gate").write_text("x")
    polling = time.monotonic() + 60
    while resume.poll() is None and time.monotonic() < polling:
        dt("list")  # as a dashboard polls: every active job is reconciled
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0 and out == "The job 'job' has been resumed (Pending)\n", (out, err)
    assert suspend.wait(timeout=60) == 0, suspend.communicate()
    wait_until(lambda: dt("logs", "job").stdout.count("up") == 1 and dt.status("job") == "Running",
               what="job running again")
    events = [e["message"] for e in dt.json("describe", "job", "job")["events"]]
    assert not [m for m in events if m.startswith("lost")], events
    assert dt.json("describe", "job", "job")["restarts"] == 0
    dt("delete", "job")


def test_a_command_reading_the_job_while_it_is_resumed_takes_it_for_no_lost_one(dt: Dtrain, monkeypatch):
    """Between the resume's Pending and its new supervisor's record, another command (a dashboard's
    poll, `dtrain list`) read a Pending job whose recorded supervisor, the suspended run's, is gone:
    it called it lost (an event saying the supervisor was killed) and started a supervisor of its
    own, and the resume's was stopped. White box: that command reads the job just then."""
    import dtrain.procs
    from dtrain import Client

    dt("submit", "s", "--", "sleep", "60")
    dt.wait_for("s", {"Running"})
    dt("suspend", "s")
    spawn = dtrain.procs.spawn_detached

    def read_first(*args, **kwargs):
        assert Client(home=dt.home).get("s").status.value == "Pending"  # another command, in between
        return spawn(*args, **kwargs)

    monkeypatch.setattr(dtrain.procs, "spawn_detached", read_first)
    assert Client(home=dt.home).resume("s").status.value == "Pending"
    monkeypatch.undo()
    dt.wait_for("s", {"Running"})
    events = [e["message"] for e in dt.json("describe", "job", "s")["events"]]
    assert not [m for m in events if m.startswith("lost")], events
    dt("delete", "s")


@pytest.mark.slow  # a browser, a server and a job: about 15-25 s
def test_the_dashboards_resume_waits_while_a_rank_still_stops(home, tmp_path):
    """A job suspended from the dashboard while its process writes its checkpoint: its Resume (Jobs table and
    job page) is disabled, its title saying why, while the rank reads Terminating; enabled once the process
    has exited, and a click then queues the job again."""
    import threading

    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    browser_tests = pytest.importorskip("test_dashboard_browser")
    if not (browser_tests.CHROMIUM and browser_tests.CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    from server_util import ServerProcess

    (tmp_path / "slow.py").write_text(SLOW_STOP)
    server = ServerProcess(home, cwd=tmp_path)
    state = "return [...document.querySelectorAll(arguments[0])].map(b => [b.disabled, b.title])"
    try:
        dt, http = server.dtrain(), server.http
        dt("submit", "ckpt", "--working-dir", str(tmp_path), "--", "python", "slow.py")
        wait_until(lambda: "up" in dt("logs", "ckpt").stdout, what="the job started")
        suspend = threading.Thread(target=lambda: http.post("/api/v1/jobs/ckpt/suspend"))
        suspend.start()  # the suspension returns once the process has exited
        try:
            wait_until(lambda: "writing a checkpoint" in dt("logs", "ckpt").stdout, what="the job stopping")
            with browser_tests.chrome() as browser:
                for page, button in (("/#/jobs", "#jobs-table button.resume"), ("/#/job/ckpt", "#job-head button.resume")):
                    browser.get(server.url + page)
                    wait_until(lambda: browser.execute_script(state, button), what=f"{page}'s Resume")
                    [(disabled, title)] = browser.execute_script(state, button)
                    assert disabled and "still stopping (Terminating" in title, title
                (tmp_path / "gate").write_text("x")  # the checkpoint is written: the process exits
                suspend.join(timeout=60)
                wait_until(lambda: browser.execute_script(state, button) == [[False, ""]], what="Resume enabled")
                browser_tests.click(browser, button)
                wait_until(lambda: dt.status("ckpt") in ("Pending", "Running"), what="the job resumed")
        finally:
            (tmp_path / "gate").write_text("x")
            suspend.join(timeout=60)
        dt("delete", "ckpt")
    finally:
        server.stop()


def test_exec_refuses_a_rank_in_the_same_words_from_the_cli_and_the_sdk(dt: Dtrain):
    """`dtrain exec --rank -1` said 'exec runs in one process; give a rank from 0 to N, e.g. ...' and
    Client.exec(rank=-1) 'invalid rank -1: job J has ranks 0 to N': one check (names.check_exec_rank)
    now words both, whether the rank is negative, past the job's last or no number, as logs' does; each
    names the rank as its door takes it."""
    from dtrain import Client
    from dtrain.errors import SpecError

    dt("submit-dist", "pair", "--processes", "2", "--", "sleep", "60")
    try:
        dt.wait_for("pair", {"Running"})
        for typed, given in (("-1", -1), ("2", 2), ("x", "x")):
            cli = dt("exec", "pair", "--rank", typed, "--", "true", check=False)
            assert cli.returncode == 2 and cli.stdout == "", cli
            with pytest.raises(SpecError) as sdk:
                Client(home=dt.home).exec("pair", ["true"], rank=given)
            # the same line, the rank named as each door takes it (the SDK's rank=, the CLI's --rank)
            assert cli.stderr == f"dtrain: error: {sdk.value}\n".replace("invalid rank", "invalid --rank", 1), (
                cli.stderr, str(sdk.value))
            assert ("job 'pair' has 2 processes, ranks 0 to 1" if typed == "2" else  # the form: before the job
                    "use a process rank such as 0 (at most 4095); exec runs in one process") in cli.stderr, cli.stderr
    finally:
        dt("delete", "pair")


@pytest.mark.slow
def test_suspend_and_resume_all_take_every_job_of_the_project_they_can(dt: Dtrain):
    """Run:AI's `runai suspend --all` / `resume --all`: every job of the project (-p) the verb takes,
    the others (finished, another project's) left as they are; names and --all together refused."""
    from conftest import assert_usage_error

    dt("project", "create", "team")
    dt("submit", "done", "-p", "team", "--", "true")
    dt.wait_for("done", {"Succeeded"})
    for name in ("one", "two"):
        dt("submit", name, "-p", "team", "--", "sleep", "60")
    dt("submit", "other", "--", "sleep", "60")
    try:
        out = dt("suspend", "--all", "-p", "team").stdout
        assert sorted(out.splitlines()) == [f"The job '{n}' has been suspended (Suspended)" for n in ("one", "two")]
        statuses = {j["name"]: j["status"] for j in dt.json("list", "-A")}
        assert statuses == {"done": "Succeeded", "one": "Suspended", "two": "Suspended", "other": statuses["other"]}
        assert statuses["other"] in ("Pending", "Running")
        assert dt("suspend", "job", "--all", "-p", "team").stdout.startswith("No jobs to suspend in project 'team'")
        assert_usage_error(dt("resume", "one", "--all", "-p", "team", check=False), "not both", "nothing was resumed")
        assert_usage_error(dt("resume", check=False), "needs job names, or --all")
        assert sorted(dt("resume", "-A", "-p", "team").stdout.splitlines()) == [
            f"The job '{n}' has been resumed (Pending)" for n in ("one", "two")]
    finally:
        dt("delete", "--all", "-p", "team")
        dt("delete", "other")


@pytest.mark.slow
def test_of_two_resumes_at_once_only_the_one_that_queues_the_job_kills_leftover_ranks(dt: Dtrain, monkeypatch):
    """Each resume killed the job's leftover ranks before its compare-and-set to Pending: the one
    that then lost it (the job was already Pending) had killed the ranks the winner's new
    supervisor had started, and the job failed. Now only the winner kills, and before its
    supervisor starts. White box: the loser is held after its checks until the winner's rank runs."""
    import threading

    import dtrain.backends.local.ranks as ranks
    from dtrain import Client
    from dtrain.backends.local.backend import LocalBackend
    from dtrain.errors import ConflictError
    from dtrain.procs import Ident

    dt("submit", "s", "--", "sleep", "600")
    dt.wait_for("s", {"Running"})
    first_run = Ident.from_record(rank_record(dt.home, "s", 0))
    dt("suspend", "s")
    checked, running = threading.Event(), threading.Event()
    checks, kill = LocalBackend._check_resources, ranks.kill_ranks
    killed_by: list[str] = []

    def held_after_its_checks(self, spec, **kwargs):
        checks(self, spec, **kwargs)
        if threading.current_thread().name == "late":
            checked.set()
            assert running.wait(120), "the first resume's rank never ran"

    def kill_ranks(*args, **kwargs):
        killed_by.append(threading.current_thread().name)
        return kill(*args, **kwargs)

    monkeypatch.setattr(LocalBackend, "_check_resources", held_after_its_checks)
    monkeypatch.setattr(ranks, "kill_ranks", kill_ranks)
    late_result: list[BaseException | str] = []

    def late_resume():
        try:
            late_result.append(Client(home=dt.home).resume("s").status.value)
        except BaseException as err:  # noqa: BLE001 - checked below
            late_result.append(err)

    late = threading.Thread(target=late_resume, name="late")
    late.start()
    try:
        assert checked.wait(120), "the late resume never reached its checks"
        assert Client(home=dt.home).resume("s").status.value == "Pending"
        new_run = wait_until(lambda: (i := Ident.from_record(rank_record(dt.home, "s", 0))) != first_run and i,
                             what="the resumed job's rank running")
        assert new_run.alive()
    finally:
        running.set()
        late.join(120)
    assert len(late_result) == 1 and isinstance(late_result[0], ConflictError), late_result
    assert "only a Suspended job can be resumed" in str(late_result[0])
    assert "late" not in killed_by, killed_by
    assert new_run.alive() and dt.status("s") == "Running"
    assert not [e["message"] for e in dt.json("describe", "job", "s")["events"] if "fail" in e["message"]]
    dt("delete", "s")
