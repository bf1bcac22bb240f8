"""Tolerations, as a Kubeflow pod's `tolerations` and Run:AI's `--toleration` have them: one spec field
(`tolerations`) behind the CLI, job files, the SDK and the HTTP API, checked by the API server's rules;
every pod's tolerations on Kubernetes; accepted locally (the one node has no taints); refused by
SageMaker. With them: `dtrain config node-labels`, and the LABELS column of `dtrain nodes`."""

from __future__ import annotations

import pytest

from conftest import Dtrain, _cleanup, assert_usage_error
from dtrain import Toleration
from dtrain.backends.kubernetes import KubernetesConfig, render_job
from dtrain.backends.sagemaker import render as sm_render
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.cli.main import _labels_cell
from dtrain.errors import SpecError
from dtrain.spec import JobSpec, notebook_spec, parse_toleration
from test_k8s_render import pod_templates, validate

GPU = "operator=Exists,key=nvidia.com/gpu,effect=NoSchedule"
EVICT = "key=dedicated,value=vision,effect=NoExecute,seconds=60"
MANIFEST = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "vision", "effect": "NoExecute",
             "tolerationSeconds": 60}]


def _spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "train.py"), "image": "ghcr.io/example/lanes:1",
                      "project": "lanes", **kw})


# ------------------------------------------------------------------------- the spec


def test_a_toleration_is_one_value_whichever_door_it_comes_through():
    typed = Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
    mapping = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    for given in (typed, mapping, GPU, "effect=NoSchedule, key=nvidia.com/gpu ,operator=Exists"):
        assert _spec(tolerations=[given]).tolerations == (typed,)
    spec = _spec(tolerations=[GPU, EVICT])
    assert spec.to_dict()["tolerations"] == [mapping, {"key": "dedicated", "operator": "Equal", "value": "vision",
                                                       "effect": "NoExecute", "seconds": 60}]
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert [parse_toleration(t.to_flag()) for t in spec.tolerations] == list(spec.tolerations)
    assert JobSpec.from_dict({"name": "a", "command": ["true"], "tolerations": None}).tolerations == ()
    assert Toleration(key="a").operator == "Equal"  # Kubernetes' default: matches the taint a:NoSchedule (value '')
    assert Toleration(operator="Exists").key == ""  # every taint


@pytest.mark.parametrize("given, says", [
    ({"key": "a b"}, "invalid toleration key 'a b'"),
    ({"key": "a", "value": "-x"}, "invalid value '-x' of toleration a"),
    ({"key": "a", "operator": "In"}, "invalid toleration operator 'In': use Equal"),
    ({"key": "a", "operator": "exists"}, "invalid toleration operator 'exists'"),
    ({"value": "x"}, "a toleration without a key must have operator=Exists"),
    ({"key": "a", "operator": "Exists", "value": "x"}, "operator=Exists, which matches any value: drop value='x'"),
    ({"key": "a", "effect": "NoSched"}, "invalid toleration effect 'NoSched': use NoSchedule, PreferNoSchedule"),
    ({"key": "a", "effect": "NoSchedule", "seconds": 5}, "seconds=5 needs effect=NoExecute"),
    ({"key": "a", "seconds": 5}, "seconds=5 needs effect=NoExecute"),
    ({"key": "a", "effect": "NoExecute", "seconds": -1}, "invalid toleration seconds -1: use a whole number"),
    ({"key": "a", "effect": "NoExecute", "seconds": 365 * 86400 + 1}, "from 0 to 31536000"),
    ({"key": "a", "effect": "NoExecute", "seconds": True}, "invalid toleration seconds True"),
    ({"key": "a", "effect": "NoExecute", "seconds": "60"}, "invalid toleration seconds '60'"),
    ({"key": 1}, "invalid toleration key 1"),
    ({"key": "a", "value": 1}, "invalid value 1 of toleration a: must be a string"),
    ({"key": "a", "value": "x\0"}, "invalid value"),
    ({"tolerationSeconds": 60}, "unknown toleration field tolerationSeconds (did you mean 'seconds'?)"),
])
def test_a_bad_toleration_is_refused_in_one_line_naming_the_rule(given, says):
    with pytest.raises(SpecError) as e:
        _spec(tolerations=[given])
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("given, says", [
    ("nvidia.com/gpu", "tolerations"),
    ({"key": "a"}, "must be a list"),
    ([1], "invalid toleration 1"),
    ([f"key=k{i}" for i in range(17)], "17 tolerations: a job takes 16 at most"),
])
def test_tolerations_are_a_bounded_list(given, says):
    with pytest.raises(SpecError) as e:
        _spec(tolerations=given)
    assert says in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("flag, says", [
    ("nvidia.com/gpu:NoSchedule", "is not one of operator=..., key=..., value=..., effect=..., seconds=..."),
    ("key=a,colour=red", "'colour=red' is not one of"),
    ("key=a,key=b", "key= is given twice"),
    ("", "is not one of"),
    ("key=a,effect=NoExecute,seconds=1.5", "invalid toleration seconds 1.5"),
    ("key=a,effect=NoExecute,seconds=x", "invalid toleration seconds 'x'"),
])
def test_the_flag_is_run_ais_fields_and_refused_in_one_line(flag, says):
    with pytest.raises(SpecError) as e:
        parse_toleration(flag)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert parse_toleration("key=a,effect=NoExecute,seconds=1e3").seconds == 1000  # as every whole-number flag


def test_the_sdk_type_names_a_wrong_field():
    with pytest.raises(SpecError, match="Toleration got unknown field"):
        Toleration(key="a", toleration_seconds=3)


# ------------------------------------------------------------------------- Kubernetes


@pytest.mark.parametrize("fields, config", [
    ({}, KubernetesConfig()),
    ({"launcher": "torchrun", "processes": 4}, KubernetesConfig()),
    ({"launcher": "torchrun", "processes": 8, "gpu": 1}, KubernetesConfig(gpus_per_node=4)),
    ({"launcher": "mpi", "processes": 4}, KubernetesConfig()),
])
def test_every_pod_gets_the_tolerations_where_the_node_selector_goes_and_validates(fields, config):
    objects = render_job(_spec(tolerations=[GPU, EVICT], node_selector={"run.ai/type": "dgx"}, **fields), config,
                         with_namespace=True)
    for obj in objects:
        validate(obj)
    workload = next(o for o in objects if o["kind"] in ("Job", "PyTorchJob", "MPIJob"))
    templates = pod_templates(workload)
    assert len(templates) == (2 if fields.get("launcher") else 1)
    for template in templates:  # the MPI launcher too: its nodeSelector sends it to the tainted nodes
        assert template["spec"]["tolerations"] == MANIFEST
        assert template["spec"]["nodeSelector"] == {"run.ai/type": "dgx"}
    plain = render_job(_spec(**fields), config)
    assert all("tolerations" not in t["spec"] for o in plain if o["kind"] == workload["kind"]
               for t in pod_templates(o))


def test_a_trainjob_and_a_notebook_carry_them_too():
    trainjob = render_job(_spec(launcher="torchrun", processes=2, tolerations=[GPU, EVICT]),
                          KubernetesConfig(trainer="v2"))[-1]
    validate(trainjob)
    patch = trainjob["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert patch["template"]["spec"]["template"]["spec"]["tolerations"] == MANIFEST
    book = render_job(notebook_spec("nb", tolerations=[GPU], image="ghcr.io/example/nb:1", project="lanes"),
                      KubernetesConfig())[-1]
    validate(book)
    assert book["spec"]["template"]["spec"]["tolerations"] == MANIFEST[:1]


def test_every_key_tolerated_renders_as_the_api_has_it():
    [toleration] = render_job(_spec(tolerations=["operator=Exists"]), KubernetesConfig())[-1]["spec"]["template"][
        "spec"]["tolerations"]
    assert toleration == {"operator": "Exists"}


@pytest.mark.slow
def test_the_cli_dry_run_adds_the_flags_to_the_files_list(dt: Dtrain, tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("name: train\ncommand: [python, train.py]\n"
                   "tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n")
    out = dt("--backend", "kubernetes", "submit-mpi", "-f", str(job), "--processes", "2", "--image", "x/y:1",
             "--toleration", GPU, "--toleration", EVICT, "--dry-run").stdout
    assert out.count("tolerations:\n") == 2  # launcher and workers
    assert out.count("key: nvidia.com/gpu") == 2  # the file's and the flag's, the same one: once a pod
    assert out.count("tolerationSeconds: 60") == 2
    proc = dt("--backend", "kubernetes", "submit", "a", "--image", "x/y:1", "--toleration", "key=a,seconds=5",
              "--dry-run", "--", "true", check=False)
    assert_usage_error(proc, "seconds=5 needs effect=NoExecute")
    job.write_text("name: train\ncommand: [python, train.py]\ntolerations: {key: a}\n")
    assert_usage_error(dt("submit", "-f", str(job), "--dry-run", check=False), "tolerations", "a list")


# ------------------------------------------------------------------------- SageMaker


def test_sagemaker_refuses_tolerations_naming_the_instance_type(dt: Dtrain):
    spec = _spec(backend="sagemaker", image=None, tolerations=[GPU], sagemaker={"instance_type": "ml.m5.xlarge"})
    cfg = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMaker", bucket="my-bucket", region="eu-west-1")
    with pytest.raises(SpecError) as e:
        sm_render.training_job_request(spec, cfg)
    assert "no node taints to tolerate" in str(e.value) and "--instance-type" in str(e.value)
    assert sm_render.training_job_request(spec.replace(tolerations=()), cfg)["TrainingJobName"] == "train"
    proc = dt("submit", "a", "--backend", "sagemaker", "--local", "--toleration", GPU, "--", "python", "t.py",
              check=False)
    assert_usage_error(proc, "SageMaker has no node taints to tolerate", GPU)


# ------------------------------------------------------------------------- local


def test_local_accepts_them_and_describe_shows_them(dt: Dtrain):
    dt("submit", "a", "--toleration", GPU, "--toleration", EVICT, "--", "true")
    assert dt.json("describe", "job", "a")["spec"]["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists",
                                                                         "effect": "NoSchedule"}
    text = dt("describe", "job", "a").stdout
    assert "  tolerations:\n    - key: nvidia.com/gpu\n      operator: Exists\n      effect: NoSchedule\n" in text
    dt("submit", "b", "--", "true")
    assert "  tolerations: []\n" in dt("describe", "job", "b").stdout


# ------------------------------------------------------------------------- config node-labels


def test_config_node_labels_sets_shows_and_unsets(dt: Dtrain):
    assert "no node labels besides this machine's own" in dt("config", "node-labels").stdout
    out = dt("config", "node-labels", "--set", "run.ai/type=dgx-a100", "--set", "team=vision").stdout
    assert out.strip() == "node labels saved: run.ai/type=dgx-a100, team=vision"
    assert dt("config", "node-labels").stdout.strip() == "node labels: run.ai/type=dgx-a100, team=vision"
    assert dt.json("nodes")[0]["labels"]["team"] == "vision"
    dt("config", "node-labels", "--unset", "team")
    assert "team" not in dt.json("nodes")[0]["labels"]
    assert "node_labels:\n  run.ai/type: dgx-a100\n" in (dt.home / "config.yaml").read_text()


@pytest.mark.parametrize("words, says", [
    (["--set", "kubernetes.io/arch=x"], "kubernetes.io/arch is this machine's own label"),
    (["--unset", "kubernetes.io/hostname"], "kubernetes.io/hostname is this machine's own label"),
    (["--set", "k=a b"], "invalid value 'a b' of node label k"),
    (["--set", "bad key=x"], "invalid node label key 'bad key'"),
    (["--set", "k"], "--set 'k': give KEY=VALUE"),
    (["--set", "k=1", "--set", "k=2"], "--set k is given twice"),
    (["--set", "team=a", "--unset", "team"], "node label team is both set and unset"),
    (["--unset", "nope"], "no node label 'nope'"),
    (["--unset"], "--unset needs the labels to remove"),
    (["--image", "x"], "--image is not for 'dtrain config node-labels'"),
    (["dgx"], "'dgx' is not for 'dtrain config node-labels'"),
])
def test_config_node_labels_refuses_in_one_line_and_changes_nothing(dt: Dtrain, words, says):
    dt("config", "node-labels", "--set", "run.ai/type=dgx-a100")
    before = (dt.home / "config.yaml").read_text()
    proc = dt("config", "node-labels", *words, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert (dt.home / "config.yaml").read_text() == before


def test_the_local_refusal_names_the_command_that_adds_the_label(dt: Dtrain):
    proc = dt("submit", "a", "--node-type", "dgx-a100", "--node-selector", "team=vision", "--", "true", check=False)
    assert_usage_error(proc, "dtrain config node-labels --set team=vision --set run.ai/type=dgx-a100",
                       "config.yaml")
    dt("config", "node-labels", "--set", "team=vision", "--set", "run.ai/type=dgx-a100")  # as it says
    dt("submit", "a", "--node-type", "dgx-a100", "--node-selector", "team=vision", "--", "true")


# ------------------------------------------------------------------------- dtrain nodes


def test_the_nodes_table_shows_the_labels_that_tell_nodes_apart(dt: Dtrain):
    assert dt("nodes").stdout.splitlines()[0].split()[-1] == "LABELS"
    assert dt("nodes").stdout.splitlines()[1].split()[-1] == "-"  # the kubelet's own only
    dt("config", "node-labels", "--set", "run.ai/type=dgx-a100")
    assert dt("nodes").stdout.splitlines()[1].split()[-1] == "run.ai/type=dgx-a100"
    kube = {"kubernetes.io/hostname": "gpu-1", "node.kubernetes.io/instance-type": "p4d", "beta.kubernetes.io/os":
            "linux", "node-role.kubernetes.io/worker": "", "topology.k8s.io/zone": "a"}
    assert _labels_cell(kube) == "-"
    many = {**kube, "run.ai/type": "dgx", "nvidia.com/gpu.product": "A100", "pool": "a", "team": "v", "z": "1"}
    assert _labels_cell(many) == "nvidia.com/gpu.product=A100,pool=a,run.ai/type=dgx (+2 more)"


# ------------------------------------------------------------------------- HTTP


def test_the_http_api_takes_them_and_refuses_as_the_cli_does(home, tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import local_api

    try:
        with local_api(home) as http:
            body = {"command": ["true"], "working_dir": str(tmp_path)}
            given = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
            r = http.post("/api/v1/jobs", json={"name": "a", "tolerations": given, **body})
            assert r.status_code == 201 and r.json()["spec"]["tolerations"] == given, r.text
            r = http.post("/api/v1/jobs", json={"name": "b", "tolerations": [{"key": "a", "operator": "In"}], **body})
            assert r.status_code == 422, r.text
            r = http.post("/api/v1/jobs", json={"name": "b", "tolerations": [{"key": "a", "seconds": 5}], **body})
            assert r.status_code == 422 and "needs effect=NoExecute" in r.json()["error"], r.text
            schema = http.get("/api/v1/openapi.json").json()["components"]["schemas"]
            assert schema["SpecIn"]["properties"]["tolerations"]["maxItems"] == 16
            assert schema["NotebookIn"]["properties"]["tolerations"] == schema["SpecIn"]["properties"]["tolerations"]
    finally:
        _cleanup(Dtrain(home))
