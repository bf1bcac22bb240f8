"""The Kubernetes backend's second round of leftovers: exec output held whole in memory, one stuck
pod hiding the other pods' logs, `list` for an account that may read jobs but not pods across
the cluster, and `logs -f --tail` of one packed rank.

Every test drives the official `kubernetes` client against the shipped fake API server; the CLI
tests run the real `dtrain` command against it through a kubeconfig.
"""

from __future__ import annotations

import hashlib
import io
import sys
import threading
import tracemalloc

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from conftest import assert_usage_error  # noqa: E402
from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeKubeServer, exec_writes  # noqa: E402
from dtrain.errors import BackendError  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_faults import _set_container  # noqa: E402
from test_k8s_leftovers import _cli, _exec_into, _one_line  # noqa: E402

MiB = 1 << 20


# ------------------------------------------------------------------------- exec: output copied, not kept


class _Sink(io.RawIOBase):
    """Our stdout for a long exec: counts and hashes the bytes, keeps none of them."""

    def __init__(self) -> None:
        self.size, self.digest = 0, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.size += len(data)
        self.digest.update(data)
        return len(data)


@pytest.mark.timeout(120)
def test_a_long_exec_copies_its_output_without_keeping_it(backend, cluster, monkeypatch):
    """`dtrain exec JOB -- tail -f log`: the websocket client appended every byte of stdout and
    stderr to a buffer for read_all() until the session ended, so memory grew with the output.
    64 MiB go through; what the process holds at its peak stays a few frames."""
    chunk, chunks = bytes(range(256)) * 1024, 256  # 256 KiB frames, 64 MiB in all

    def tail_f():  # the kubelet relays the command's writes as they come, never all at once
        for _ in range(chunks):
            yield 1, chunk
        yield 2, b"tail: file truncated\n"
        yield from exec_writes()

    _exec_into(backend, cluster, [])
    cluster.on_exec = lambda namespace, pod, command: tail_f()
    out, err = _Sink(), _Sink()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(out)))
    monkeypatch.setattr(sys, "stderr", io.TextIOWrapper(io.BufferedWriter(err)))
    tracemalloc.start()
    try:
        code = backend.exec("train", ["tail", "-f", "/mnt/log"])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0
    assert out.size == chunks * len(chunk) and out.digest.digest() == hashlib.sha256(chunk * chunks).digest()
    assert err.size == len(b"tail: file truncated\n")
    assert peak < 8 * MiB, f"exec held {peak / MiB:.1f} MiB at its peak for {out.size // MiB} MiB of output"


# ------------------------------------------------------------------------- logs: one stuck pod


def _one_worker_stuck(backend, cluster) -> str:
    """A three-pod PyTorchJob whose master and first worker ran and wrote, while the second
    worker's image cannot be pulled (a node without the registry's credentials)."""
    backend.submit(spec(launcher="torchrun", processes=3))
    cluster.run_pods(NS, "train")
    for i, pod in enumerate(("train-master-0", "train-worker-0")):
        cluster.append_log(NS, pod, f"{pod} step 1", at=1000.0 + i)
        cluster.append_log(NS, pod, f"{pod} step 2", at=1010.0 + i)
    stuck = "train-worker-1"
    cluster.set_pod_phase(NS, stuck, "Pending")
    _set_container(cluster, stuck, {"waiting": {"reason": "ImagePullBackOff", "message": "pull access denied"}})
    return stuck


def _read_until_error(lines) -> tuple[list[str], BaseException | None]:
    got = []
    try:
        for line in lines:
            got.append(line.text)
    except BackendError as err:
        return got, err
    return got, None


def test_logs_of_a_job_with_one_stuck_pod_show_the_others_then_name_it(backend, cluster):
    """One worker at ImagePullBackOff made `logs` print one error line and none of the lines the
    master and the other worker had written, which are what a user reads to see how far it got."""
    stuck = _one_worker_stuck(backend, cluster)
    got, err = _read_until_error(backend.logs("train"))
    assert got == ["train-master-0 step 1", "train-worker-0 step 1", "train-master-0 step 2",
                   "train-worker-0 step 2"]
    assert err is not None and "\n" not in str(err)
    assert str(err).startswith(f"pod {stuck} of job 'train' cannot start (ImagePullBackOff: pull access denied)")
    got, err = _read_until_error(backend.logs("train", tail=1))
    assert got == ["train-worker-0 step 2"] and err is not None
    assert [x.text for x in backend.logs("train", rank=1)] == ["train-worker-0 step 1", "train-worker-0 step 2"]
    with pytest.raises(BackendError, match=f"pod {stuck} of job 'train' cannot start"):
        list(backend.logs("train", rank=2))


def test_logs_with_a_stuck_pod_through_the_cli_print_the_lines_then_one_error(home, tmp_path, backend, cluster):
    """What the user sees: the healthy pods' lines on stdout, then one error line and exit 2."""
    stuck = _one_worker_stuck(backend, cluster)
    with FakeKubeServer(cluster) as server:
        proc = _cli(home, tmp_path, server)("logs", "train", check=False)
    assert proc.stdout.splitlines() == ["[rank 0] train-master-0 step 1", "[rank 1] train-worker-0 step 1",
                                        "[rank 0] train-master-0 step 2", "[rank 1] train-worker-0 step 2"]
    assert_usage_error(proc, f"pod {stuck} of job 'train' cannot start (ImagePullBackOff")


# ------------------------------------------------------------------------- list without cluster-wide pods


def test_list_with_jobs_readable_everywhere_but_pods_per_namespace(backend, cluster):
    """RBAC grants each resource apart: an account that may list jobs across the cluster but pods
    only in its projects' namespaces got a Forbidden traceback-free error and no list at all."""
    backend.submit(spec(launcher="torchrun", processes=2))
    backend.submit(spec(name="solo", project="vision"))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")
    cluster.run_pods("dtrain-vision", "solo")
    cluster.fail("GET", "/api/v1/pods", 403)  # pods across all namespaces only
    jobs = {j.name: j for j in backend.list()}
    assert jobs["train"].status is JobStatus.RUNNING and jobs["train"].processes_running == 2
    assert jobs["solo"].status is JobStatus.RUNNING and jobs["solo"].node == "node-1"
    assert not any("pods not shown" in j.message for j in jobs.values())


def test_list_without_any_pod_read_shows_the_jobs_and_says_what_is_unknown(backend, cluster):
    backend.submit(spec(launcher="torchrun", processes=2))
    backend.submit(spec(name="solo"))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running", reason="PyTorchJobRunning")
    cluster.run_pods(NS, "solo")
    cluster.get("batch", "jobs", NS, "solo")["status"] = {"active": 1, "ready": 1}  # the Job controller's count
    cluster.fail("GET", "/pods", 403)
    jobs = {j.name: j for j in backend.list()}
    assert {n: j.status for n, j in jobs.items()} == {"train": JobStatus.RUNNING, "solo": JobStatus.RUNNING}
    for job in jobs.values():
        assert "pods not shown (processes, GPUs and node unknown): cannot list Pods" in job.message
        assert f"(kubectl auth can-i list pods -n {NS}); to show them, ask an admin" in job.message
        assert "\n" not in job.message
    assert jobs["train"].message.startswith("PyTorchJobRunning; pods not shown")
    # one job's own view: its status, and what it cannot read (test_k8s_leftovers5.py)
    assert backend.get("train").message == jobs["train"].message


# ------------------------------------------------------------------------- logs -f --tail of one packed rank


def _packed(make_backend, cluster):
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, gpus_per_node=2))
    backend.poll_interval = 0.01
    backend.submit(spec(launcher="torchrun", processes=2, gpu=1))  # one pod runs ranks 0 and 1
    return backend


def _write_packed(cluster, pod: str) -> None:
    for step in range(1, 5):
        cluster.append_log(NS, pod, f"[0]:rank 0 step {step}")
        cluster.append_log(NS, pod, f"[1]:rank 1 step {step}")


@pytest.mark.timeout(60)
def test_follow_with_tail_of_a_packed_rank_gives_its_last_lines(make_backend, cluster):
    """`logs -f -t 2 --rank 1`: the server cannot tail one rank of a pod that holds two, so the
    tail was dropped and the whole history of rank 1 came first."""
    backend = _packed(make_backend, cluster)
    pod = cluster.run_pods(NS, "train")[0]["metadata"]["name"]
    _write_packed(cluster, pod)
    cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    assert [x.text for x in backend.logs("train", rank=1, tail=2, follow=True)] == ["rank 1 step 3",
                                                                                  "rank 1 step 4"]
    assert [x.text for x in backend.logs("train", rank=0, tail=0, follow=True)] == []
    assert [x.text for x in backend.logs("train", rank=1, tail=2)] == ["rank 1 step 3", "rank 1 step 4"]


@pytest.mark.timeout(60)
def test_follow_with_tail_of_a_packed_rank_that_had_not_started(make_backend, cluster):
    """The tail was chosen before the pod existed, as if each pod ran one rank: the server's last
    2 lines held one line of rank 1, not two."""
    backend = _packed(make_backend, cluster)
    looked = threading.Event()

    def looks() -> int:
        return sum(method == "GET" and "/pods?" in path for method, path in list(cluster.requests))

    before = looks()

    def operator() -> None:  # the pod starts, and has written, only once `logs -f` has looked
        while looks() < before + 3:
            threading.Event().wait(0.005)
        with cluster.lock:  # at once: a reader sees no pod, or the pod with every line
            pod = cluster.run_pods(NS, "train")[0]["metadata"]["name"]
            _write_packed(cluster, pod)
            cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
        looked.set()

    started = threading.Thread(target=operator, daemon=True)
    started.start()
    lines = [x.text for x in backend.logs("train", rank=1, tail=2, follow=True)]
    started.join()
    assert looked.is_set() and lines == ["rank 1 step 3", "rank 1 step 4"]
