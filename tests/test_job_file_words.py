"""A job file's refusals name its fields as written there (`processes: 2.5e0`, e.g. `processes: 4`), led by
the file's name, as its `volumes:` entries and YAML 1.1 numbers were; they said the flags' words
("invalid --processes 2.5e0 ... e.g. --processes 4"), which the file never holds. A flag given beside the
file keeps its own words."""
from __future__ import annotations

import pytest

from dtrain.cli.main import main

HEAD = "name: j\ncommand: [echo]\n"


def said(tmp_path, capsys, body: str, *flags: str) -> str:
    job = tmp_path / "job.yaml"
    job.write_text(HEAD + body)
    code = main(["--home", str(tmp_path / "home"), "submit", "-f", str(job), "--dry-run", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    return err.replace(f"'{job}'", "'job.yaml'")


@pytest.mark.parametrize("body, line", [
    ("processes: 2.5e0\n", "invalid processes: 2.5e0: use a whole number from 1 to 4096, e.g. processes: 4"),
    ("cpu: 5000\n", "invalid cpu: 5000: use a number of CPU threads from 0.01 to 1024, e.g. cpu: 2 or cpu: 0.5"),
    ("memory: 1\n", "invalid memory: 1: must be a string such as 512Mi"),
    ("max_restarts: 1e9\n", "invalid max_restarts: 1e9: use a whole number from 0 to 100, e.g. max_restarts: 3"),
    ("gpu: 0.5\n", "gpu: 0.5 is a fraction of a GPU, and GPUs are not shared between jobs here: give whole GPUs "
                   "per process (gpu: 1), or leave gpu: out to run on CPUs"),
    ("image_pull_secrets: 3\n", "invalid image_pull_secrets: 3: must be a list of names, e.g. "
                                "image_pull_secrets: [regcred]"),
    ("tolerations: 3\n", "invalid tolerations: 3: must be a list, e.g. tolerations: [{key: nvidia.com/gpu, "
                         "operator: Exists}]"),
])
def test_a_job_files_field_is_named_as_written_there(tmp_path, capsys, body, line):
    assert said(tmp_path, capsys, body) == f"dtrain: error: job file 'job.yaml': {line}\n"


def test_a_flag_beside_the_file_keeps_the_flags_words(tmp_path, capsys):
    assert said(tmp_path, capsys, "cpu: 2\n", "--cpu", "5000") == (
        "dtrain: error: invalid --cpu 5000: use a number of CPU threads from 0.01 to 1024, e.g. --cpu 2 or --cpu 0.5\n")
    assert said(tmp_path, capsys, "cpu: 2\n", "--gpu", "1e3") == (  # a field the file did not give: its flag
        "dtrain: error: invalid --gpu 1e3: use a whole number from 0 to 16, e.g. --gpu 1\n")


@pytest.mark.parametrize("body, flags, line", [
    ("sagemaker: {spot: true, max_wait: 1e9}\n", (),
     "job file 'job.yaml': invalid sagemaker: max_wait: 1e9: use a whole number from 1 to 2419200, e.g. "
     "sagemaker: {max_wait: 172800}"),
    ("sagemaker:\n  spot: false\n  max_wait: 7200\n", (),
     "job file 'job.yaml': sagemaker: max_wait: applies to spot training only: add sagemaker: {spot: true} or drop "
     "sagemaker: max_wait:"),
    ("sagemaker: {max_wait: 7200}\n", ("--spot", "--max-runtime", "9000"),  # each named as it was given
     "job file 'job.yaml': sagemaker: max_wait: 7200 is below --max-runtime 9000: SageMaker needs the spot wait to "
     "cover the run; raise sagemaker: max_wait: to at least 9000, or pass --max-runtime 7200 or less"),
    ("sagemaker: {checkpoint_uri: nope}\n", (),
     "job file 'job.yaml': invalid sagemaker: checkpoint_uri: 'nope': use s3://BUCKET/PREFIX, e.g. "
     "sagemaker: {checkpoint_uri: s3://my-bucket/checkpoints}"),
    ("sagemaker: {spot: true, max_wait: 7200}\n", ("--max-wait", "1e10"),  # the flag's value: the flag's words
     "invalid --max-wait 1e10: use a whole number from 1 to 2419200, e.g. --max-wait 172800"),
])
def test_a_job_files_sagemaker_option_is_named_as_written_there(tmp_path, capsys, body, flags, line):
    """The options under `sagemaker:` were named as flags ("invalid --max-wait 1e9 ... e.g. --max-wait
    172800"), which the file never held."""
    assert said(tmp_path, capsys, body, *flags) == f"dtrain: error: {line}\n"
