"""Bad input to a job spec is one short line, whatever its size or shape, and never a hang.

YAML aliases that multiply a value, a job file that is a device or a pipe, nested blocks of the
wrong type, env names `-e` refuses, projects nobody created, resources too small to run in or
written as any Kubernetes quantity: each is refused (exit 2) with one line naming the field and
the fix, in little time and memory. The rules live in dtrain/spec/, dtrain/names.py (quantities,
`shown`) and dtrain/cli/submit.py (the job file, the project).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import DTRAIN, REPO
from dtrain.errors import SpecError
from dtrain.names import parse_size, shown
from dtrain.spec import MAX_PROCESSES, MAX_YAML_EXPANDED, JobSpec, NewVolume, yaml_mapping

BASE = {"name": "j", "command": ["echo", "hi"]}
SHORT = 400  # no message is longer than this, whatever the input


# Runs a command and writes its peak memory (KiB) as the last line of stderr. A process started
# by pytest would report pytest's own size: Linux keeps the high-water mark of the memory a
# process had before exec, and a child starts as a copy (or, vfork, a borrower) of its parent.
MEASURE = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
           "sys.stderr.write(f'\\nMAXRSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n'); sys.exit(code)")


def run(home: Path, *args: str, timeout: float = 60, env: dict | None = None) -> tuple[int, str, str, int]:
    """`dtrain ARGS`: (exit code, stdout, stderr, its peak memory in KiB); killed after `timeout`.
    Only the first 64 KiB of each output are kept (a runaway message must not fill this process)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-c", MEASURE, DTRAIN, *args], stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(env or {}), "DTRAIN_HOME": str(home)})
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        texts = []
        for f in (out, err):
            size = f.seek(0, os.SEEK_END)
            f.seek(0)
            head = f.read(64 << 10)
            f.seek(max(0, size - 100))
            texts.append((head, f.read()))
    (stdout, _), (stderr, tail) = texts
    rss = [int(line.split()[1]) for line in tail.decode().splitlines() if line.startswith("MAXRSS ")]
    stderr = stderr.decode(errors="replace").split("\nMAXRSS ")[0].rstrip("\n")
    return code, stdout.decode(errors="replace"), stderr, rss[-1] if rss else -1


def one_line(result, *needles: str) -> str:
    code, out, err, _rss = result
    assert code == 2, (code, out[:500], err[:500])
    assert "Traceback" not in err and len(err) < SHORT, err[:1000]
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def job_file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


LAUGHS = "".join(f"- &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefg", "bcdefgh"))
BOMB = '- &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + LAUGHS  # 9**8 strings


# ---------------------------------------------------------------- 1: aliases, messages of bounded size
@pytest.mark.parametrize("field", ["env", "image", "processes", "command", "volumes"])
def test_an_alias_bomb_is_refused_in_little_time_and_memory(tmp_path, field):
    command = "" if field == "command" else 'command: ["true"]\n'
    text = f"name: lol\n{command}{field}:\n{BOMB}"
    started = time.monotonic()
    result = run(tmp_path / "home", "submit", "-f", job_file(tmp_path, text), "--dry-run")
    one_line(result, "aliases")
    assert time.monotonic() - started < 20
    assert result[3] < 200 * 1024, f"peak memory {result[3]} KiB"  # the old message alone was 350 MB


def test_a_value_aliases_multiply_below_the_bound_is_still_shown_short(tmp_path):
    """Six levels (531441 strings) stay under MAX_YAML_EXPANDED: the message shows the start."""
    text = 'name: lol\ncommand: ["true"]\nimage:\n' + BOMB[:BOMB.index("- &g")]
    assert yaml_mapping(text.encode(), "X", "a: 1")  # loads
    line = one_line(run(tmp_path / "home", "submit", "-f", job_file(tmp_path, text), "--dry-run"), "invalid image: ", "...")
    assert "must be a string" in line


def test_the_expansion_bound_counts_shared_values_once_and_refuses_past_it():
    shared = b"a: &x [" + b", ".join([b"abcdefgh"] * 1000) + b"]\n"  # 9001 once expanded
    aliases = b"[" + b", ".join([b"*x"] * 200) + b"]\n"  # 1.8 MB of values in 800 bytes
    assert len(yaml_mapping(shared + b"b: " + aliases, "X", "a: 1")["b"]) == 200
    with pytest.raises(SpecError, match=f"^X holds more than {MAX_YAML_EXPANDED} characters of values once its "
                                        f"aliases"):
        yaml_mapping(shared + b"b: " + aliases + b"c: " + aliases, "X", "a: 1")


def test_a_value_that_contains_itself_names_its_field(tmp_path):
    home = tmp_path / "home"
    one_line(run(home, "submit", "-f", job_file(tmp_path, "a: &a [*a]\n")), "the value of a contains itself")
    text = "name: j\ncommand: [echo]\nenv: &e {A: *e}\n"
    one_line(run(home, "submit", "-f", job_file(tmp_path, text)), "the value of env contains itself")


def test_unknown_fields_are_reported_before_a_missing_name(tmp_path):
    line = one_line(run(tmp_path / "home", "submit", "-f", job_file(tmp_path, "a: 1\ncolour: red\n")),
                    "unknown job fields a, colour", "pvc")
    assert "needs a name" not in line


@pytest.mark.parametrize("text, needle", [
    ("name: j\ncommand: [echo]\nenv: " + "[" * 50000 + "]" * 50000 + "\n", "nests its values too deeply"),
    ("name: j\ncommand: [echo]\nprocesses: 1" + "0" * 5000 + "\n", "holds a value YAML cannot read"),
    ("name: j\ncommand: [echo]\nimage: 2024-13-45\n", "holds a value YAML cannot read"),
    ("name: j\ncommand: [echo]\nprocesses: 1" + "0" * 4000 + "\n", "<a whole number of about 4000 digits>"),
])
def test_yaml_that_python_cannot_build_is_one_line(tmp_path, text, needle):
    one_line(run(tmp_path / "home", "submit", "-f", job_file(tmp_path, text), "--dry-run"), needle)


def test_shown_is_short_for_any_value():
    nested: list = ["lol"] * 9
    for _ in range(8):
        nested = [nested] * 9
    loop: list = []
    loop.append(loop)
    for value in (nested, "x" * 10**6, 10**5000, -(10**5000), loop, {str(i): i for i in range(10**5)}, 1e300):
        started = time.monotonic()
        text = shown(value)
        assert len(text) <= 80 and time.monotonic() - started < 1, text
    assert shown("data") == "'data'" and shown(5) == "5"
    assert "..." in shown("x" * 100) and "..." in shown([1] * 100)


HUGE = [
    ("env", {"A": ["x" * 10**6]}), ("image", "x\0" * 10**5), ("command", [["x" * 10**6]]), ("launcher", "x" * 10**6),
    ("processes", 10**5000), ("cpu", 10**5000), ("memory", "9" * 10**6), ("volumes", ["v:" + "x" * 10**6]),
    ("working_dir", "x" * 10**6), ("project", "x" * 10**6), ("backend", "X" * 10**6), ("env", {"A" * 10**6 + "=": "x"}),
]


@pytest.mark.parametrize("field, value", HUGE, ids=[f"{field}-{i}" for i, (field, _) in enumerate(HUGE)])
def test_sdk_messages_are_short_whatever_the_value(field, value):
    with pytest.raises(SpecError) as err:
        JobSpec(**{**BASE, field: value, "launcher": "torchrun"} if field == "processes" else {**BASE, field: value})
    assert len(str(err.value)) < SHORT and "\n" not in str(err.value), str(err.value)[:500]


# ---------------------------------------------------------------- 2: the job file is read with bounds
@pytest.mark.parametrize("path, needle", [("/dev/zero", "is a device"), ("/", "is a folder")])
def test_a_job_file_that_is_no_file_is_refused_before_it_is_read(tmp_path, path, needle):
    started = time.monotonic()
    result = run(tmp_path / "home", "submit", "-f", path, timeout=20)
    one_line(result, needle, "give a YAML file")
    assert time.monotonic() - started < 10 and result[3] < 200 * 1024


def test_a_named_pipe_as_job_file_does_not_wait_for_a_writer(tmp_path):
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    started = time.monotonic()
    one_line(run(tmp_path / "home", "submit", "-f", str(fifo), timeout=20), "is a named pipe")
    assert time.monotonic() - started < 10
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    one_line(run(tmp_path / "home", "submit", "-f", str(link), timeout=20), "is a device")


def test_a_big_job_file_is_read_no_further_than_the_bound(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_bytes(b"a" * (64 << 20))
    result = run(tmp_path / "home", "submit", "-f", str(path))
    one_line(result, "larger than 1048576 bytes")
    assert result[3] < 100 * 1024  # the 64 MiB were not read


# ---------------------------------------------------------------- 3: nested blocks of the wrong type
@pytest.mark.parametrize("block, flags, needle", [
    ("sagemaker: 5", [], "invalid sagemaker: 5: must be a mapping"),
    ("sagemaker: [1, 2]", ["--spot"], "invalid sagemaker: [1, 2]: must be a mapping"),
    ("sagemaker: {channels: 5}", ["--channel", "a=s3://bkt/c"], "invalid sagemaker channels 5: must be a list"),
    ("sagemaker: {hyperparameters: [1]}", ["--hp", "a=1"], "invalid sagemaker hyperparameters [1]: must be a mapping"),
    ("sagemaker: {1: a, b: c}", [], "invalid sagemaker field name 1"),
    ("env: [A]", ["-e", "B=1"], "invalid env: ['A']: must be a mapping"),
    ("volumes: 5", ["--pvc", "a:/mnt"], "invalid volumes: 5: must be a list"),
    ("pvc: {a: b}", [], "invalid pvc: {'a': 'b'}: must be a list"),
    ("image_pull_secrets: regcred", ["--image-pull-secret", "x"], "invalid image_pull_secrets: 'regcred'"),
])
def test_a_nested_block_of_the_wrong_type_is_one_line(tmp_path, block, flags, needle):
    path = job_file(tmp_path, f"name: j\ncommand: [echo]\n{block}\n")
    one_line(run(tmp_path / "home", "submit", "-f", path, *flags, "--dry-run"), needle)


def test_a_sagemaker_mapping_of_the_wrong_shape_is_a_spec_error_in_the_sdk():
    for bad in ({"channels": 5}, {"hyperparameters": [1]}, {1: 2, "b": 3}):
        with pytest.raises(SpecError, match="sagemaker"):
            JobSpec(**BASE, backend="sagemaker", sagemaker=bad)
    with pytest.raises(SpecError, match="invalid sagemaker 5: must be a mapping"):
        JobSpec(**BASE, sagemaker=5)


# ---------------------------------------------------------------- 4: env names as -e takes them
@pytest.mark.parametrize("key", ["A=B", "1A", "", "A B", "A-B"])
def test_env_names_follow_the_same_rule_in_yaml_and_the_sdk(tmp_path, key):
    with pytest.raises(SpecError, match="invalid env name"):
        JobSpec(**BASE, env={key: "x"})
    path = job_file(tmp_path, f'name: j\ncommand: [echo]\nenv: {{"{key}": x}}\n')
    one_line(run(tmp_path / "home", "submit", "-f", path, "--dry-run"), "invalid env name")
    assert JobSpec(**BASE, env={"A_1": "B=x"}).env == {"A_1": "B=x"}  # '=' in a value stays


# ---------------------------------------------------------------- 5: a project must exist
@pytest.mark.slow
def test_a_project_nobody_created_is_refused_on_submit(tmp_path):
    home, gpus = tmp_path / "home", {"DTRAIN_GPUS": "2"}
    assert run(home, "project", "create", "team-a", "--gpu-quota", "1", env=gpus)[0] == 0
    one_line(run(home, "submit", "q1", "-p", "team-aa", "--gpu", "2", "--", "sleep", "3", env=gpus),
             "no project named 'team-aa' (did you mean 'team-a'?); a new project is made with "
             "'dtrain project create team-aa'", "(projects: default, team-a)")
    path = job_file(tmp_path, "name: q2\nproject: team-aa\ncommand: [sleep, '3']\n")
    one_line(run(home, "submit", "-f", path, env=gpus), "no project named 'team-aa'")
    code, out, err, _ = run(home, "list", "-A", "--json")
    assert code == 0 and out.strip() == "[]", err  # nothing was stored
    for args in (["-p", "team-a"], ["-p", "default"], []):  # created, or the default that always exists
        code, out, err, _ = run(home, "submit", "ok", *args, "--", "true")
        assert code == 0, err
        assert run(home, "wait", "ok", "--timeout", "60")[0] == 0
        assert run(home, "delete", "ok", "--purge")[0] == 0


def test_a_project_nobody_created_is_refused_by_the_backend_for_every_door(tmp_path):
    """The rule is the local backend's: the SDK and a dry run meet it too, not the CLI alone
    (the HTTP API: tests/test_server_api.py)."""
    from dtrain import Client
    from dtrain.errors import NotFoundError

    client = Client(home=tmp_path / "home")
    spec = JobSpec(**BASE, project="team-aa")
    for verb in (client.submit, client.render):
        with pytest.raises(NotFoundError, match="no project named 'team-aa'; create it first"):
            verb(spec)
    assert client.list() == [] and not (tmp_path / "home" / "jobs" / "j").exists()
    one_line(run(tmp_path / "home", "submit", "j", "-p", "team-aa", "--dry-run", "--", "true"), "no project named")
    client.create_project("team-aa")
    assert client.render(spec)[0]["project"] == "team-aa"


# ---------------------------------------------------------------- 6: resources and quantities
@pytest.mark.parametrize("args, needles", [
    (["--cpu", "0.0000001"], ["invalid --cpu 0.0000001", "from 0.01 to 1024"]),
    (["--cpu", "1e300"], ["invalid --cpu 1e300", "from 0.01 to 1024"]),
    (["--cpu", "-1"], ["invalid --cpu -1"]),
    (["--memory", "1"], ["invalid --memory '1'", "from 4Mi to 1Ei"]),
    (["--memory", "1e3"], ["invalid --memory '1e3'", "from 4Mi to 1Ei"]),
    (["--memory", "2Ei"], ["invalid --memory '2Ei'", "from 4Mi to 1Ei"]),
    (["--memory", "-5Gi"], ["invalid --memory '-5Gi'", "cannot be negative", "from 4Mi to 1Ei"]),
    (["--memory=-5Gi"], ["invalid --memory '-5Gi'", "cannot be negative"]),
    (["--memory", "5x"], ["invalid --memory '5x'", "Kubernetes quantity from 4Mi to 1Ei"]),
    (["--memory", "9" * 5000], ["invalid --memory", "...", "from 4Mi to 1Ei"]),
])
def test_resource_bounds_are_named_in_one_line(tmp_path, args, needles):
    one_line(run(tmp_path / "home", "submit", "d", *args, "--dry-run", "--", "true"), *needles)


@pytest.mark.parametrize("memory", ["4Mi", "1Ei", "1e9", "1E", "0.5Gi", ".5Gi", "5.Gi", "4194304000m"])
def test_every_kubernetes_quantity_in_range_is_accepted(memory):
    assert JobSpec(**BASE, memory=memory).memory == memory


def test_quantities_follow_the_kubernetes_grammar():
    assert parse_size("1e3") == 1000 and parse_size("1E3") == 1000 and parse_size("1E") == 10**18
    assert parse_size("1Ei") == 2**60 and parse_size(".5Ki") == 512
    # a fraction of a byte rounds up, as Kubernetes' Quantity.Value(); every digit counts (no float)
    assert parse_size("1500m") == 2 and parse_size("1.0001") == 2 and parse_size("2000m") == 2
    assert parse_size("123456789012345678") == 123456789012345678 and parse_size("999999999999999999") == 10**18 - 1
    assert parse_size("1152921504606846975") == 2**60 - 1 and parse_size("0.1Ki") == 103
    with pytest.raises(SpecError, match="at most 1Ei"):
        parse_size("1152921504606846977")  # 2**60 + 1: a float would read it as 2**60
    assert parse_size("+2k") == 2000
    for bad in ("1e", "Gi", "1.2.3", "1 Gi", "1iB", "0x10", "1e99999999999999", "-1"):
        started = time.monotonic()
        with pytest.raises(SpecError, match="quantity"):
            parse_size(bad, "--memory", minimum=1)
        assert time.monotonic() - started < 0.1
    with pytest.raises(SpecError, match="volume size '2Ei': use a quantity from 1Mi to 1Ei"):
        NewVolume(storage_class="local", size="2Ei", mount_path="/mnt")
    assert NewVolume(storage_class="local", size="1Ei", mount_path="/mnt").size == "1Ei"


def test_kubernetes_scales_an_exponent_quantity_by_its_number():
    from dtrain.backends.kubernetes.render import scale_quantity

    assert [scale_quantity(q, 2) for q in ("1e3", "1.5Ei", ".5Gi")] == ["2e3", "3Ei", "1Gi"]


# ---------------------------------------------------------------- 7: one bound on processes
def test_one_bound_on_processes_everywhere(tmp_path):
    from dtrain.pipelines import steps

    assert steps.MAX_PROCESSES is MAX_PROCESSES
    one_line(run(tmp_path / "home", "submit-dist", "d", "--processes", str(MAX_PROCESSES + 1), "--", "true"),
             f"from 1 to {MAX_PROCESSES}")
    with pytest.raises(SpecError, match=f"from 1 to {MAX_PROCESSES}"):
        steps.lanes_train_spec(job_name="t", volume="v", processes=MAX_PROCESSES + 1)
    assert f"`--processes` is at most {MAX_PROCESSES} " in (REPO / "docs" / "reliability.md").read_text()


@pytest.mark.parametrize("flag", ["spot", "local", "network_isolation", "encrypt_inter_container"])
def test_sagemaker_switches_are_booleans_not_words(flag):
    from dtrain.spec_sagemaker import SageMakerOptions

    with pytest.raises(SpecError, match=f"^invalid sagemaker {flag} 'no': use true or false$"):
        SageMakerOptions.from_dict({flag: "no"})  # a non-empty string is true: 'no' turned spot on
    assert getattr(SageMakerOptions.from_dict({flag: True}), flag) is True


def test_the_http_api_takes_the_spec_bounds():
    from dtrain.server.wire import SpecIn
    from dtrain.spec import MAX_PROCESSES, MIN_CPU

    fields = SpecIn.model_fields
    assert [m.le for m in fields["processes"].metadata if hasattr(m, "le")] == [MAX_PROCESSES]
    assert [m.ge for m in fields["cpu"].metadata if hasattr(m, "ge")] == [MIN_CPU]


def test_every_volume_size_the_api_schema_allows_is_one_the_server_takes():
    """schemathesis sends what the schema allows and requires it accepted: the schema's size
    pattern is the part of the quantity grammar that lies from 1Mi to 1Ei."""
    import re

    from dtrain.names import MAX_SIZE, parse_volume_size
    from dtrain.server.wire import _DIGITS, VOLUME_SIZE

    allowed = re.compile(VOLUME_SIZE)
    largest = [f"{'9' * (n + 1)}.99{s}" for s, n in _DIGITS.items()] + ["1Ei", "1E"]
    for text in [*largest, "1048576", "1048576.5", "1049k", "1024Ki", "2M", "1Mi", "10Gi", "512Mi", "2G"]:
        assert allowed.match(text), text
        assert 2**20 <= parse_volume_size(text) <= MAX_SIZE, text
    for text in ["1", "1.5", "1048575", "999999", "2k", "1048k", "1023Ki", "1M", "1.9M", "500m"]:  # under 1Mi
        assert not allowed.match(text), text
    for text in [f"1{'0' * (n + 1)}{s}" for s, n in _DIGITS.items()]:  # one digit more than the room left
        assert not allowed.match(text), text
    for text in ["0", "0.5", ".761", "5m", "1e3", "01Gi", "2Ei", "1.5Ei", "-1Gi", "1Gb"]:
        assert not allowed.match(text), text


def test_a_pvc_flag_overrides_the_files_mount_at_the_same_path(tmp_path):
    """As -e overrides the file's variable of the same name: --pvc replaces the file's volume at
    its mount path (spelled either way), and adds the others."""
    job = tmp_path / "job.yaml"
    job.write_text('name: yp\ncommand: [ls, /mnt]\nvolumes: [{volume: v1, mount_path: /mnt}, "v3:/data:ro"]\n')
    for volume in ("v2", "v3", "v4"):  # the dry run looks them up, as submit does (v1 is replaced)
        assert run(tmp_path / "home", "volume", "create", volume)[0] == 0
    code, out, err, _ = run(tmp_path / "home", "submit", "-f", str(job), "--pvc", "v2:/mnt/", "--pvc", "v4:/extra",
                            "--dry-run")
    assert code == 0, err
    volumes = out.split("volumes:\n", 1)[1].split("\nlarge_shm", 1)[0].split("\n")
    assert volumes == ["- v3:/data:ro", "- v2:/mnt", "- v4:/extra"]


def test_a_huge_word_argparse_does_not_take_is_not_repeated_whole(tmp_path):
    code, _, err, _ = run(tmp_path / "home", "list", "--bogus", *["x" * 100_000] * 3)
    assert code == 2 and err.startswith("dtrain list: error: ") and "xxxx" in err
    assert len(err) < 500 and "\n" not in err.strip(), len(err)


@pytest.mark.parametrize("image", ["Reg/X:1", " reg/x:1", "reg/x:", "pytorch training:2.0", "a" * 256])
def test_an_image_no_registry_takes_is_refused_by_the_spec(image):
    """The kubelet refuses such a reference (InvalidImageName, the pod never starts) and SageMaker
    fails the job minutes later: every way in (flags, YAML, SDK, HTTP) gets the one line first."""
    with pytest.raises(SpecError) as err:
        JobSpec(**BASE, image=image)
    assert str(err.value).startswith("invalid image ") and "image reference" in str(err.value)
    assert len(str(err.value)) < SHORT and "\n" not in str(err.value)


@pytest.mark.parametrize("image", ["python:3.11", "localhost:5000/team/train", "registry.example.com/a/b:1.0-gpu",
                                   "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-cpu-py311",
                                   "ghcr.io/x/y@sha256:" + "ab" * 32, "[::1]:5000/x"])
def test_the_references_registries_take_pass(image):
    assert JobSpec(**BASE, image=image).image == image


def test_a_volume_size_is_stored_as_read():
    assert NewVolume(storage_class="local", size=" 1Gi\n", mount_path="/mnt").size == "1Gi"
