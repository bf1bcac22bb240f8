"""Prometheus /metrics: parsed by prometheus_client's own parser, moving as a real job starts and ends."""

from __future__ import annotations

import pytest

from server_util import ServerProcess, wait_until

pytest.importorskip("prometheus_client", reason="the 'server' extra is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

# The job appends training records to the file the platform names in DTRAIN_METRICS_FILE (what
# dtrain.training.MetricsWriter does, see test_metrics_writer_mirrors_into_the_platform_file; plain
# JSON here so that the job does not spend seconds importing torch), then waits for the go-ahead.
TRAIN = ("import json, os, time\n"
         "with open(os.environ['DTRAIN_METRICS_FILE'], 'a') as f:\n"
         "    for rec in ({'step': 1, 'loss': 2.5, 'images_per_s': 10.0},\n"
         "                {'step': 7, 'loss': 0.75, 'images_per_s': 42.5}):\n"
         "        f.write(json.dumps({'time': time.time(), **rec}) + '\\n')\n"
         "print('logged', flush=True)\n"
         "while not os.path.exists('GO'): time.sleep(0.1)\n")


def scrape(server: ServerProcess) -> dict[tuple[str, tuple], float]:
    r = server.http.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(r.text) for s in family.samples}


def value(samples, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def test_metrics_move_when_a_job_starts_and_ends(home, tmp_path):
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        before = scrape(server)
        assert value(before, "dtrain_node_gpus_allocatable", node=_node(before)) == 2
        assert value(before, "dtrain_node_gpus_allocated", node=_node(before)) == 0
        assert not [k for k in before if k[0] == "dtrain_jobs"]  # no jobs, no projects yet

        r = server.http.post("/api/v1/jobs", json={"name": "trainer", "command": ["python", "-c", TRAIN],
                                                   "gpu": 1, "working_dir": str(tmp_path)})
        assert r.status_code == 201, r.text
        wait_until(lambda: any(ln["text"] == "logged" for ln in server.http.get("/api/v1/jobs/trainer/logs").json()),
                   what="the job's metrics logged")
        running = scrape(server)
        node = _node(running)
        job = {"job_name": "trainer", "project": "default"}
        assert value(running, "dtrain_jobs", project="default", status="Running") == 1
        assert value(running, "dtrain_jobs", project="default", status="Succeeded") == 0
        assert value(running, "dtrain_node_gpus_allocated", node=node) == 1
        model = server.http.get("/api/v1/nodes").json()[0]["gpus"][0]["name"]  # the inventory's name: modelName
        assert value(running, "dtrain_gpu_allocated", node=node, gpu="0", modelName=model, job_name="trainer",
                     project="default") == 1
        assert value(running, "dtrain_job_processes", state="running", **job) == 1
        assert value(running, "dtrain_job_gpus_allocated", **job) == 1
        assert value(running, "dtrain_job_restarts_total", **job) == 0
        assert value(running, "dtrain_job_step", **job) == 7
        assert value(running, "dtrain_job_loss", **job) == 0.75
        assert value(running, "dtrain_job_images_per_second", **job) == 42.5
        curve = server.http.get("/api/v1/jobs/trainer/metrics").json()
        assert [(c["step"], c["loss"]) for c in curve] == [(1, 2.5), (7, 0.75)]

        (tmp_path / "GO").touch()
        assert server.http.get("/api/v1/jobs/trainer/wait", params={"timeout": 120}).json()["status"] == "Succeeded"
        after = scrape(server)
        assert value(after, "dtrain_jobs", project="default", status="Running") == 0
        assert value(after, "dtrain_jobs", project="default", status="Succeeded") == 1
        assert value(after, "dtrain_node_gpus_allocated", node=node) == 0
        assert not [k for k in after if k[0].startswith("dtrain_job_") or k[0] == "dtrain_gpu_allocated"]
    finally:
        server.stop()


def _node(samples) -> str:
    [node] = [dict(k[1])["node"] for k in samples if k[0] == "dtrain_node_gpus_allocatable"]
    return node


def test_metrics_writer_mirrors_into_the_platform_file(tmp_path, monkeypatch):
    from dtrain.training.metrics import MetricsWriter, read_metrics

    monkeypatch.setenv("DTRAIN_METRICS_FILE", str(tmp_path / "job" / "metrics.jsonl"))
    (tmp_path / "job").mkdir()
    with MetricsWriter(tmp_path / "out" / "metrics.jsonl") as m:
        m.log(step=1, loss=0.5)
    with MetricsWriter(tmp_path / "rank1.jsonl", enabled=False) as m:  # other ranks write nowhere
        m.log(step=1, loss=9.0)
    own, mirror = read_metrics(tmp_path / "out" / "metrics.jsonl"), read_metrics(tmp_path / "job" / "metrics.jsonl")
    assert own == mirror and [(r["step"], r["loss"]) for r in own] == [(1, 0.5)]
    assert not (tmp_path / "rank1.jsonl").exists()


def test_a_scrape_reads_only_the_unfinished_jobs_records(home, monkeypatch):
    """/metrics read every stored job at each scrape (a long history: seconds); it counts them where
    they are kept and builds the records of the unfinished ones only, which it gives series."""
    from prometheus_client import CollectorRegistry, generate_latest
    from test_job_page import _stored

    from dtrain import Client
    from dtrain.server.metrics import DtrainCollector

    _stored(home, [(f"done{i}", "default", "Succeeded", 1_700_000_000.0 + i) for i in range(40)]
            + [("queued", "default", "Pending", 1_700_000_100.0), ("held", "default", "Suspended", 1_700_000_101.0)])
    client = Client(home=home)
    built = []
    info = type(client.backend())._info
    monkeypatch.setattr(type(client.backend()), "_info", lambda self, row: built.append(row["name"]) or info(self, row))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DtrainCollector(type("Clients", (), {"get": staticmethod(lambda: client)})))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(generate_latest(registry).decode()) for s in family.samples}
    assert sorted(built) == ["held", "queued"]
    assert value(samples, "dtrain_jobs", project="default", status="Succeeded") == 40
    assert value(samples, "dtrain_jobs", project="default", status="Running") == 0
    assert value(samples, "dtrain_job_processes", job_name="queued", project="default", state="pending") == 1
    assert value(samples, "dtrain_job_gpus_allocated", job_name="held", project="default") == 0


def test_no_series_carries_a_label_prometheus_sets_on_every_scrape(home):
    """A series' own `job` label met the target's `job` (the scrape config's job_name): Prometheus renamed
    it `exported_job`, so `{job="queued"}` found nothing and `{job!=""}` every series. Jobs are `job_name`."""
    from prometheus_client import CollectorRegistry, generate_latest
    from test_job_page import _stored

    from dtrain import Client
    from dtrain.server.metrics import DtrainCollector

    _stored(home, [("queued", "default", "Pending", 1_700_000_100.0)])
    client = Client(home=home)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DtrainCollector(type("Clients", (), {"get": staticmethod(lambda: client)})))
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    labels = {name for f in families for s in f.samples for name in s.labels}
    assert not labels & {"job", "instance"}
    assert {s.labels["job_name"] for f in families if f.name.startswith("dtrain_job_") for s in f.samples} == {"queued"}
