"""Job files read as their writer meant them: a key given twice is refused, not silently the last
one; a number written in YAML's other spellings (0.10, 017, 0x1F, 1_000, 12:30) keeps its text where
a field takes a string (env, command), as Kubeflow and Run:AI users
expect of `value: "0.10"`; and what a spec writes out reads back as the same spec.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from conftest import assert_usage_error
from dtrain.config import UserConfig
from dtrain.errors import SpecError
from dtrain.spec import JobSpec, yaml_mapping

HEAD = "name: j\ncommand: [python, train.py]\n"


def spec_of(text: str) -> JobSpec:
    return JobSpec.from_dict(yaml_mapping(text.encode(), "job file", "name: train"), door="cli")


@pytest.mark.parametrize("text, key, lines", [
    (HEAD + "gpu: 1\ngpu: 2\n", "'gpu'", "at line 3 and at line 4"),
    (HEAD + "env:\n  SEED: '1'\n  LR: '0.1'\n  SEED: '2'\n", "'SEED'", "at line 4 and at line 6"),
    (HEAD + "env: {A: x, A: y}\n", "'A'", "at line 3 and at line 3"),
    (HEAD + "volumes:\n- {volume: data, mount_path: /a, mount_path: /b}\n", "'mount_path'", "at line 4 and"),
    (HEAD + "name: other\n", "'name'", "at line 1 and at line 3"),
])
def test_a_key_given_twice_is_refused_naming_both_lines(text, key, lines):
    with pytest.raises(SpecError) as err:
        spec_of(text)
    message = str(err.value)
    assert "\n" not in message
    assert f"the key {key} is given twice (keep one)" in message and lines in message, message


def test_a_merge_key_may_still_be_overridden():
    # `<<: *base` then a key of one's own is how YAML users share blocks: the own key wins, no refusal.
    text = HEAD + "x-base: &base {SEED: '1', LR: '0.1'}\n"
    data = yaml_mapping((text + "env:\n  <<: *base\n  LR: '0.2'\n").encode(), "job file", "name: train")
    assert data["env"] == {"SEED": "1", "LR": "0.2"}


def test_the_cli_refuses_a_job_file_with_gpu_twice(dt, tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text("name: twice\ncommand: [echo, hi]\ngpu: 0\ngpu: 1\n")
    proc = dt("submit", "-f", str(job), "--dry-run", check=False)
    assert_usage_error(proc, "job file", "'gpu' is given twice (keep one): at line 3 and at line 4")


def test_config_yaml_with_a_key_twice_is_refused(tmp_path: Path):
    (tmp_path / "config.yaml").write_text("project: a\nbackend: local\nproject: b\n")
    with pytest.raises(SpecError, match="'project' is given twice"):
        UserConfig.load(tmp_path)


def test_numbers_keep_their_text_in_env_and_command():
    spec = spec_of("name: j\ncommand: [python, train.py, --lr, 0.10, --seed, 007]\n"
                   "env: {LR: 0.10, VERSION: 1.10, RUN_ID: 0123, MASK: 0x1F, STEPS: 1_000, AT: 12:30, "
                   "HALF: .5, N: 3, X: 1.5}\n")
    assert spec.command == ("python", "train.py", "--lr", "0.10", "--seed", "007")
    assert spec.env == {"LR": "0.10", "VERSION": "1.10", "RUN_ID": "0123", "MASK": "0x1F", "STEPS": "1_000",
                        "AT": "12:30", "HALF": ".5", "N": "3", "X": "1.5"}
    assert all(type(v) is str for v in [*spec.command, *spec.env.values()])


def test_number_fields_written_otherwise_are_plain_numbers_that_dump():
    spec = spec_of(HEAD + "processes: 0x2\nlauncher: torchrun\ngpu: +1\ncpu: 0.50\nmax_restarts: +3\n")
    assert (spec.processes, spec.gpu, spec.cpu, spec.max_restarts) == (2, 1, 0.5, 3)
    assert [type(x) for x in (spec.processes, spec.gpu, spec.cpu, spec.max_restarts)] == [int, int, float, int]
    yaml.safe_dump(spec.to_dict())  # a subclass of int would make the safe dumper refuse it


def test_sagemaker_hyperparameters_keep_their_yaml_type_and_refuse_null():
    """As the SageMaker SDK's dict keeps a value's type (the request then carries it JSON-encoded);
    a number written in YAML's other spellings is a plain number."""
    spec = spec_of(HEAD + "backend: sagemaker\nsagemaker: {instance_count: 0x1, hyperparameters: {lr: 0.10, "
                          "epochs: 2, warmup: 1_000, amp: yes, tag: '2'}}\n")
    hps = dict(spec.sagemaker.hyperparameters)
    assert hps == {"lr": 0.1, "epochs": 2, "warmup": 1000, "amp": True, "tag": "2"}
    assert [type(hps[k]) for k in ("lr", "epochs", "warmup", "amp", "tag")] == [float, int, int, bool, str]
    assert type(spec.sagemaker.instance_count) is int
    yaml.safe_dump(spec.to_dict())  # plain types, which the safe dumper takes
    with pytest.raises(SpecError, match=r"invalid sagemaker hyperparameter amp value None: use a string, a number "
                                        r"or true/false"):
        spec_of(HEAD + "backend: sagemaker\nsagemaker: {hyperparameters: {amp: }}\n")


def test_config_numbers_written_otherwise_save_back(tmp_path: Path):
    (tmp_path / "config.yaml").write_text("project: default\nsagemaker: {volume_size: +30}\n")  # 0x1E: refused
    cfg = UserConfig.load(tmp_path)
    assert cfg.sagemaker == {"volume_size": 30} and type(cfg.sagemaker["volume_size"]) is int
    cfg.save(tmp_path)  # the safe dumper refuses an int subclass
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["sagemaker"] == {"volume_size": 30}


def test_the_kubernetes_manifest_carries_the_env_text_as_written(dt, tmp_path: Path):
    job = tmp_path / "job.yaml"
    job.write_text("name: lr\ncommand: [python, train.py, --lr, 0.10]\nenv: {LR: 0.10, RUN_ID: 0123}\n")
    proc = dt("submit", "-f", str(job), "--backend", "kubernetes", "--image", "pytorch/pytorch:2", "--dry-run",
              check=False)
    assert proc.returncode == 0, proc.stderr
    containers = [c for d in yaml.safe_load_all(proc.stdout) if d for c in _containers(d)]
    assert len(containers) == 1, proc.stdout
    container = containers[0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["LR"], env["RUN_ID"]) == ("0.10", "0123")
    assert [*container.get("command", []), *container.get("args", [])][-1] == "0.10"


def _containers(node) -> list[dict]:
    """Every container of a manifest, wherever its kind keeps them."""
    if isinstance(node, dict):
        return [*node.get("containers", []), *(c for k, v in node.items() if k != "containers" for c in _containers(v))]
    return [c for v in node for c in _containers(v)] if isinstance(node, list) else []


@pytest.mark.parametrize("via", ["json", "yaml"])
def test_a_spec_written_out_reads_back_the_same(via):
    spec = JobSpec(name="a", command=("python", "-c", "0.10", "yes", "12:30", "~", ""),
                   env={"A": "on", "B": "0x1F", "C": "", "D": "1e3", "E": "007"}, processes=2, launcher="torchrun",
                   cpu=0.5, memory="1.5Gi", volumes=("data:/mnt:ro", "local:1Gi:/w/"), working_dir="/w",
                   large_shm=True, max_restarts=3, image="reg.io/a/b:1", image_pull_secrets=("s",),
                   snapshot_on_success="data")
    d = spec.to_dict()
    text = json.dumps(d) if via == "json" else yaml.safe_dump(d)
    assert spec_of(text) == spec


def test_describe_json_is_a_job_file_that_submits_the_same_job_again(dt, tmp_path: Path):
    # kubectl users save `kubectl get -o yaml` and apply it again; here `describe --json` is that record.
    dt("submit", "first", "-e", "LR=0.10", "--cpu", "0.5", "--", "echo", "0.10")
    record = dt("describe", "job", "first", "--json").stdout
    (tmp_path / "first.json").write_text(record)
    dt("submit", "second", "-f", str(tmp_path / "first.json"))
    first, second = (dt.json("describe", "job", n)["spec"] for n in ("first", "second"))
    assert second == {**first, "name": "second"}
    assert second["env"] == {"LR": "0.10"} and second["command"] == ["echo", "0.10"]


@pytest.mark.parametrize("name, flag", [("DTRAIN_MEMORY", "--memory"), ("DTRAIN_RANK_DEVICES", "--gpu"),
                                        ("DTRAIN_CPU", "--cpu"), ("DTRAIN_RANK_CPUS", "--cpu"),
                                        ("RANK", "--processes"), ("MASTER_PORT", "--processes"),
                                        ("CUDA_VISIBLE_DEVICES", "--gpu")])
def test_env_names_dtrain_sets_from_the_job_are_refused(name, flag):
    # `-e DTRAIN_MEMORY=1Ei --memory 64Mi` ran under a 1Ei cgroup limit; `-e DTRAIN_RANK_DEVICES=0,1`
    # gave a job without --gpu both GPUs; `-e RANK=3` made a one-process job wait for ranks 0-2.
    with pytest.raises(SpecError) as err:
        JobSpec(name="j", command=("true",), env={name: "1"})
    assert str(err.value).startswith(f"invalid env name {name}: every process gets it from ")
    assert flag in str(err.value) and "\n" not in str(err.value)
    stored = {**JobSpec(name="j", command=("true",)).to_dict(), "env": {name: "1"}}
    assert JobSpec.from_stored(stored).env == {name: "1"}  # a job stored before the rule still reads back


def test_the_cli_refuses_a_memory_limit_set_through_env(dt):
    proc = dt("submit", "lift", "--memory", "64Mi", "-e", "DTRAIN_MEMORY=1Ei", "--", "true", check=False)
    assert_usage_error(proc, "invalid env name DTRAIN_MEMORY", "--memory")
    assert dt.json("list") == []  # nothing was started


def test_a_long_hex_number_in_env_is_its_text_not_a_traceback():
    # Python's str() refuses whole numbers past 4300 digits: `str(value)` raised a bare ValueError.
    text = "0x" + "f" * 5000
    assert spec_of(HEAD + f"env: {{KEY: {text}}}\n").env == {"KEY": text}
    with pytest.raises(SpecError, match=r"invalid --processes <a whole number of about 6021 digits>"):
        spec_of(HEAD + f"processes: {text}\n")


@pytest.mark.parametrize("written, verb, launcher", [
    ("none", "submit-dist", "torchrun"), ("none", "submit-mpi", "mpi"), ("mpi", "submit-dist", "mpi"),
    ("torchrun", "submit", "torchrun")])
def test_the_verb_of_a_distributed_submit_wins_over_a_files_launcher_none(dt, tmp_path: Path, written, verb, launcher):
    """`submit-dist -f job.yaml` with launcher: none was refused with 'use dtrain submit-dist', the
    very verb given, where submit-mpi took the same file as an MPI job."""
    job = tmp_path / "job.yaml"
    job.write_text(HEAD + f"launcher: {written}\nprocesses: 2\n")
    got = dt(verb, "-f", str(job), "--dry-run")
    assert got.returncode == 0, got.stderr
    assert yaml.safe_load(got.stdout)["launcher"] == launcher
