"""A new user's first hour with the README, demo.md, lanes.md and cifar10.md, mistyping what new users
mistype (audit 15, `fresh`)."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess

import pytest

from conftest import DTRAIN
from dtrain import JobSpec
from dtrain.cli import jobs
from dtrain.cli.main import build_parser, main, split_command, verb_of
from dtrain.errors import SpecError
from dtrain.spec.volumes import parse_pvc


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys):
    """dtrain's main() in this process on a private home: (exit code, stdout, stderr) of a command line."""
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as stop:  # argparse's usage errors
            code = stop.code
        out, err = capsys.readouterr()
        return code, out, err
    return run


@pytest.mark.parametrize("argv, typed, meant", [
    (["sumbit", "x", "--", "true"], "sumbit", "submit"), (["logz", "x"], "logz", "logs"),
    (["volume", "lsit"], "lsit", "list"), (["snapshot", "craete", "x"], "craete", "create"),
    (["lanes", "trian"], "trian", "train"),
    (["submit-dist", "x", "--launcher", "torch", "--", "true"], "torch", "torchrun"),
])
def test_a_misspelt_verb_or_choice_names_the_one_meant(cli, argv, typed, meant):
    """`dtrain sumbit` answered argparse's list of 25 verbs, the one meant among them unmarked."""
    code, _, err = cli(*argv)
    [line] = err.strip().splitlines()
    assert code == 2 and f"invalid choice: '{typed}': did you mean '{meant}'?" in line
    assert "choose from" not in line, line


def test_a_word_near_no_verb_keeps_the_list(cli):
    code, _, err = cli("zzzz")
    assert code == 2 and "invalid choice: 'zzzz' (choose from 'submit'" in err and "did you mean" not in err


@pytest.mark.parametrize("verb", ["submit", "submit-dist", "submit-mpi"])
@pytest.mark.parametrize("flag, launcher", [
    ("--nproc-per-node", "torchrun"), ("--nproc_per_node", "torchrun"), ("--nproc", "torchrun"),
    ("-np", "mpirun"), ("--np", "mpirun"), ("-n", "mpirun"),
])
def test_a_launchers_process_flag_names_processes(cli, verb, flag, launcher):
    """`--nproc 2` was answered 'did you mean --project?', `--np 2` 'did you mean --hp?' (SageMaker's
    hyperparameters), `-np 2` and `--nproc-per-node 2` 'the command goes after --'."""
    code, _, err = cli(verb, "x", flag, "2", "--", "true")
    [line] = err.strip().splitlines()
    assert code == 2 and f"{flag} is {launcher}'s: give --processes N and it is started for you" in line, line
    assert f"dtrain {'submit-mpi' if verb == 'submit-mpi' else 'submit-dist'} NAME --processes N" in line
    assert "did you mean" not in line and "goes after" not in line
    assert cli("list", "-A", "--json")[1].strip() == "[]"  # nothing was submitted


def _proc_state(pid: int) -> str:
    """A running process's state, blocked and ignored signals and kernel wait channel, from /proc."""
    try:
        status = open(f"/proc/{pid}/status").read().splitlines()
        wchan = open(f"/proc/{pid}/wchan").read()
    except OSError as e:
        return f"/proc/{pid} unreadable ({e})"
    keep = [line for line in status if line.split(":")[0] in ("State", "SigBlk", "SigIgn", "SigCgt")]
    return "; ".join(keep + [f"wchan: {wchan}"])


@pytest.mark.slow
@pytest.mark.parametrize("verb", [["logs", "ticker", "-f"], ["wait", "quick", "ticker"]])
def test_ctrl_c_in_logs_follow_or_wait_says_the_job_goes_on(dt, verb):
    """Ctrl-C in `logs -f` or `wait` left a bare prompt: a new user could not tell that the job went on
    (Ctrl-C in a foreground `docker run` stops it). Ctrl-C is SIGINT to the terminal's process group;
    the first line printed says that the verb is in its loop (wait: the first job's end)."""
    dt("submit", "quick", "--", "true")
    dt.wait_for("quick", {"Succeeded"})
    dt("submit", "ticker", "--", "sh", "-c", "echo tick; sleep 600")
    dt.wait_running("ticker")  # logs -f on a job still Pending after a moment says so first (its own test)
    # As a terminal's shell starts a foreground command: SIGINT at its default, whatever this test inherited (a
    # run started in the background by a script ignores SIGINT, and the command kept that: it never saw Ctrl-C)
    proc = subprocess.Popen([DTRAIN, *verb], env={**dt.env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout.readline().startswith("tick" if verb[0] == "logs" else "quick: Succeeded")
    os.killpg(proc.pid, signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # seen once under load: say where the process was, for the cause
        seen = _proc_state(proc.pid)
        proc.kill()
        proc.communicate()
        raise AssertionError(f"dtrain {' '.join(verb)} still ran 30 s after SIGINT: {seen}") from None
    doing = "following the logs of" if verb[0] == "logs" else "waiting for"
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert err.strip().splitlines() == [f"dtrain: stopped {doing} job 'ticker'; the job goes on (stop it with "
                                        "'dtrain delete ticker')"], err
    assert dt.status("ticker") == "Running"


@pytest.mark.parametrize("verb", sorted(jobs.EXAMPLES))
def test_the_everyday_verbs_help_ends_with_examples_that_parse(cli, verb):
    """`dtrain submit --help` showed 40 flags and no command to copy, where kubectl's and runai's help
    end with examples; each example shown is one the parser takes as it is."""
    code, out, _ = cli(verb, "--help")
    assert code == 0 and "\nexamples:\n" in out
    shown = [line.strip() for line in out.split("\nexamples:\n", 1)[1].splitlines()]
    assert shown == jobs.EXAMPLES[verb]
    for example in shown:
        for command in example.split("#", 1)[0].split("&&"):
            head, _ = split_command(shlex.split(command)[1:])
            args, extra = build_parser(verb_of(head)).parse_known_args(head)
            assert extra == [] and args.verb == verb_of(head), example


def test_submit_dist_help_gives_the_process_count_default(cli):
    """--processes said only 'number of data-parallel processes': 1 when left out, as the spec has it."""
    _, out, _ = cli("submit-dist", "--help")
    assert "number of data-parallel processes (default 1)" in " ".join(out.split())
    assert JobSpec(name="x", command=("true",)).processes == 1
    assert "torchrun (the default) or mpi" in " ".join(out.split())


@pytest.mark.parametrize("verb", [["describe"], ["logs"], ["wait"], ["delete"], ["suspend"], ["artifacts", "--to", "o"]])
def test_the_noun_without_the_name_says_where_the_name_goes(cli, verb):
    """`dtrain describe job` (the name forgotten after Run:AI's noun) said only "no job named 'job'"."""
    code, _, err = cli(verb[0], "job", *verb[1:], "-p", "default")
    [line] = err.strip().splitlines()
    assert code == 2 and "no job named 'job'" in line, line
    assert f"give the job's name after it (dtrain {verb[0]} job NAME -p default)" in line, line
    code, _, err = cli(verb[0], "train-1", *verb[1:])
    assert code == 2 and "no job named 'train-1'" in err and "NAME" not in err, err


def test_a_job_named_job_is_still_found(cli):
    assert cli("submit", "job", "--", "true")[0] == 0
    code, out, err = cli("describe", "job")
    assert code == 0 and "Name:" in out and "job" in out, err
    assert cli("wait", "job")[0] == 0  # its process gone before the home is


@pytest.mark.parametrize("given, copied", [
    ("./data:/mnt", "./data"), ("/srv/data:/mnt:ro", "/srv/data"), ("~/my data:/mnt", "~/'my data'"),
    ("data/train:/mnt", "data/train"), (".:/mnt", "."),
])
def test_a_folder_given_to_pvc_names_the_way_to_reach_it(given, copied):
    """`--pvc ./data:/mnt` (docker's -v habit) was refused with the volume-name rule (253 characters,
    '.'-separated parts) and no word of how a job reaches a folder of this machine."""
    with pytest.raises(SpecError) as err:
        parse_pvc(given)
    said = str(err.value)
    assert "is a folder, and --pvc mounts a volume" in said and "253" not in said, said
    assert said.endswith(f"dtrain submit copy-in --pvc local:10Gi:/mnt -- cp -r {copied} /mnt/"), said
    assert parse_pvc("data.v1:/mnt").volume == "data.v1"  # a Kubernetes claim's dotted name is still a name


@pytest.mark.slow
def test_the_copy_in_the_refusal_names_fills_a_volume(dt, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f").write_text("hi\n")
    said = dt("submit", "x", "--pvc", "./data:/mnt", "--", "true", check=False, cwd=tmp_path).stderr
    copy = shlex.split(said.split("copy it into a new volume: ", 1)[1])
    assert copy[0] == "dtrain" and dt(*copy[1:], cwd=tmp_path).returncode == 0
    assert dt("wait", "copy-in").returncode == 0
    dt("submit", "look", "--pvc", "pvc-copy-in-0:/mnt", "--", "cat", "/mnt/data/f")
    dt("wait", "look")
    assert dt("logs", "look").stdout == "hi\n"
