"""Edges of the Kubernetes rendering that once produced manifests the API server refuses, or
silently dropped what the user asked for: each is now rendered exactly or refused in one line.

Every manifest that renders goes through test_k8s_render's `validate` (the real schemas, plus the
quantity grammar, unique mount paths and Service names that the API server checks itself).
"""

from __future__ import annotations

import os
import re
import shlex
from fractions import Fraction
from pathlib import Path

import pytest

from dtrain.backends.kubernetes import KubernetesConfig, render_job, render_restore
from dtrain.backends.kubernetes.render import render_workload, resources
from dtrain.backends.kubernetes.render_storage import render_volume
from dtrain.errors import SpecError
from dtrain.names import CLASS_RE, check_storage_class, job_volume_name, kubernetes_quantity
from dtrain.spec import JobSpec, notebook_spec, parse_pvc
from test_k8s_render import CRD_DIR, QUANTITY, validate

pytestmark = pytest.mark.skipif(not CRD_DIR.is_dir(), reason=f"CRD schemas not found at {CRD_DIR}")
REPO = Path(__file__).resolve().parents[1]
IMAGE = "ghcr.io/example/lanes:1"


def _spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "t.py"), "image": IMAGE, "project": "lanes", **kw})


def _validate_all(spec: JobSpec, config: KubernetesConfig | None = None) -> list[dict]:
    objects = render_job(spec, config or KubernetesConfig(), with_namespace=True)
    for obj in objects:
        validate(obj)
    return objects


# ------------------------------------------------------------------------- 1, 2: quantities

_SCALE = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "n": Fraction(1, 10**9),
          "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1, "k": 10**3, "M": 10**6, "G": 10**9,
          "T": 10**12, "P": 10**15, "E": 10**18}


def k8s_bytes(quantity: str) -> Fraction:
    """What Kubernetes reads in a quantity the renderer wrote: a whole number and a suffix or exponent."""
    m = re.fullmatch(r"([0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?|e-?[0-9]+)", quantity)
    assert m and QUANTITY.match(quantity), f"not a plain Kubernetes quantity: {quantity!r}"
    scale = Fraction(10) ** int(m.group(2)[1:]) if m.group(2)[:1] == "e" else Fraction(_SCALE[m.group(2)])
    return int(m.group(1)) * scale


@pytest.mark.parametrize("text, factor, exact", [
    ("1234567.5Mi", 1, Fraction(12345675, 10) * 2**20),  # was 1.23457e+06Mi
    ("12345.67Mi", 1, Fraction(1234567, 100) * 2**20),  # was 12345.7Mi: rounded
    ("12345.67Mi", 3, Fraction(1234567, 100) * 2**20 * 3),
    ("5000K", 1, 5_000_000),  # K is dtrain's k; Kubernetes knows only k
    ("100K", 7, 700_000),
    ("+1Gi", 1, 2**30),  # parse_size takes a leading '+'; Kubernetes needs none
    ("1.5Gi", 2, 3 * 2**30),
    ("1.5G", 2, 3 * 10**9),
    ("4194304000m", 1, 4 * 2**20),
    ("1e3", 1, 1000),
    ("2.5e9", 4, 10**10),
    (".5Ki", 1, 512),
    ("5.", 1, 5),
    ("0.1", 1, Fraction(1, 10)),
    ("1Ei", 1, 2**60),
    ("999999999999.999999999Ki", 1, Fraction(999999999999999999999, 10**9) * 1024),  # past a float's 53 bits
    ("1.5e3", 3, 4500),
])
def test_quantities_are_exact_and_kubernetes_valid(text, factor, exact):
    out = kubernetes_quantity(text, factor)
    assert k8s_bytes(out) == exact, (text, factor, out)


def test_quantities_keep_the_users_unit_when_whole():
    cases = {("4Gi", 2): "8Gi", ("5000K", 1): "5000k", ("1e3", 2): "2e3", ("1.5e3", 1): "15e2",
             ("1234567.5Mi", 1): "1264197120Ki", ("12345.67Mi", 1): "12945373265920m", ("+1Gi", 1): "1Gi",
             ("1.5n", 1): "2n"}  # below a nano Kubernetes rounds up, and so does dtrain
    assert {key: kubernetes_quantity(*key) for key in cases} == cases


def test_memory_of_a_packed_pod_renders_exactly_and_validates():
    spec = _spec(launcher="torchrun", processes=4, gpu=1, memory="1234567.5Mi")
    memory = resources(spec, 2)["limits"]["memory"]
    assert k8s_bytes(memory) == Fraction(12345675, 10) * 2**20 * 2
    _validate_all(spec, KubernetesConfig(gpus_per_node=2))
    for text in ("12345.67Mi", "5000K", "+1Gi"):
        objects = _validate_all(_spec(memory=text))
        limits = objects[-1]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert QUANTITY.match(limits["memory"]) and "K" not in limits["memory"] and "+" not in limits["memory"]


def test_k_sizes_become_kubernetes_k_on_every_pvc():
    config = KubernetesConfig(shm_size="64000K")
    objects = _validate_all(_spec(volumes=(parse_pvc("fast:5000K:/mnt"),), large_shm=True), config)
    pvc = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "5000k"
    pod = objects[-1]["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"] == "64000k"
    created = render_volume("v1", project="lanes", size="5000K", storage_class=None, config=config)
    restored = render_restore("s1", "v2", project="lanes", size="+2K", storage_class="fast", config=config)
    for pvc, size in ((created, "5000k"), (restored, "2k")):
        validate(pvc)
        assert pvc["spec"]["resources"]["requests"]["storage"] == size


# ------------------------------------------------------------------------- 3: names per kind


@pytest.mark.parametrize("spec, config, kind", [
    (_spec(name="1abc", launcher="torchrun", processes=2), KubernetesConfig(), "PyTorchJob"),
    (_spec(name="1abc", launcher="mpi", processes=2), KubernetesConfig(), "MPIJob"),
    (_spec(name="1abc", launcher="torchrun", processes=2), KubernetesConfig(trainer="v2"), "TrainJob"),
    (notebook_spec("1nb", volumes=("work:/home/jovyan/work",), image=IMAGE), KubernetesConfig(), "Notebook"),
])
def test_service_named_kinds_need_a_leading_letter(spec, config, kind):
    with pytest.raises(SpecError, match=f"{kind} names must start with a letter") as err:
        render_job(spec, config)
    assert "\n" not in str(err.value)
    _validate_all(spec.replace(name="j" + spec.name), config)


def test_a_batch_job_may_start_with_a_digit():
    _validate_all(_spec(name="1abc"))


def test_mpi_and_notebook_names_leave_room_for_what_is_named_after_them():
    mpi = _spec(name="a" * 53, launcher="mpi", processes=2)
    with pytest.raises(SpecError, match="at most 52 characters"):
        render_job(mpi, KubernetesConfig())
    objects = _validate_all(mpi.replace(name="a" * 52))
    assert len(next(o for o in objects if o["kind"] == "Service")["metadata"]["name"]) == 63
    notebook = notebook_spec("n" * 53, volumes=("work:/home/jovyan/work",), image=IMAGE)
    with pytest.raises(SpecError, match="at most 52 characters"):
        render_job(notebook, KubernetesConfig())
    _validate_all(notebook.replace(name="n" * 52))
    _validate_all(_spec(name="p" * 53, launcher="torchrun", processes=2))


# ------------------------------------------------------------------------- 4: /dev/shm


def test_a_volume_at_dev_shm_and_large_shm_are_refused_together():
    spec = _spec(volumes=(parse_pvc("fast:10Gi:/dev/shm"),), large_shm=True)
    for config in (KubernetesConfig(), KubernetesConfig(trainer="v2")):
        for s in (spec, spec.replace(launcher="torchrun", processes=2)):
            with pytest.raises(SpecError, match="--large-shm .* /dev/shm"):
                render_job(s, config)
    _validate_all(spec.replace(large_shm=False))
    _validate_all(spec.replace(volumes=(parse_pvc("fast:10Gi:/dev/shm/data"),)))


# ------------------------------------------------------------------------- 5: storage classes


@pytest.mark.parametrize("name", ["fast-", "a..b", "-fast", ".fast", "fast.", "a.-b", "Fast", "a" * 254])
def test_storage_classes_must_be_dns_subdomains(name):
    with pytest.raises(SpecError, match="invalid storage class"):
        check_storage_class(name)
    with pytest.raises(SpecError, match="invalid --pvc"):
        parse_pvc(f"{name}:10Gi:/mnt")


@pytest.mark.parametrize("name", ["fast", "trident-nas", "a.b-c.d", "0", "a" * 253,
                                  ".".join(["a" * 63] * 3 + ["a" * 61])])
def test_storage_classes_that_kubernetes_takes(name):
    assert check_storage_class(name) == name
    _validate_all(_spec(volumes=(parse_pvc(f"{name}:10Gi:/mnt"),)))


def test_the_class_pattern_stays_usable_by_the_http_schema():
    # pydantic checks patterns with Rust's regex: no \Z and no lookaround, so '$' and fullmatch.
    assert CLASS_RE.pattern.endswith("$") and "(?=" not in CLASS_RE.pattern and "\\Z" not in CLASS_RE.pattern


# ------------------------------------------------------------------------- 6: the spec annotation


def test_a_spec_over_the_annotation_limit_is_refused():
    big = _spec(env={f"V{i}": "x" * 60_000 for i in range(5)})
    with pytest.raises(SpecError, match="256 KiB .* file") as err:
        render_job(big, KubernetesConfig())
    assert "\n" not in str(err.value)
    _validate_all(_spec(env={f"V{i}": "x" * 60_000 for i in range(4)}))  # 240 kB: still fits


# ------------------------------------------------------------------------- 7: the names of new volumes


def test_a_long_job_name_with_a_new_volume_names_the_job_limit():
    new = (parse_pvc("fast:10Gi:/mnt"),)
    for name in ("a" * 48, "a" * 53):
        with pytest.raises(SpecError, match=r"job name '[a]+' is \d+ characters: .* at most 47") as err:
            render_job(_spec(name=name, volumes=new), KubernetesConfig())
        assert "invalid volume name" not in str(err.value)
    objects = _validate_all(_spec(name="a" * 47, volumes=new))
    assert objects[1]["metadata"]["name"] == "pvc-" + "a" * 47 + "-0"
    assert job_volume_name("a" * 46, 9) == "pvc-" + "a" * 46 + "-9"
    with pytest.raises(SpecError, match="at most 46"):
        job_volume_name("a" * 47, 10)


# ------------------------------------------------------------------------- 8: Trainer v2


def test_trainer_v2_refuses_what_a_trainjob_cannot_hold():
    dist = _spec(launcher="torchrun", processes=2)
    v2 = KubernetesConfig(trainer="v2")
    with pytest.raises(SpecError, match="--max-restarts .* TrainingRuntime owns restarts"):
        render_job(dist.replace(max_restarts=3), v2)
    for field, value in (("ttl_seconds_after_finished", 3600), ("scheduler_name", "volcano")):
        config = KubernetesConfig(trainer="v2", **{field: value})
        with pytest.raises(SpecError, match=f"{field} cannot apply to a Trainer v2 TrainJob"):
            render_job(dist, config)
        job = render_workload(_spec(max_restarts=3), config)  # one process is a batch Job, which has both
        assert job["kind"] == "Job" and job["spec"]["backoffLimit"] == 3
        validate(job)
    _validate_all(dist, v2)


# ------------------------------------------------------------------------- 9: images


@pytest.mark.parametrize("image", [" img:1", "img:1 ", "img:1\n", "img :1"])
def test_an_image_with_spaces_is_refused(image):
    with pytest.raises(SpecError, match="invalid image .* use an image reference"):  # the job spec's own check
        _spec(image=image)
    with pytest.raises(SpecError, match="invalid image .* remove the spaces"):  # the configured default image
        render_job(_spec(image=None), KubernetesConfig(image=image))


def test_a_configured_image_no_registry_takes_is_refused():
    with pytest.raises(SpecError, match="invalid image 'Reg/X:1': use an image reference"):
        render_job(_spec(image=None), KubernetesConfig(image="Reg/X:1"))


# ------------------------------------------------------------------------- 10: the docs' example


def _example_commands() -> list[list[str]]:
    text = (REPO / "docs" / "kubernetes.md").read_text()
    block = text.split("## End to end: the lane-detection example", 1)[1].split("```console", 1)[1].split("```")[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    return [shlex.split(line[2:], comments=True) for line in joined.splitlines() if line.startswith("$ ")]


def _flag_values(words: list[str], flag: str) -> list[str]:
    return [words[i + 1] for i, w in enumerate(words[:-1]) if w == flag]


def test_the_end_to_end_example_trains_where_it_prepared_the_data():
    commands = _example_commands()
    prep = next(c for c in commands if "prepare" in c)
    (mount,) = [p.split(":")[2] for p in _flag_values(prep, "--pvc")]
    (out,) = _flag_values(prep, "--out")
    inside = os.path.relpath(out, mount)  # where the data lies inside the volume
    assert not inside.startswith("..")
    trains = [c for c in commands if "train" in c and "dtrain.workloads.lanes" in c]
    assert len(trains) == 2
    for words in trains:
        data_mount = next(p.split(":")[1] for p in _flag_values(words, "--pvc") if p.startswith("tusimple:"))
        data_dir = (_flag_values(words, "--data-dir") or ["/mnt/tusimple"])[0]  # train.py's default
        assert os.path.relpath(data_dir, data_mount) == inside, (data_mount, data_dir)


# ------------------------------------------------------------------------- 11: SageMaker's instance types


def test_an_unknown_sagemaker_instance_type_is_one_short_line():
    pytest.importorskip("botocore")
    from dtrain.backends.sagemaker import render
    from dtrain.backends.sagemaker.validate import check_request
    from test_sagemaker_render import cfg, spec

    def message(instance_type: str) -> str:
        req = render.training_job_request(spec(sm=dict(instance_type=instance_type)), cfg())
        with pytest.raises(SpecError) as err:
            check_request("sagemaker", "CreateTrainingJob", req)
        return str(err.value)

    close = message("ml.p3.2xlage")
    assert "\n" not in close and len(close) < 400, close
    assert "'ml.p3.2xlage'" in close and "did you mean ml.p3.2xlarge," in close
    assert close.count("ml.") <= 1 + 5 and "API_ResourceConfig.html" in close
    far = message("ml.foo.bar")
    assert "did you mean" not in far and "API_ResourceConfig.html" in far and len(far) < 300
    short_enum = render.training_job_request(spec(), cfg())
    short_enum["AlgorithmSpecification"]["TrainingInputMode"] = "Sideways"  # a few values: all listed
    with pytest.raises(SpecError, match="TrainingInputMode='Sideways' is not one of Pipe, File, FastFile$"):
        check_request("sagemaker", "CreateTrainingJob", short_enum)
