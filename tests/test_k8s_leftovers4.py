"""The Kubernetes backend's leftovers of a fourth audit: a progress bar's line (tqdm writes '\\r'
and no newline) that `logs -f` held whole in memory until its newline, and that `logs` cut at each
'\\r' into pieces sorted before the rest of the log; and `logs -f` of a batch Job that ended with
the first failed pod instead of going on in the pod the Job made for its next try.

Every test but the first drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes import logs  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster  # noqa: E402

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

MAX_LINE = 1 << 16  # bytes of a log line given at most (logs.MAX_LINE)
STAMP = b"2026-12-04T05:00:00.123456789Z "
BAR = "\r 37%|███▋      | 370/1000 [00:12<00:21, 30.1it/s]"  # one tqdm update: no newline, 3-byte blocks


# ------------------------------------------------------------------------- a line without a newline


def test_log_lines_cut_a_long_line_into_bounded_pieces_that_lose_no_byte():
    """The per-pod buffer of `logs -f` grew with a line until its newline: a whole run of progress
    updates. Pieces are at most MAX_LINE bytes, end after a '\\r' (an update stays whole) or at a
    character's start, repeat the line's time, and are the same however the bytes arrive."""
    LogLines = logs.LogLines
    assert logs.MAX_LINE == MAX_LINE
    line = (BAR * (3 * MAX_LINE // len(BAR.encode()))).encode()
    data = STAMP + line + b"\n" + STAMP + "é".encode() * MAX_LINE + b"\n" + STAMP + b"next"
    whole = LogLines(stamped=True)
    at_once = whole.feed(data) + whole.end()
    bytewise = LogLines(stamped=True)
    pieces = [p for i in range(0, len(data), 4093) for p in bytewise.feed(data[i:i + 4093])] + bytewise.end()
    assert pieces == at_once
    assert all(p.startswith(STAMP) and len(p) <= len(STAMP) + MAX_LINE for p in pieces)
    texts = [p[len(STAMP):] for p in pieces]
    assert all(t.endswith(b"\r") for t in texts[:len(line) // MAX_LINE])  # whole updates per piece
    # no byte lost, and no character cut in two (strict decoding of each piece would fail)
    assert "".join(t.decode("utf-8") for t in texts) == (line + "é".encode() * MAX_LINE + b"next").decode()
    assert texts[-1] == b"next"


def test_following_a_progress_bar_gives_bounded_pieces_of_its_line(backend, cluster):
    """tqdm in a pod writes '\\r' updates for the whole run and no newline: `dtrain logs -f` held
    the line until its end (memory without bound) and gave it as one line of many MB."""
    backend.submit(spec())
    [pod] = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.append_log(NS, pod, "epoch 1")
    updates = 3 * MAX_LINE // len(BAR.encode())
    for _ in range(updates):
        cluster.append_log(NS, pod, BAR, end="")
    cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    lines = list(backend.logs("train", follow=True))
    assert lines[0].text == "epoch 1"
    assert len(lines) > 3 and all(len(x.text.encode()) <= MAX_LINE for x in lines)
    assert "".join(x.text for x in lines[1:]) == BAR * updates  # every byte, none replaced
    assert all(x.time == lines[1].time is not None for x in lines[1:])  # the time of the line they cut


def test_logs_keep_a_progress_bars_line_in_its_place(make_backend, cluster):
    """`dtrain logs` split a pod's log at every '\\r' too: the pieces after the first had no time
    and were sorted before every other line of the job."""
    backend = make_backend()
    backend.submit(spec(launcher="torchrun", processes=2))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.append_log(NS, pods[0], "epoch 1", at=1000.0)
    cluster.append_log(NS, pods[1], "worker up", at=1000.5)
    cluster.append_log(NS, pods[0], "\r 10%\r 50%\r100%", at=1001.0)
    cluster.append_log(NS, pods[0], "epoch 2", at=1002.0)
    assert [x.text for x in backend.logs("train")] == ["epoch 1", "worker up", "\r 10%\r 50%\r100%", "epoch 2"]


# ------------------------------------------------------------------------- logs -f of a batch Job's next try


def _list_reads(cluster: FakeCluster) -> int:
    return sum(method == "GET" and "/pods?" in path for method, path in list(cluster.requests))


@pytest.mark.timeout(120)
def test_following_a_batch_job_goes_on_in_the_pod_of_its_next_try(make_backend, cluster):
    """--max-restarts on a one-process job: a batch Job (restartPolicy Never) replaces a failed pod
    with a new one. `dtrain logs -f` ended with the first pod, exit 0, while the job ran on: the
    next try's lines (`kubectl logs -f job/x`, `runai logs -f` show them) were never shown."""
    backend = make_backend()
    backend.poll_interval = 0.01
    backend.submit(spec(max_restarts=2))
    [first] = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.append_log(NS, first, "try 1")
    failed = threading.Event()
    names = [first]

    def training(namespace: str, pod: str) -> None:  # the first try fails; the second succeeds
        if pod == first:
            cluster.set_pod_phase(namespace, pod, "Failed", exit_code=1)
            failed.set()
        else:
            cluster.set_pod_phase(namespace, pod, "Succeeded", exit_code=0)
            cluster.transition(namespace, "train", "Complete")

    def controller() -> None:  # the Job's controller makes the next pod once the follow waits for it
        failed.wait()
        looked = _list_reads(cluster)
        while _list_reads(cluster) < looked + 2 and not stop.is_set():
            threading.Event().wait(0.005)
        [second] = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
        names.append(second)
        cluster.append_log(NS, second, "try 2")

    stop = threading.Event()
    cluster.on_follow_idle = training
    maker = threading.Thread(target=controller, daemon=True)
    maker.start()
    try:
        got = [x.text for x in backend.logs("train", follow=True)]
    finally:
        stop.set()
    maker.join()
    assert got == ["try 1", "try 2"] and len(set(names)) == 2
    assert backend.get("train").status.terminal


@pytest.mark.timeout(120)
def test_following_a_batch_job_whose_last_try_failed_ends_with_it(make_backend, cluster):
    """The follow that waits for a next try ends when the Job gives up (backoffLimit reached)."""
    backend = make_backend()
    backend.poll_interval = 0.01
    backend.submit(spec(max_restarts=0))
    [pod] = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.append_log(NS, pod, "only try")

    def training(namespace: str, name: str) -> None:
        cluster.set_pod_phase(namespace, name, "Failed", exit_code=3)
        cluster.transition(namespace, "train", "Failed", reason="BackoffLimitExceeded")

    cluster.on_follow_idle = training
    assert [x.text for x in backend.logs("train", follow=True)] == ["only try"]


@pytest.mark.timeout(120)
def test_following_a_trainjob_goes_on_in_the_pods_made_again(make_backend, cluster):
    """Several pods (a Trainer v2 TrainJob's nodes) whose JobSet makes them again under new names
    after a failure: each node's reader goes on in its new pod."""
    from dtrain.backends.kubernetes import KubernetesConfig

    from test_k8s_backend import IMAGE

    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, trainer="v2"))
    backend.poll_interval = 0.01
    backend.submit(spec(launcher="torchrun", processes=2))
    firsts = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    for pod in firsts:
        cluster.append_log(NS, pod, f"{pod} try 1")
    seconds: list[str] = []
    lock = threading.Lock()

    def training(namespace: str, pod: str) -> None:
        with lock:
            if pod in firsts and not seconds:  # one node fails: the JobSet makes every node again
                for old in firsts:
                    cluster.set_pod_phase(namespace, old, "Failed", exit_code=1)
                seconds.extend(p["metadata"]["name"] for p in cluster.run_pods(NS, "train"))
                for new in seconds:
                    cluster.append_log(NS, new, f"{new} try 2")
            elif pod in seconds:
                cluster.set_pod_phase(namespace, pod, "Succeeded", exit_code=0)
                if all(cluster.get("", "pods", NS, p)["status"]["phase"] == "Succeeded" for p in seconds):
                    cluster.transition(NS, "train", "Complete")

    cluster.on_follow_idle = training
    got = [x.text for x in backend.logs("train", follow=True)]
    assert sorted(got) == sorted([f"{p} try 1" for p in firsts] + [f"{p} try 2" for p in seconds])
    assert [x.rank for x in backend.logs("train", rank=1)] == [1]  # the new pod holds node 1's lines


@pytest.mark.timeout(120)
def test_following_a_replica_made_again_under_its_name_shows_each_line_once(make_backend, cluster):
    """The Training Operator makes an evicted replica's pod again under the same name: the follow
    goes on in the new pod (another uid) from its start, and shows no line twice."""
    backend = make_backend()
    backend.poll_interval = 0.01
    backend.submit(spec(launcher="torchrun", processes=2, max_restarts=1))
    master, worker = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.transition(NS, "train", "Running")
    cluster.append_log(NS, master, "master try 1")
    cluster.append_log(NS, worker, "worker try 1")
    uids = [cluster.get("", "pods", NS, worker)["metadata"]["uid"]]

    def training(namespace: str, pod: str) -> None:
        with cluster.lock:
            if pod == worker and len(uids) == 1:  # evicted, deleted, made again by the operator
                old = cluster.get("", "pods", NS, worker)
                cluster.handle("DELETE", f"/api/v1/namespaces/{NS}/pods/{worker}", b"")
                meta = {k: old["metadata"][k] for k in ("name", "namespace", "labels", "ownerReferences")}
                uids.append(cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": old["spec"],
                                            "status": {"phase": "Pending"}})["metadata"]["uid"])
                cluster.set_pod_phase(NS, worker, "Running")
                cluster.append_log(NS, worker, "worker try 2")
            elif pod == worker:
                for name in (master, worker):
                    cluster.set_pod_phase(NS, name, "Succeeded", exit_code=0)
                cluster.transition(NS, "train", "Succeeded")
        threading.Event().wait(0.005)

    cluster.on_follow_idle = training
    got = [x.text for x in backend.logs("train", follow=True)]
    assert sorted(got) == ["master try 1", "worker try 1", "worker try 2"] and len(set(uids)) == 2


# ------------------------------------------------------------------------- a long line of a packed pod


def test_log_lines_repeat_a_packed_lines_rank_tag_in_every_piece():
    """The pieces after the first of a long line lost the line's rank tag, so they were given to
    the pod's first rank. Each repeats the tag (MPI's with the space parse_line takes off: a piece
    that starts with a space keeps it); a pod that is not packed has nothing repeated."""
    for tags, tag, repeated in (("torchrun", b"[3]:", b"[3]:"), ("mpi", b"[1,2]<stderr>:", b"[1,2]<stderr>: "),
                                ("mpi", b"[1,2]<stdout>: ", b"[1,2]<stdout>: ")):
        body = b"x" * (MAX_LINE - len(STAMP) - len(tag)) + b" y" + b"z" * MAX_LINE  # the 2nd piece: " y..."
        source = logs.LogSource(pod="p", first_rank=0, tags=tags)
        pieces = logs.LogLines(stamped=True, tags=tags).feed(STAMP + tag + body + b"\n" + STAMP + b"after\n")
        assert len(pieces) > 3 and all(p.startswith(STAMP + repeated) for p in pieces[1:-1]), tags
        lines = [logs.parse_line(p.decode(), source) for p in pieces]
        assert {x.rank for x in lines[:-1]} == {2 if tags == "mpi" else 3} and lines[-1].rank == 0
        assert pieces[1] == STAMP + repeated + b" y" + b"z" * (MAX_LINE - 2)
        assert "".join(x.text for x in lines[:-1]) == body.decode()
    plain = logs.LogLines(stamped=True).feed(STAMP + b"[3]:" + body + b"\n")
    assert all(p.startswith(STAMP) and not p[len(STAMP):].startswith(b"[3]:") for p in plain[1:])


def test_a_packed_ranks_long_line_stays_with_its_rank(make_backend, cluster):
    """`dtrain logs --rank 1` of a pod running ranks 0 and 1: rank 1's 200 kB line came back as its
    first 64 KiB; the rest went to rank 0."""
    from test_k8s_backend import IMAGE

    from dtrain.backends.kubernetes.config import KubernetesConfig

    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, gpus_per_node=2))
    backend.submit(spec(launcher="torchrun", processes=2, gpu=1))  # one pod runs ranks 0 and 1
    [pod] = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    long = "é" * 100_000
    cluster.append_log(NS, pod, "[0]:rank 0 starts")
    cluster.append_log(NS, pod, f"[1]:{long}")
    cluster.append_log(NS, pod, "[0]:rank 0 ends")
    cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    for follow in (False, True):
        assert "".join(x.text for x in backend.logs("train", rank=1, follow=follow)) == long
        assert [x.text for x in backend.logs("train", rank=0, follow=follow)] == ["rank 0 starts", "rank 0 ends"]


def test_a_summary_costs_the_api_server_one_list(backend, cluster):
    """Prometheus scrapes every 15-60 s: the summary it reads (counts and the unfinished jobs) makes
    the requests of one `list`, not one per status."""
    backend.submit(spec())
    backend.submit(spec(name="other"))
    cluster.run_pods(NS, "train")
    before = len(cluster.requests)
    listed = backend.list()
    one_list = len(cluster.requests) - before
    summary = backend.summary()
    assert len(cluster.requests) - before - one_list == one_list
    assert sorted(j.name for j in summary.unfinished) == sorted(j.name for j in listed) == ["other", "train"]
    assert sum(c.jobs for c in summary.counts) == 2
