"""Who holds a node's GPUs on Kubernetes, as `kubectl describe node` counts them.

A GPU held by a pod that is not dtrain's showed "free" (the Nodes page, `dtrain nodes`, GET /nodes),
and so did every GPU where this account may not list pods across the cluster (RBAC). Such a GPU is now
held by "another workload" (its pod, NAMESPACE/NAME), or unknown, with one warning line naming the
right to grant. Every test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes.fake import FakeKubeServer  # noqa: E402
from dtrain.backends.kubernetes.status import pod_gpus  # noqa: E402

from test_audit12_k8s import _http  # noqa: E402
from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers3 import _cli  # noqa: E402

RIGHT = "kubectl create clusterrole dtrain-node-reader --verb=list --resource=pods"


def _pod(name: str, namespace: str, node: str | None, gpus: int, **spec_) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {**({"nodeName": node} if node else {}), "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **spec_},
            "status": {"phase": "Running"}}


def _a_job_and_another_workload(backend, cluster) -> None:
    """gpu-1 (4 GPUs): dtrain job 'train' holds 1; pod other/theirs, not dtrain's, holds 2."""
    cluster.add_node("gpu-1", gpus=4)
    backend.submit(spec(gpu=1))
    cluster.run_pods(NS, "train", nodes=("gpu-1",))
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    cluster.create(_pod("theirs", "other", "gpu-1", 2))


def _holders(nodes) -> list[tuple]:
    return [(g.job, g.held_by, g.unknown) for n in nodes for g in n.gpus]


def test_a_gpu_held_by_another_workload_names_its_pod_not_free(tmp_path, home, backend, cluster):
    _a_job_and_another_workload(backend, cluster)
    nodes = backend.nodes()
    assert nodes.notices == ()
    assert _holders(nodes) == [("train", None, False), (None, "other/theirs", False), (None, "other/theirs", False),
                               (None, None, False)]
    assert nodes[0].gpus_allocated == 3
    body = _http(tmp_path, backend).get("/api/v1/nodes").json()
    assert [(g["job"], g["held_by"], g["unknown"]) for g in body[0]["gpus"]] == _holders(nodes)
    with FakeKubeServer(cluster) as server:
        r = _cli(home, tmp_path, server)("nodes")
    assert r.returncode == 0 and r.stderr == ""
    column = [line.split()[3:6] for line in r.stdout.splitlines() if line.startswith("gpu-1  ") and "Gi " not in line]
    assert column == [["train", "-", "-"], ["another", "workload", "(other/theirs)"],
                      ["another", "workload", "(other/theirs)"], ["-", "-", "-"]]


def test_gpus_where_no_pod_may_be_listed_are_unknown_with_one_warning_naming_the_right(tmp_path, home, backend,
                                                                                        cluster):
    _a_job_and_another_workload(backend, cluster)
    cluster.forbidden.add(("", "pods"))
    nodes = backend.nodes()
    assert _holders(nodes) == [(None, None, True)] * 4
    [notice] = nodes.notices
    assert notice.code == "gpus-unknown" and "every GPU is shown unknown, not free" in notice.message
    assert RIGHT in notice.message and "kubectl auth can-i list pods -A" in notice.message
    r = _http(tmp_path, backend).get("/api/v1/nodes")
    assert [g["unknown"] for g in r.json()[0]["gpus"]] == [True] * 4 and RIGHT in r.headers["warning"]
    with FakeKubeServer(cluster) as server:
        r = _cli(home, tmp_path, server)("nodes")
    assert r.returncode == 0 and r.stderr.splitlines() == [f"dtrain: warning: {notice.message}"]
    assert [line.split()[3] for line in r.stdout.splitlines() if line.startswith("gpu-1  ") and "Gi " not in line] \
        == ["unknown"] * 4


def test_gpus_no_readable_pod_holds_are_unknown_where_only_some_namespaces_may_be_read(backend, cluster):
    _a_job_and_another_workload(backend, cluster)
    cluster.fail("GET", "/api/v1/pods", 403)  # pods across all namespaces only: dtrain-lanes's may be read
    nodes = backend.nodes()
    assert _holders(nodes) == [("train", None, False)] + [(None, None, True)] * 3
    [notice] = nodes.notices
    assert notice.message.startswith(f"GPUs allocated count only the pods of namespace {NS}: ")
    assert "the GPUs none of them holds are shown unknown, not free" in notice.message and RIGHT in notice.message


def test_the_gpu_history_counts_another_workloads_gpu_as_held_and_an_unknown_one_as_neither(tmp_path, backend,
                                                                                            cluster):
    from dtrain.client import Client
    from dtrain.server.history import GpuHistory

    _a_job_and_another_workload(backend, cluster)
    client = Client(home=tmp_path / "sdk-home", backend="kubernetes", backends={"kubernetes": backend})

    class One:
        def get(self):
            return client

    history = GpuHistory(One())
    history.sample()
    cluster.forbidden.add(("", "pods"))
    history.sample()
    held = [s["held"] for s in history.samples()]
    assert held == [True, True, True, False] + [None] * 4


def test_a_pods_gpus_count_its_init_containers_as_the_scheduler_does():
    def c(gpus: int, **kw) -> dict:
        return {"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}, **kw}

    assert pod_gpus({"spec": {"containers": [c(1), c(1)]}}) == 2
    assert pod_gpus({"spec": {"initContainers": [c(4)], "containers": [c(1)]}}) == 4  # one at a time, first
    assert pod_gpus({"spec": {"initContainers": [c(1, restartPolicy="Always"), c(2)],  # a sidecar beside the rest
                              "containers": [c(1)]}}) == 3
    assert pod_gpus({"spec": {"initContainers": [c(1, restartPolicy="Always")], "containers": [c(2)]}}) == 3
    assert pod_gpus({"spec": {}}) == 0


@pytest.mark.slow  # a browser and a server process: about 15 s
def test_the_dashboard_nodes_page_says_who_holds_each_gpu(home, tmp_path, backend, cluster):
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, WebDriverWait, chrome, text_of
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    from server_util import ServerProcess

    _a_job_and_another_workload(backend, cluster)
    with FakeKubeServer(cluster) as kube:
        _cli(home, tmp_path, kube)  # config.yaml: that cluster, project lanes
        server = ServerProcess(home)
        try:
            with chrome() as browser:
                browser.get(server.url + "/#/nodes")
                cells = "#gpus-table-gpu-1 td.job"
                WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, cells))
                assert _texts(browser, cells) == [
                    "train", "another workload (other/theirs)", "another workload (other/theirs)", "free"]
                cluster.forbidden.add(("", "pods"))
                WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, "#nodes-warning"))
                WebDriverWait(browser, 30, poll_frequency=0.2).until(
                    lambda d: _texts(d, cells) == ["unknown"] * 4)
                [line] = text_of(browser, "#nodes-warning").splitlines()
                assert RIGHT in line
        finally:
            server.stop()


def _texts(driver, css: str) -> list[str]:
    """Every match's text, read in one script (the page re-renders on each poll)."""
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())",
                                 css)


# ------------------------------------------------------------------------- another tool's claim (a dotted name)


def _claim(cluster, name: str = "data.v1") -> None:
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
                    "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})


def test_another_tools_claim_is_described_by_the_cli_and_the_http_api(tmp_path, home, backend, cluster):
    _claim(cluster)
    with FakeKubeServer(cluster) as server:
        r = _cli(home, tmp_path, server)("volume", "describe", "data.v1")
    assert r.returncode == 0 and "Name: data.v1" in r.stdout and "namespace: dtrain-lanes" in r.stdout
    got = _http(tmp_path, backend).get("/api/v1/volumes/data.v1")
    assert got.status_code == 200, got.text
    assert (got.json()["name"], got.json()["size"]) == ("data.v1", "1Gi")


@pytest.mark.parametrize("args, verb, kubectl", [
    (("volume", "delete", "data.v1"), "delete", "'kubectl delete pvc data.v1 -n dtrain-lanes'"),
    (("volume", "delete", "data.v1", "--force"), "delete", "'kubectl delete pvc data.v1 -n dtrain-lanes'"),
    (("volume", "update", "data.v1", "--class", "fast"), "change", "'kubectl edit pvc data.v1 -n dtrain-lanes'"),
    (("volume", "update", "data.v1", "--class", "fast", "--dry-run"), "change", "'kubectl edit pvc data.v1"),
    (("snapshot", "create", "data.v1"), "snapshot", "a VolumeSnapshot of it made with kubectl apply -n dtrain-lanes"),
    (("snapshot", "create", "data.v1", "--dry-run"), "snapshot", "a VolumeSnapshot of it"),
])
def test_verbs_that_change_another_tools_claim_refuse_in_one_line_naming_those_that_take_it(
        tmp_path, home, cluster, args, verb, kubectl):
    """`snapshot create data.v1` made a snapshot 'data.v1-<time>' that no snapshot verb could name, and
    `volume delete data.v1` deleted a claim another tool (Run:AI's --existing-pvc) keeps."""
    _claim(cluster)
    with FakeKubeServer(cluster) as server:
        r = _cli(home, tmp_path, server)(*args, check=False)
    assert r.returncode == 2 and r.stdout == ""
    [line] = r.stderr.splitlines()
    assert line.startswith("dtrain: error: volume 'data.v1' is a claim another tool made (its name has a '.'), "
                           "which a job mounts (--pvc data.v1:MOUNT) and 'dtrain volume describe data.v1' and "
                           f"'dtrain volume list' show, but which only that tool may {verb}: use it, or ")
    assert kubectl in line
    assert cluster.get("", "persistentvolumeclaims", NS, "data.v1")["metadata"]["name"] == "data.v1"
    assert cluster.items("snapshot.storage.k8s.io", "volumesnapshots") == []
