"""Node selection, as Run:AI's `--node-type` and a Kubeflow pod's `nodeSelector` have it: one spec
field (`node_selector`) behind the CLI, job files, the SDK and the HTTP API; every pod's nodeSelector
on Kubernetes; this machine's labels locally (a selector it cannot match is refused at submit, where
a cluster would leave the pod Pending); refused by SageMaker, which has no nodes to choose."""

from __future__ import annotations

import platform
import socket

import pytest

from conftest import Dtrain, _cleanup, assert_usage_error
from dtrain.backends.kubernetes import KubernetesConfig, render_job
from dtrain.backends.local.node import node_labels
from dtrain.backends.sagemaker import render as sm_render
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.errors import SpecError
from dtrain.spec import LABEL_VALUE_RE, JobSpec, notebook_spec, parse_node_selector
from test_k8s_backend import cluster, make_backend  # noqa: F401  (fixtures: the fake API server)
from test_k8s_render import pod_templates, validate

SELECTOR = {"run.ai/type": "dgx-a100", "kubernetes.io/arch": "amd64"}
ARCH = node_labels({})["kubernetes.io/arch"]


def _spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "train.py"), "image": "ghcr.io/example/lanes:1",
                      "project": "lanes", **kw})


# ------------------------------------------------------------------------- the spec


def test_the_selector_is_a_spec_field_that_round_trips_and_takes_any_prefix():
    spec = _spec(node_selector={**SELECTOR, "kubernetes.io/hostname": "gpu-1", "node.kubernetes.io/instance-type": ""})
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["node_selector"]["run.ai/type"] == "dgx-a100"
    assert JobSpec.from_dict({"name": "a", "command": ["true"], "node_selector": None}).node_selector == {}
    assert _spec().node_selector == {}


@pytest.mark.parametrize("selector, says", [
    ({"bad key": "x"}, "invalid node selector key 'bad key'"),
    ({"-x": "y"}, "invalid node selector key '-x'"),
    ({"a" * 64: "y"}, "invalid node selector key"),
    ({"k": "-x"}, "invalid value '-x' of node selector k"),
    ({"k": "v" * 64}, "invalid value"),
    ({"k": 1}, "invalid value 1 of node selector k: must be a string, e.g. node_selector={'k': '1'}"),
    ({"k": True}, "invalid value True of node selector k: must be a string, e.g. node_selector={'k': 'true'}"),
    ({f"k{i}": "v" for i in range(17)}, "16 at most"),
    ("run.ai/type=x", "must be a mapping"),
])
def test_a_bad_selector_is_refused_in_one_line_naming_the_rule(selector, says):
    with pytest.raises(SpecError) as e:
        _spec(node_selector=selector)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_node_type_is_run_ais_label_and_the_flags_merge():
    assert parse_node_selector(["a=1", "a=2"], "dgx") == {"a": "2", "run.ai/type": "dgx"}
    assert parse_node_selector(["run.ai/type=dgx"], "dgx") == {"run.ai/type": "dgx"}
    with pytest.raises(SpecError, match="keep one"):
        parse_node_selector(["run.ai/type=a"], "b")
    with pytest.raises(SpecError, match="use KEY=VALUE"):
        parse_node_selector(["a"])


def test_a_kubeflow_spelling_of_the_field_is_pointed_at_it():
    for wrong in ("nodeSelector", "node_type"):
        with pytest.raises(SpecError, match="did you mean 'node_selector'"):
            JobSpec.from_dict({"name": "a", "command": ["true"], wrong: {"a": "b"}})


# ------------------------------------------------------------------------- Kubernetes


@pytest.mark.parametrize("fields, config", [
    ({}, KubernetesConfig()),
    ({"launcher": "torchrun", "processes": 4}, KubernetesConfig()),
    ({"launcher": "torchrun", "processes": 8, "gpu": 1}, KubernetesConfig(gpus_per_node=4)),
    ({"launcher": "mpi", "processes": 4}, KubernetesConfig()),
])
def test_every_replica_pod_gets_the_node_selector_and_validates(fields, config):
    objects = render_job(_spec(node_selector=SELECTOR, **fields), config, with_namespace=True)
    for obj in objects:
        validate(obj)
    workload = next(o for o in objects if o["kind"] in ("Job", "PyTorchJob", "MPIJob"))
    templates = pod_templates(workload)
    assert len(templates) == (2 if fields.get("launcher") else 1)  # Master+Worker, Launcher+Worker
    for template in templates:  # the MPI launcher included, as Run:AI places every pod of a workload
        assert template["spec"]["nodeSelector"] == SELECTOR
    plain = render_job(_spec(**fields), config)
    assert all("nodeSelector" not in t["spec"]
               for o in plain if o["kind"] == workload["kind"] for t in pod_templates(o))


def test_a_trainjob_and_a_notebook_carry_it_too():
    trainjob = render_job(_spec(launcher="torchrun", processes=2, node_selector=SELECTOR),
                          KubernetesConfig(trainer="v2"))[-1]
    validate(trainjob)
    patch = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert patch["template"]["spec"]["template"]["spec"]["nodeSelector"] == SELECTOR
    book = render_job(notebook_spec("nb", node_selector=SELECTOR, image="ghcr.io/example/nb:1", project="lanes"),
                      KubernetesConfig())[-1]
    validate(book)
    assert book["spec"]["template"]["spec"]["nodeSelector"] == SELECTOR


def test_the_cli_dry_run_prints_it_from_flags_and_a_job_file(dt: Dtrain, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: train\ncommand: [python, train.py]\nnode_selector: {kubernetes.io/arch: amd64}\n")
    out = dt("--backend", "kubernetes", "submit-mpi", "-f", str(job), "--processes", "2", "--image", "x/y:1",
             "--node-type", "dgx-a100", "--dry-run").stdout
    assert out.count("nodeSelector:") == 2  # launcher and workers
    assert "run.ai/type: dgx-a100" in out and "kubernetes.io/arch: amd64" in out
    job.write_text("name: train\ncommand: [python, train.py]\nnode_selector: [a]\n")
    assert_usage_error(dt("submit", "-f", str(job), "--dry-run", check=False), "node_selector", "mapping")


def test_kubernetes_nodes_show_their_labels(make_backend, cluster):
    allocatable = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"}
    cluster.create({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": "gpu-1", "labels": {"run.ai/type": "dgx-a100"}},
                    "status": {"allocatable": allocatable, "capacity": dict(allocatable)}})
    cluster.add_node("cpu-1")
    labels = {n.name: dict(n.labels) for n in make_backend().nodes()}
    assert labels == {"gpu-1": {"run.ai/type": "dgx-a100"}, "cpu-1": {}}


# ------------------------------------------------------------------------- SageMaker


def test_sagemaker_refuses_node_selection_naming_the_instance_type():
    spec = _spec(backend="sagemaker", image=None, node_selector={"run.ai/type": "dgx"},
                 sagemaker={"instance_type": "ml.m5.xlarge"})
    cfg = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMaker", bucket="my-bucket", region="eu-west-1")
    with pytest.raises(SpecError) as e:
        sm_render.training_job_request(spec, cfg)
    assert "no node selection" in str(e.value) and "--instance-type" in str(e.value) and "\n" not in str(e.value)
    assert sm_render.training_job_request(spec.replace(node_selector={}), cfg)["TrainingJobName"] == "train"


def test_sagemaker_submit_refuses_it_in_one_line(dt: Dtrain):
    proc = dt("submit", "a", "--backend", "sagemaker", "--local", "--node-type", "dgx", "--", "python", "t.py",
              check=False)
    assert_usage_error(proc, "SageMaker has no node selection", "--instance-type")


# ------------------------------------------------------------------------- local: this machine


def test_this_machine_has_the_kubelets_well_known_labels():
    labels = node_labels({"run.ai/type": "dgx", "kubernetes.io/os": "windows"})
    assert labels["kubernetes.io/os"] == platform.system().lower()  # its own: config.yaml cannot change it
    assert labels["kubernetes.io/arch"] == {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), ARCH)
    host = socket.gethostname().lower()  # left out where it is no label value (over 63 characters)
    assert labels.get("kubernetes.io/hostname") == (host if LABEL_VALUE_RE.match(host) else None)
    assert labels["run.ai/type"] == "dgx"


def test_local_submit_refuses_a_selector_this_machine_cannot_match(dt: Dtrain):
    proc = dt("submit", "a", "--node-type", "dgx-a100", "--", "true", check=False)
    assert_usage_error(proc, "run.ai/type=dgx-a100", f"kubernetes.io/arch={ARCH}", "config.yaml",
                       "dtrain config node-labels --set run.ai/type=dgx-a100")
    assert dt("describe", "job", "a", check=False).returncode != 0  # nothing stored
    other = "arm64" if ARCH != "arm64" else "amd64"
    proc = dt("submit", "a", "--node-selector", f"kubernetes.io/arch={other}", "--dry-run", "--", "true", check=False)
    assert_usage_error(proc, "the machine's own", "--backend kubernetes")


def test_local_submit_runs_a_job_whose_selector_matches_and_describe_shows_it(dt: Dtrain):
    (dt.home / "config.yaml").write_text("node_labels:\n  run.ai/type: dgx-a100\n")
    dt("submit", "a", "--node-type", "dgx-a100", "--node-selector", f"kubernetes.io/arch={ARCH}", "--", "true")
    assert dt.json("describe", "job", "a")["spec"]["node_selector"] == {"run.ai/type": "dgx-a100",
                                                                        "kubernetes.io/arch": ARCH}
    assert "run.ai/type: dgx-a100" in dt("describe", "job", "a").stdout
    assert dt.json("nodes")[0]["labels"]["run.ai/type"] == "dgx-a100"
    dt("config", "project", "default")  # a config change keeps the hand-written node_labels
    assert "run.ai/type: dgx-a100" in (dt.home / "config.yaml").read_text()


def test_a_bad_node_label_in_config_yaml_is_named(dt: Dtrain):
    (dt.home / "config.yaml").write_text("node_labels: {run.ai/type: 'a b'}\n")
    assert_usage_error(dt("nodes", check=False), "node_labels", "invalid value 'a b'")
    # a number YAML reads as no string is told to quote it, as in a job file (it read "e.g. None={'gpu': '8'}")
    (dt.home / "config.yaml").write_text("node_labels:\n  gpu: 8\n")
    proc = dt("nodes", check=False)
    assert_usage_error(proc, "node_labels", "invalid value 8 of node_labels gpu: ", "(quote it in YAML)")
    assert "None=" not in proc.stderr
    (dt.home / "config.yaml").write_text("node_labels: [a]\n")
    assert_usage_error(dt("nodes", check=False), "node_labels", "mapping")


def test_notebook_start_takes_the_flags(dt: Dtrain):
    proc = dt("notebook", "nb", "--node-type", "dgx-a100", check=False)
    assert_usage_error(proc, "job 'nb' asks for a node with run.ai/type=dgx-a100")


# ------------------------------------------------------------------------- HTTP


def test_the_http_api_takes_it_and_refuses_as_the_cli_does(home, tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import local_api

    try:
        with local_api(home) as http:
            body = {"command": ["true"], "working_dir": str(tmp_path)}
            r = http.post("/api/v1/jobs", json={"name": "a", "node_selector": {"kubernetes.io/arch": ARCH}, **body})
            assert r.status_code == 201 and r.json()["spec"]["node_selector"] == {"kubernetes.io/arch": ARCH}, r.text
            r = http.post("/api/v1/jobs", json={"name": "b", "node_selector": {"run.ai/type": "dgx"}, **body})
            # a request this backend can never meet: 422 as a bad field (it was 409, a quota's, which frees up)
            assert r.status_code == 422 and "run.ai/type=dgx" in r.json()["error"], r.text
            assert r.json()["kind"] == "SpecError", r.text
            r = http.post("/api/v1/jobs", json={"name": "b", "node_selector": {"k": 1}, **body})
            assert r.status_code == 422, r.text
            r = http.post("/api/v1/notebooks", json={"name": "nb", "node_selector": {"run.ai/type": "dgx"}})
            assert r.status_code == 422 and "run.ai/type=dgx" in r.json()["error"], r.text
            nodes = http.get("/api/v1/nodes").json()
            assert nodes[0]["labels"]["kubernetes.io/arch"] == ARCH
    finally:
        _cleanup(Dtrain(home))
