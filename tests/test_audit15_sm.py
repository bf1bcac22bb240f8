"""SageMaker, fifteenth audit: day two of the CIFAR10 job on AWS (moto's server behind boto3's chain).

- `dtrain delete` of a job that had ended said "has been deleted (Succeeded)": SageMaker keeps an ended job
  as it ended (there is nothing to stop), so `list` still showed it. The line now says it had ended and stays
  listed, and names `delete --purge` (DeleteTrainingJob), which removes it.
- A job asked for in another region than the one it runs in read "not found ...; see the names with dtrain
  list": no region named, and `dtrain list` asked the default backend where SageMaker was not it. The line
  names the region asked, a region where the job was seen, and the list command that reaches SageMaker.
- A name taken by an ended spot job said "submit under a new name", which starts over from no checkpoints:
  the line now names the --checkpoint-s3-uri that goes on from the old job's.
- `dtrain nodes` printed an empty table: SageMaker has no standing nodes, which a warning now says.
- `--instance-count 3` with `--processes 2` said "use a multiple of 3 or set --instance-count", which the
  user had set: it now names the --processes that fits and the counts that divide the processes.
"""

from __future__ import annotations

import pytest

from test_sagemaker_backend import CFG, clients, code, moto_url, spec  # noqa: F401  (a moto server for this module)

from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.backends.sagemaker.render import training_job_request
from dtrain.cli.main import main
from dtrain.errors import ConflictError, SpecError


@pytest.fixture
def cli(home, code, moto_url, monkeypatch, capsys):  # noqa: F811
    """`dtrain` in this process, with AWS behind boto3's standard chain at moto's server."""
    for k, v in {"DTRAIN_HOME": str(home), "AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                 "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(code)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err

    assert run("config", "sagemaker", "--role", CFG.role, "--bucket", CFG.bucket, "--region", CFG.region)[0] == 0
    return run


@pytest.mark.slow  # a CLI submit, delete and list against moto (boto3 clients made each call)
def test_delete_of_an_ended_job_says_it_stays_listed_and_names_purge(cli, clients):  # noqa: F811
    assert cli("config", "backend", "sagemaker")[0] == 0
    assert cli("submit", "ended-del", "-p", "team-a", "--", "python", "train.py")[0] == 0  # moto: Completed at once
    rc, out, err = cli("delete", "ended-del", "-p", "team-a")
    assert (rc, err) == (0, "")
    assert out == ("The job 'ended-del' had already ended (Succeeded): nothing to stop, and it stays listed; "
                   "'dtrain delete ended-del --purge -p team-a' forgets it\n")
    assert "ended-del" in cli("list", "-p", "team-a")[1]  # the line is true: it is still listed


@pytest.mark.slow  # five CLI calls against moto
def test_a_job_of_another_region_is_named_with_the_region_it_was_seen_in(cli, clients):  # noqa: F811
    assert cli("submit", "east-job", "--backend", "sagemaker", "--", "python", "train.py")[0] == 0
    assert cli("--backend", "sagemaker", "describe", "job", "east-job")[0] == 0
    assert cli("config", "sagemaker", "--region", "us-west-2")[0] == 0
    rc, out, err = cli("--backend", "sagemaker", "describe", "job", "east-job")
    assert (rc, out) == (2, "")
    assert err.startswith("dtrain: error: SageMaker job 'east-job' not found in region us-west-2 (ValidationException: ")
    assert err.endswith("; it was seen in us-east-1: dtrain config sagemaker --region us-east-1; see the names with "
                        "'dtrain --backend sagemaker list'\n")  # local is the default backend: plain 'dtrain list'
    rc, _, err = cli("--backend", "sagemaker", "logs", "never-was")  # asked its jobs, not SageMaker's
    assert rc == 2 and "not found in region us-west-2 (" in err and "seen in" not in err
    assert err.endswith("; see the names with 'dtrain --backend sagemaker list'\n")


@pytest.mark.parametrize("processes, count, line", [
    (2, 3, "--processes 2 does not split evenly over --instance-count 3: use --processes 3 (a multiple of 3) or "
           "an --instance-count that divides 2 (1, 2)"),
    (10, 4, "--processes 10 does not split evenly over --instance-count 4: use --processes 8 (a multiple of 4) or "
            "an --instance-count that divides 10 (1, 2, 5, 10)"),
    (360, 7, "--processes 360 does not split evenly over --instance-count 7: use --processes 357 (a multiple of 7) "
             "or an --instance-count that divides 360 (1, 2, 3, 4, 5, 6, 8, 9, ...)"),
])
def test_an_instance_count_that_does_not_divide_the_processes_names_what_does(processes, count, line):
    job = spec("split", processes=processes, launcher="torchrun", sm={"instance_count": count})
    with pytest.raises(SpecError) as refused:
        training_job_request(job, SageMakerConfig(role=CFG.role, bucket=CFG.bucket, region=CFG.region))
    assert str(refused.value) == line


def test_a_one_process_job_on_two_instances_is_named_so_not_asked_for_two_processes():
    job = spec("one", sm={"instance_count": 2})
    with pytest.raises(SpecError, match="^a one-process job runs on one instance: drop --instance-count or use "
                                        "submit-dist$"):
        training_job_request(job, CFG)


def test_nodes_on_sagemaker_say_there_are_none_standing(home):
    """`dtrain nodes` printed a header and no row, as a cluster without machines or one not read would."""
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    be = SageMakerBackend(CFG, home=home, command=lambda words: f"dtrain --backend sagemaker {words}")
    nodes = be.nodes()
    assert list(nodes) == []
    assert [(n.code, n.message) for n in nodes.notices] == [("no-nodes", (
        "SageMaker has no standing nodes: each job gets its own instances while it runs (--instance-type, "
        "ml.m5.xlarge as configured); 'dtrain --backend sagemaker list' shows the jobs and their types"))]


def test_a_taken_name_names_the_checkpoint_uri_a_new_name_goes_on_from(clients, code):  # noqa: F811
    """A stopped spot job submitted again under a new name got checkpoints of its own and started over."""
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    be.submit(spec("spot-day1", sm={"spot": True, "max_runtime": 3600}))
    with pytest.raises(ConflictError) as refused:
        be.submit(spec("spot-day1", sm={"spot": True, "max_runtime": 3600}))
    assert str(refused.value) == (
        "a SageMaker training job named 'spot-day1' exists (Completed): submit under a new name, or free the name "
        "with 'dtrain delete spot-day1 --purge' (DeleteTrainingJob, once it has ended; its S3 objects stay); under a "
        "new name, --checkpoint-s3-uri s3://dtrain-test/dtrain/spot-day1/checkpoints goes on from its checkpoints")
    again = spec("spot-day2", sm={"spot": True, "max_runtime": 3600,
                                  "checkpoint_uri": "s3://dtrain-test/dtrain/spot-day1/checkpoints"})
    req = be.render(again)[-1]["SageMaker.CreateTrainingJob"]  # the hint's flag is taken as printed
    assert req["CheckpointConfig"]["S3Uri"] == "s3://dtrain-test/dtrain/spot-day1/checkpoints"
