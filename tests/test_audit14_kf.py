"""A fourteenth audit, the Kubeflow + SageMaker user's day two: the compiled pipeline's IR read as KFP's
run form reads it, the pipeline driven with kfp.local directly, the SageMaker contract inside a --local
host, and the CIFAR10 script read under it.
- The IR's parameters had no descriptions (a KFP run form showed 16 bare fields, `backend` among them,
  which is the process-group backend, not dtrain's), nor did `dtrain pipeline list`: the pipelines'
  docstrings now describe each parameter, which KFP's compiler carries into the IR, and the list shows them.
- A --local host's own hostname did not resolve in the /etc/hosts it was given (algo-1..N only), so
  every Gloo rank logged 'Unable to resolve hostname' and fell back to loopback: it resolves now, as a
  container's does in the /etc/hosts its runtime writes.
"""

from __future__ import annotations

import json
import shlex
import socket

import pytest

from conftest import Dtrain
from dtrain.cli.main import main



# ---------------------------------------------------------------- the IR's parameter descriptions


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hybrid-cifar10", "lane-detection"])
def test_every_parameter_of_the_compiled_pipeline_is_described_in_the_ir(tmp_path, name):
    pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")
    import yaml

    from dtrain import pipelines

    ir = yaml.safe_load(pipelines.compile_pipeline(name, to=tmp_path / "p.yaml").read_text())
    params = ir["root"]["inputDefinitions"]["parameters"]
    bare = [k for k, v in params.items() if not v.get("description")]
    assert not bare, f"{name}: parameters without a description in the IR: {bare}"
    if name == "hybrid-cifar10":  # the word a KFP user misreads: not dtrain's backend but torch.distributed's
        assert "process-group backend" in params["backend"]["description"]
        assert "sagemaker only" in params["data_uri"]["description"]


def test_pipeline_list_shows_each_parameters_description(home, capsys):
    pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")
    assert main(["--home", str(home), "pipeline", "list"]) == 0  # in this process: KFP loads once
    out = capsys.readouterr().out
    assert "DESCRIPTION" in out.splitlines()[1]
    backend = next(line for line in out.splitlines() if line.startswith("backend ") and "gloo" in line)
    assert "process-group backend" in backend
    assert main(["--home", str(home), "pipeline", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    hybrid = {p["name"]: p for p in listed[0]["params"]}
    assert hybrid["job_name"]["description"].startswith("the dtrain job's name")


# ---------------------------------------------------------------- a --local host's hostname


@pytest.mark.slow
def test_a_local_sagemaker_host_resolves_its_own_hostname(home, tmp_path):
    """Gloo (torch.distributed on CPU) looks the hostname up; a host that cannot logs a warning per rank."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "who.py").write_text("import socket\nname = socket.gethostname()\n"
                                 "print('RESOLVED', name, socket.gethostbyname(name))\n")
    d = Dtrain(home)
    d("submit", "who", "--backend", "sagemaker", "--local", "--source-dir", str(code), "--", "python", "who.py")
    assert d("--backend", "sagemaker", "wait", "who", timeout=120).returncode == 0
    log = d("--backend", "sagemaker", "logs", "who").stdout
    line = next(x for x in log.splitlines() if "RESOLVED" in x)
    assert line.split()[-2:] == [socket.gethostname(), "127.0.0.1"], log


def test_the_hosts_file_names_the_machine_once_beside_the_hosts():
    from dtrain.backends.sagemaker import contract

    req = {"ResourceConfig": {"InstanceCount": 2, "InstanceType": "ml.m5.xlarge"}}
    first = contract.etc_hosts(req, "vm").splitlines()[0].split()
    assert first == ["127.0.0.1", "localhost", "algo-1", "algo-2", "vm"]
    assert contract.etc_hosts(req, "algo-1").splitlines()[0].split().count("algo-1") == 1


# ---------------------------------------------------------------- a SageMaker job's name again


@pytest.mark.slow
def test_a_taken_sagemaker_name_names_the_purge_that_frees_it(home, tmp_path):
    """A resubmission under the same name (the estimator's habit: fit() again) was told names are
    'never reused'; DeleteTrainingJob frees one, and the refusal now names the command that does it."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text("print('ok')\n")
    d = Dtrain(home)
    run = ["submit", "again", "--backend", "sagemaker", "--local", "--source-dir", str(code), "--", "python", "t.py"]
    d(*run)
    d("--backend", "sagemaker", "wait", "again", timeout=120)
    refused = d(*run, check=False)
    assert refused.returncode != 0 and "never reused" not in refused.stderr
    assert "(Completed): submit under a new name, or free the name with" in refused.stderr
    purge = refused.stderr.split("'")[3]
    assert purge == "dtrain --backend sagemaker delete again --purge"
    d(*shlex.split(purge)[1:])
    d(*run)  # the name is free again
    assert d("--backend", "sagemaker", "wait", "again", timeout=120).returncode == 0


# ---------------------------------------------------------------- the CIFAR10 script rerun with new settings


@pytest.mark.slow
def test_a_rerun_whose_checkpoint_is_already_at_its_last_step_says_nothing_is_left_to_train(tmp_path, capsys,
                                                                                           monkeypatch):
    """The day-two habit: run again with another --lr. The run resumed at its last step, trained nothing,
    wrote the checkpoint's model again and said 'resumed with --lr 0.01' as if that lr had been used."""
    from dtrain.workloads.cifar10 import main as cifar_main

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SM_HOSTS", "SM_CURRENT_HOST",
                "SM_CHANNEL_TRAINING", "SM_MODEL_DIR", "SM_OUTPUT_DATA_DIR", "DTRAIN_MODEL_DIR",
                "DTRAIN_CHECKPOINT_DIR"):
        monkeypatch.delenv(var, raising=False)
    assert cifar_main(["synth", "--out", str(tmp_path / "data"), "--n-train", "16", "--n-test", "4"]) == 0
    args = ["train", "--data-dir", str(tmp_path / "data"), "--model-dir", str(tmp_path / "out"), "--max-steps", "2",
            "--batch-size", "4", "--device", "cpu"]
    assert cifar_main(args) == 0
    first = capsys.readouterr().out
    assert "nothing is left to train" not in first
    assert cifar_main([*args, "--lr", "0.01"]) == 0
    again = capsys.readouterr().out
    assert ("the checkpoint's step 2 is at or past this run's last step 2: nothing is left to train, and the model "
            "is the checkpoint's; to train with this run's settings start over (--no-resume, or another "
            "--checkpoint-dir), or give more --epochs or --max-steps") in again
    assert cifar_main([*args, "--max-steps", "3"]) == 0  # a longer schedule trains on, unremarked
    assert "nothing is left to train" not in capsys.readouterr().out


# ---------------------------------------------------------------- where a SageMaker job's output data is


def test_a_sagemaker_jobs_description_names_its_output_data_beside_the_model():
    from dtrain.backends.sagemaker.status import job_info
    from dtrain.spec import JobSpec

    desc = {"TrainingJobName": "j", "TrainingJobStatus": "Completed", "ResourceConfig": {"InstanceCount": 1},
            "ModelArtifacts": {"S3ModelArtifacts": "s3://b/p/j/output/model.tar.gz"}}
    info = job_info(desc, JobSpec(name="j", command=("python", "t.py"), backend="sagemaker"))
    assert info.extra["output_data"] == "s3://b/p/j/output/output.tar.gz"
    del desc["ModelArtifacts"]  # not ended yet: SageMaker names no model, nor output
    assert "output_data" not in job_info(desc, JobSpec(name="j", command=("python", "t.py"))).extra


@pytest.mark.slow
def test_describe_names_the_output_tar_gz_that_holds_what_the_job_wrote_to_sm_output_data_dir(home, tmp_path):
    """The CIFAR10 workload's metrics go to $SM_OUTPUT_DATA_DIR (output.tar.gz), which neither `describe job`
    nor `artifacts` (model.tar.gz) named: the metrics of a SageMaker run could not be found from dtrain."""
    import tarfile

    code = tmp_path / "code"
    code.mkdir()
    (code / "t.py").write_text("import os\nopen(os.path.join(os.environ['SM_OUTPUT_DATA_DIR'], 'metrics.jsonl'), "
                               "'w').write('{}\\n')\n")
    d = Dtrain(home)
    d("submit", "outd", "--backend", "sagemaker", "--local", "--source-dir", str(code), "--", "python", "t.py")
    d("--backend", "sagemaker", "wait", "outd", timeout=120)
    line = next(x for x in d("--backend", "sagemaker", "describe", "job", "outd").stdout.splitlines()
                if x.startswith("Output data: "))
    uri = line.split()[2]
    assert uri.startswith("s3://") and uri.endswith("/outd/output/output.tar.gz")
    with tarfile.open(home / "sagemaker-local" / "s3" / uri[len("s3://"):]) as tar:  # --local's S3 is a folder
        assert "metrics.jsonl" in tar.getnames()
