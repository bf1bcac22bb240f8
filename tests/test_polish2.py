"""Kubernetes and HTTP leftovers: /metrics counts a GPU another workload holds as allocated (and one
whose holder cannot be told as unknown, not free), a manual Kubernetes snapshot records its job's
spec, and toleration operators Lt/Gt (Kubernetes 1.35, alpha) are refused in one line naming the gate.
Kubernetes tests drive the official `kubernetes` client against the shipped fake API server."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
pytest.importorskip("prometheus_client", reason="the 'server' extra is not installed")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from dtrain.backends.kubernetes.objects import ANN_SPEC  # noqa: E402
from dtrain.spec import JobSpec, parse_pvc  # noqa: E402

from test_audit12_k8s import _http  # noqa: E402
from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_nodes_split import _a_job_and_another_workload  # noqa: E402


def _scrape(http) -> dict[str, list[dict]]:
    """Each GPU series' label sets, by metric name."""
    r = http.get("/metrics")
    assert r.status_code == 200
    return {f.name: [dict(s.labels, value=s.value) for s in f.samples]
            for f in text_string_to_metric_families(r.text) if f.name.startswith("dtrain_gpu_")}


def _gpus(samples: list[dict], key: str) -> list[tuple]:
    return sorted((s["gpu"], s.get(key)) for s in samples)


def test_metrics_count_another_workloads_gpu_as_allocated_as_dtrain_nodes_does(tmp_path, backend, cluster):
    _a_job_and_another_workload(backend, cluster)
    scraped = _scrape(_http(tmp_path, backend))
    held = scraped["dtrain_gpu_allocated"]
    assert _gpus(held, "job_name") == [("0", "train"), ("1", None), ("2", None)]
    assert _gpus(held, "held_by") == [("0", None), ("1", "other/theirs"), ("2", "other/theirs")]
    assert {s["value"] for s in held} == {1.0}
    # the documented free query, `dtrain_gpu_info unless on(node, gpu) (dtrain_gpu_allocated or dtrain_gpu_unknown)`
    taken = {(s["node"], s["gpu"]) for s in held + scraped.get("dtrain_gpu_unknown", [])}
    assert [s["gpu"] for s in scraped["dtrain_gpu_info"] if (s["node"], s["gpu"]) not in taken] == ["3"]
    assert scraped.get("dtrain_gpu_unknown", []) == []


def test_metrics_export_a_gpu_whose_holder_cannot_be_told_as_unknown_not_free(tmp_path, backend, cluster):
    _a_job_and_another_workload(backend, cluster)
    cluster.fail("GET", "/api/v1/pods", 403)  # pods of dtrain-lanes only: the job's GPU is known, the rest not
    scraped = _scrape(_http(tmp_path, backend))
    assert _gpus(scraped["dtrain_gpu_allocated"], "job_name") == [("0", "train")]
    assert [s["gpu"] for s in scraped["dtrain_gpu_unknown"]] == ["1", "2", "3"]
    taken = {(s["node"], s["gpu"]) for s in scraped["dtrain_gpu_allocated"] + scraped["dtrain_gpu_unknown"]}
    assert [s for s in scraped["dtrain_gpu_info"] if (s["node"], s["gpu"]) not in taken] == []


def test_a_manual_kubernetes_snapshot_of_a_job_records_its_spec_as_snapshot_on_success_does(backend, cluster):
    backend.create_volume("data", size="7Gi")
    submitted = spec(volumes=(parse_pvc("data:/data"),))
    backend.submit(submitted)
    [dry] = backend.render_snapshot("data", name="data-v1", job="train")
    assert json.loads(dry["metadata"]["annotations"][ANN_SPEC]) == backend.get("train").spec.to_dict()
    made = backend.create_snapshot("data", name="data-v1", job="train")
    assert made.job_spec == backend.get_snapshot("data-v1").job_spec == backend.get("train").spec.to_dict()
    assert JobSpec.from_stored(made.job_spec).volumes == submitted.volumes
    # a job the cluster no longer has (ttl_seconds_after_finished) is named, its spec unknown, as before
    assert backend.create_snapshot("data", name="data-v2", job="gone").job_spec is None
    assert backend.create_snapshot("data", name="data-v3").job_spec is None


@pytest.mark.parametrize("operator", ["Lt", "Gt"])
def test_the_numeric_toleration_operators_of_kubernetes_1_35_are_refused_in_one_line_naming_the_version(operator):
    from dtrain.errors import SpecError
    from dtrain.spec import parse_toleration

    for given in (f"operator={operator},key=example.com/sla,value=950", {"key": "example.com/sla",
                                                                        "operator": operator, "value": "950"}):
        with pytest.raises(SpecError) as e:
            spec(tolerations=[given])
        said = str(e.value)
        assert said.startswith(f"toleration operator {operator} (a numeric comparison) is alpha in Kubernetes 1.35")
        assert "TaintTolerationComparisonOperators" in said and "operator=Equal" in said and "\n" not in said
    with pytest.raises(SpecError, match="alpha in Kubernetes 1.35"):
        parse_toleration(f"key=a,operator={operator},value=1")
