"""A job file's unquoted 1e3 is read as its flag reads `--processes 1e3`.

YAML 1.1 (PyYAML) takes a float only with a dot and a signed exponent (1.0e+3), so `processes: 1e3`
and `gpu: 2e0` were strings, refused as "invalid --processes '1e3'", where the flag's whole_number
takes 1000 and 2 and refuses 2.5e0 naming it as typed. Number fields now read such a word with the
flag's function and words; a command word or an env value stays the string as typed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dtrain.cli.main import main
from dtrain.errors import SpecError
from dtrain.names import shown
from dtrain.numbers import whole_number
from dtrain.spec import JobSpec, yaml_mapping

HEAD = "name: j\ncommand: [echo, 1e-3, 2E0]\nenv: {LR: 1e-3}\nlauncher: torchrun\n"


def spec_of(text: str) -> JobSpec:
    return JobSpec.from_dict(yaml_mapping(text.encode(), "job file", "name: train"), door="cli")


def submit(home: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--home", str(home), "submit-dist", "--dry-run", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("field, typed", [
    ("processes", "2e0"), ("processes", "2.5e0"), ("processes", "1e400"), ("gpu", "5e-1"), ("gpu", "1e3"),
    ("cpu", "5e-1"), ("cpu", "1E3"), ("cpu", "-1e0"), ("max_restarts", "3e0"), ("max_restarts", "1e3")])
def test_a_job_files_exponent_is_read_as_the_flag_reads_it(tmp_path, capsys, field, typed):
    job = tmp_path / "job.yaml"
    job.write_text(HEAD + f"{field}: {typed}\n")
    from_file = submit(tmp_path / "a", capsys, "-f", str(job))
    flag = f"--{field.replace('_', '-')}"
    from_flag = submit(tmp_path / "b", capsys, "j", flag, typed, "-e", "LR=1e-3",
                       "--", "echo", "1e-3", "2E0")
    assert from_file[:2] == from_flag[:2]  # the same spec, or the same refusal word for word but for its name:
    as_written = from_flag[2].replace("error: ", f"error: job file {shown(str(job))}: ", 1).replace(
        f"{flag} ", f"{field}: ")  # the field as written in the file, led by the file's name (the spec's checks);
    assert from_file[2] == (from_flag[2] if "this machine has" in from_flag[2] else as_written)  # the machine's: a
    # backend's refusal of a valid spec (1E3 CPUs) is worded by the Client's door, the flag's
    code, out, err = from_file
    if code == 0:
        spec = yaml.safe_load(out)
        assert spec["command"] == ["echo", "1e-3", "2E0"] and spec["env"] == {"LR": "1e-3"}, out
        assert spec[field] == whole_number(typed) and type(spec[field]) in (int, float)
    else:
        # named as typed, not as a string: by its field, or (1E3 CPUs, valid, beyond this machine's) as its count
        assert (f" {field}: {typed}" in err or f" {typed} " in err) and f"'{typed}'" not in err, err


def test_the_refusal_quotes_the_number_not_a_string():
    with pytest.raises(SpecError) as file:
        spec_of(HEAD + "processes: 2.5e0\n")
    with pytest.raises(SpecError) as flag:
        JobSpec(name="j", command=["echo"], launcher="torchrun", processes=whole_number("2.5e0"))
    assert str(file.value) == str(flag.value.in_words("cli")) == (  # as the flags say it (a job file: its field)
        "invalid --processes 2.5e0: use a whole number from 1 to 4096, e.g. --processes 4")
    assert str(flag.value) == "invalid processes 2.5e0: use a whole number from 1 to 4096, " \
                              "e.g. processes=4"  # the SDK's words


def test_text_fields_keep_the_word_as_a_plain_string():
    spec = spec_of("name: j\ncommand: [python, train.py, --lr, 1e-3]\nenv: {LR: 1E3}\nlabels: {v: 1e3}\n"
                   "volumes: [{storage_class: local, size: 1e9, mount_path: /scratch}]\n")
    assert spec.command == ("python", "train.py", "--lr", "1e-3") and spec.env == {"LR": "1E3"}
    assert spec.labels == {"v": "1e3"} and spec.volumes[0].size == "1e9"
    for text in (*spec.command, *spec.env.values(), *spec.labels.values(), spec.volumes[0].size):
        assert type(text) is str  # no NumberWord left in a spec: it dumps as YAML and JSON
    assert yaml.safe_dump(spec.to_dict())


def test_a_quoted_number_stays_a_string_and_is_refused():
    """Only YAML's plain scalar is a number to YAML 1.2: '1e3' quoted is a string, as before."""
    assert type(yaml_mapping(b"a: 1e3\nb: '1e3'\n", "f", "a: 1")["b"]) is str
    from dtrain.numbers import NumberWord

    assert type(yaml_mapping(b"a: 1e3\n", "f", "a: 1")["a"]) is NumberWord
    with pytest.raises(SpecError, match=r"^invalid --processes '1e3': use a whole number"):
        spec_of(HEAD + "processes: '1e3'\n")


def test_nested_number_fields_follow_their_flags():
    spec = spec_of("name: j\ncommand: [echo]\nbackend: sagemaker\n"
                   "sagemaker: {spot: true, max_runtime: 36e2, max_wait: 72e2, hyperparameters: {lr: 1e-3}}\n")
    assert (spec.sagemaker.max_runtime, spec.sagemaker.max_wait) == (3600, 7200)
    assert spec.sagemaker.hyperparameters == {"lr": "1e-3"}
    spec = spec_of("name: j\ncommand: [echo]\ntolerations: [{key: k, operator: Exists, effect: NoExecute, "
                   "seconds: 36e2}]\n")
    assert spec.tolerations[0].seconds == 3600 and type(spec.tolerations[0].seconds) is int
    with pytest.raises(SpecError, match=r"^invalid toleration seconds 1e9: use a whole number"):  # as --toleration's
        spec_of("name: j\ncommand: [echo]\ntolerations: [{key: k, operator: Exists, effect: NoExecute, seconds: 1e9}]\n")
    notebook = spec_of("name: j\ncommand: [jupyter]\nnotebook: true\nidle_timeout: 36e2\n")
    assert notebook.idle_timeout == 3600


def test_config_yaml_keeps_such_a_word_a_string(tmp_path):
    """config.yaml's reader (plain_numbers) gives the string it always gave."""
    from dtrain.config import UserConfig

    (tmp_path / "config.yaml").write_text("node_labels: {rack: 1e3}\n")
    labels = UserConfig.load(tmp_path).node_labels
    assert labels == {"rack": "1e3"} and type(labels["rack"]) is str
