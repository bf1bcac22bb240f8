"""The Kubernetes backend's leftovers of an audit: logs of a job whose pods are gone or cannot
start (an init container included), readers of several pods that outlived their caller, a
snapshot-on-success that broke reading the job, the RBAC hint's namespace, storage creates whose
answer was lost, exec's exit status and bytes, settings of the wrong YAML type, and a kubeconfig
that a token refresh must not rewrite.

Every test drives the official `kubernetes` client against the shipped fake API server; the CLI
tests run the real `dtrain` command against it through a kubeconfig.
"""

from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from conftest import Dtrain, assert_usage_error  # noqa: E402
from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.client import Forbidden, client_from_config  # noqa: E402
from dtrain.backends.kubernetes.fake import DROP, FakeCluster, FakeKubeServer, exec_writes  # noqa: E402
from dtrain.errors import BackendError, ConflictError, NotFoundError  # noqa: E402
from dtrain.spec import parse_pvc  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_faults import _set_container  # noqa: E402

SNAPSHOTS = ("snapshot.storage.k8s.io", "volumesnapshots")


def _delete_pods(cluster: FakeCluster, *pods: str) -> None:
    """What the operator's cleanPodPolicy (or the pod garbage collector) does once a job ends."""
    for pod in pods:
        status, _ = cluster.handle("DELETE", f"/api/v1/namespaces/{NS}/pods/{pod}", b"")
        assert status == 200


def _ended(backend, cluster, *, status: str = "Succeeded") -> list[str]:
    """A two-pod PyTorchJob that ran, wrote a line in each pod and ended."""
    backend.submit(spec(launcher="torchrun", processes=2))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    for pod in pods:
        cluster.append_log(NS, pod, f"last words of {pod}")
        cluster.set_pod_phase(NS, pod, status, exit_code=0 if status == "Succeeded" else 1)
    cluster.transition(NS, "train", status)
    return pods


def _one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


# ------------------------------------------------------------------------- logs of an ended job without pods


@pytest.mark.parametrize("follow", [False, True])
def test_logs_of_an_ended_job_whose_pods_were_cleaned_up_say_why(make_backend, cluster, follow):
    """cleanPodPolicy All deleted the pods: `logs` printed nothing and exited 0, as if the job
    had written nothing."""
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, clean_pod_policy="All"))
    pods = _ended(backend, cluster)
    assert [x.text for x in backend.logs("train")] == [f"last words of {p}" for p in pods]  # pods kept: read
    _delete_pods(cluster, *pods)
    with pytest.raises(NotFoundError, match=r"job 'train' ended \(Succeeded\) and its cleanPodPolicy All "
                                            r"deleted its pods, with their logs: .*log collector.*"
                                            r"'clean_pod_policy: None'") as err:
        list(backend.logs("train", follow=follow))
    _one_line(err)


@pytest.mark.parametrize("follow", [False, True])
def test_logs_of_a_failed_job_whose_pods_were_collected_say_why(make_backend, cluster, follow):
    """The default policy keeps pods; something else removed them (the pod garbage collector)."""
    backend = make_backend()
    pods = _ended(backend, cluster, status="Failed")
    _delete_pods(cluster, *pods)
    with pytest.raises(NotFoundError, match=r"job 'train' ended \(Failed\) and its pods are gone, with the logs "
                                            r"\(a cluster keeps a pod's log only while the pod exists\)") as err:
        list(backend.logs("train", follow=follow))
    assert "cleanPodPolicy" not in _one_line(err)


def test_logs_of_one_rank_whose_pod_is_gone_say_so(make_backend, cluster):
    """cleanPodPolicy Running deletes only the pods still running at the end: rank 0's stays."""
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, clean_pod_policy="Running"))
    _ended(backend, cluster)
    _delete_pods(cluster, "train-worker-0")
    assert [x.text for x in backend.logs("train", rank=0)] == ["last words of train-master-0"]
    with pytest.raises(NotFoundError, match="cleanPodPolicy Running deleted its pods"):
        list(backend.logs("train", rank=1))


@pytest.mark.slow
def test_logs_of_an_ended_job_without_pods_through_the_cli(home, tmp_path, make_backend, cluster):
    """What the user sees: one line and a non-zero exit, for both `logs` and `logs -f`."""
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, clean_pod_policy="All"))
    _delete_pods(cluster, *_ended(backend, cluster))
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        for follow in ([], ["-f"]):
            assert_usage_error(dt("logs", "train", *follow, check=False), "job 'train' ended (Succeeded)",
                               "clean_pod_policy: None")


def test_logs_of_a_job_that_has_not_started_stay_empty_and_follow_waits(backend, cluster):
    """No pod yet and not ended: nothing written so far, not an error; `logs -f` waits for the pods."""
    backend.poll_interval = 0.01
    backend.submit(spec(launcher="torchrun", processes=2))
    assert list(backend.logs("train")) == []

    def looks() -> int:
        return sum(method == "GET" and "/pods?" in path for method, path in list(cluster.requests))

    before = looks()

    def operator() -> None:  # creates the pods once `logs -f` has looked for them while it waits
        while looks() < before + 3:  # the verb's check, `_logs`' look, one look of the wait
            threading.Event().wait(0.005)
        for pod in [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]:
            cluster.append_log(NS, pod, f"hello from {pod}")
            cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)

    started = threading.Thread(target=operator, daemon=True)
    started.start()
    lines = sorted(x.text for x in backend.logs("train", follow=True))
    started.join()
    assert lines == ["hello from train-master-0", "hello from train-worker-0"]


@pytest.mark.timeout(60)
def test_a_reader_that_stops_following_several_pods_stops_their_streams(backend, cluster):
    """`logs -f` of a multi-pod job, left after one line (a dashboard closed the job's log view):
    one reader thread per pod kept streaming into an unread queue for as long as the job ran."""
    backend.submit(spec(launcher="torchrun", processes=2))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    for pod in pods:
        cluster.append_log(NS, pod, f"first line of {pod}")
    left, job_ended = threading.Event(), threading.Event()

    def training(namespace: str, pod: str) -> None:  # each pod writes on once the reader has left
        left.wait()
        if not job_ended.wait(0.01):
            cluster.append_log(namespace, pod, "another step")

    cluster.on_follow_idle = training
    before = set(threading.enumerate())  # an earlier test's readers of pods of these names may still run
    lines = backend.logs("train", follow=True)
    assert next(lines).text.startswith("first line of")
    # Both readers are running now: each waits in its stream for the pod's next line, which comes only
    # after `left`. (Looked for after `left` is set, a reader may already have ended, as it should.)
    readers = [t for t in threading.enumerate() if t.name in {f"logs-{pod}" for pod in pods} and t not in before]
    assert len(readers) == 2
    lines.close()
    left.set()
    try:
        for reader in readers:
            reader.join(20)
        assert not any(reader.is_alive() for reader in readers)  # they stopped while the pods still run
    finally:
        job_ended.set()
        for pod in pods:
            cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)


def test_a_job_deleted_by_its_ttl_names_the_setting(make_backend, cluster):
    """ttlSecondsAfterFinished removes the job itself: 'not found' says which setting did it."""
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, ttl_seconds_after_finished=600))
    with pytest.raises(NotFoundError, match="job 'train' not found .*deletes a job 600s after it ends "
                                            r"\(kubernetes setting ttl_seconds_after_finished\)"):
        list(backend.logs("train"))


# ------------------------------------------------------------------------- snapshot-on-success


@pytest.mark.parametrize("method, status, said", [("POST", 403, "not taken yet: cannot create VolumeSnapshot"),
                                                  ("POST", DROP, "not taken yet: cannot reach"),
                                                  ("GET", 403, "not checked: cannot read VolumeSnapshot")])
def test_a_snapshot_on_success_that_cannot_be_taken_does_not_break_reading_the_job(backend, cluster, method,
                                                                                   status, said):
    """`get` takes the snapshot once it sees the job Succeeded: an account without RBAC on
    VolumeSnapshots (or a lost answer) made `describe`, `list` and `wait` of the job fail."""
    backend.create_volume("data", size="1Gi")
    backend.submit(spec(snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))
    cluster.transition(NS, "train", "Complete")
    cluster.fail(method, "/volumesnapshots", status)
    for info in (backend.get("train"), backend.wait("train", timeout=5, poll=0.01), *backend.list()):
        assert info.status is JobStatus.SUCCEEDED and info.snapshot is None
        assert info.message.startswith(f"snapshot-on-success {said}") and "\n" not in info.message
    cluster.faults.clear()
    assert backend.get("train").snapshot == "train-success"  # the next look takes it


# ------------------------------------------------------------------------- logs of a pod that cannot start


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError"])
def test_logs_of_a_pod_that_cannot_start_name_the_reason(backend, cluster, reason):
    """`describe` named the reason, `logs` printed nothing and exited 0."""
    backend.submit(spec())
    pod = cluster.run_pods(NS, "train", phase="Pending")[0]["metadata"]["name"]
    _set_container(cluster, pod, {"waiting": {"reason": reason, "message": "the registry said no"}})
    with pytest.raises(BackendError, match=f"pod {pod} of job 'train' cannot start \\({reason}: the registry said "
                                           f"no\\): fix the image, secret or config") as err:
        list(backend.logs("train"))
    _one_line(err)


@pytest.mark.parametrize("reason", ["ContainerCreating", "PodInitializing"])
def test_logs_of_a_pod_on_its_way_are_empty(backend, cluster, reason):
    backend.submit(spec())
    pod = cluster.run_pods(NS, "train", phase="Pending")[0]["metadata"]["name"]
    _set_container(cluster, pod, {"waiting": {"reason": reason}})
    assert list(backend.logs("train")) == []


@pytest.mark.timeout(60)
def test_a_pod_whose_init_container_cannot_pull_is_named(backend, cluster):
    """The Training Operator adds an init container (init-pytorch) to each worker; on a cluster that
    cannot pull its image the worker waits at PodInitializing for good, and neither `describe`
    nor `logs -f` looked at init containers: `logs -f` waited forever."""
    backend.poll_interval = 0.01
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running", reason="PyTorchJobRunning")
    worker = cluster.get("", "pods", NS, "train-worker-0")
    worker["status"].update(phase="Pending", initContainerStatuses=[{"name": "init-pytorch", "state": {
        "waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "alpine:3.10"'}}}])
    worker["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
    stuck = 'init container init-pytorch: ImagePullBackOff: Back-off pulling image "alpine:3.10"'
    assert backend.get("train").message == f"PyTorchJobRunning; {stuck}"
    for follow in (False, True):
        with pytest.raises(BackendError, match=f"pod train-worker-0 of job 'train' cannot start \\({stuck}\\)"):
            list(backend.logs("train", rank=1, follow=follow))


# ------------------------------------------------------------------------- the RBAC hint


@pytest.mark.parametrize("method, path, call, access", [
    ("GET", "/persistentvolumeclaims", lambda b: b.list_volumes(), f"list persistentvolumeclaims -n {NS}"),
    ("GET", "/pytorchjobs/train", lambda b: b.get("train"), f"get pytorchjobs.kubeflow.org -n {NS}"),
    ("GET", "/log", lambda b: list(b.logs("train")), f"get pods/log -n {NS}"),
    ("POST", "/persistentvolumeclaims", lambda b: b.create_volume("data", size="1Gi"),
     f"create persistentvolumeclaims -n {NS}"),
])
def test_a_403_names_the_permission_to_check_in_the_real_namespace(make_backend, cluster, method, path, call, access):
    """The hint printed a literal '<namespace>'."""
    backend = make_backend()
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.fail(method, path, 403)
    with pytest.raises(Forbidden) as err:
        call(backend)
    assert _one_line(err).endswith(f"(kubectl auth can-i {access})") and "<namespace>" not in str(err.value)


def test_a_401_says_to_log_in_again(backend, cluster):
    cluster.fail("GET", "/persistentvolumeclaims", 401)
    with pytest.raises(Forbidden, match="did not accept the credentials .*log in again") as err:
        backend.list_volumes()
    assert "can-i" not in _one_line(err)


# ------------------------------------------------------------------------- storage creates whose answer was lost


def _pvcs(cluster: FakeCluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.items("", "persistentvolumeclaims", NS))


def test_a_volume_created_despite_a_lost_answer_is_returned(backend, cluster):
    """The PVC was stored but its answer was lost: `volume create` failed, and its retry then
    said the volume already exists."""
    cluster.fail("POST", "/persistentvolumeclaims", DROP, carried_out=True)
    made = backend.create_volume("data", size="1Gi")
    assert made.name == "data" and made.size == "1Gi" and _pvcs(cluster) == ["data"]


def test_a_volume_create_without_an_answer_says_it_may_exist(backend, cluster):
    cluster.fail("POST", "/persistentvolumeclaims", DROP)
    with pytest.raises(BackendError, match="cannot reach .*; the volume 'data' may have been created all the "
                                           "same: see 'dtrain volume list' before you retry") as err:
        backend.create_volume("data", size="1Gi")
    _one_line(err)


def test_a_volume_of_the_same_name_made_by_someone_else_is_not_taken_for_ours(backend, cluster):
    backend.create_volume("data", size="5Gi")
    cluster.fail("POST", "/persistentvolumeclaims", DROP)
    with pytest.raises(ConflictError, match="volume 'data' already exists"):
        backend.create_volume("data", size="1Gi")
    assert cluster.get("", "persistentvolumeclaims", NS, "data")["spec"]["resources"]["requests"]["storage"] == "5Gi"


@pytest.mark.parametrize("status", [DROP, 504])
def test_a_snapshot_and_a_restore_created_despite_a_lost_answer_are_returned(backend, cluster, status):
    backend.create_volume("data", size="1Gi")
    cluster.bind_volumes()
    cluster.fail("POST", "/volumesnapshots", status, carried_out=True)
    assert backend.create_snapshot("data", name="s1").name == "s1"
    assert [s["metadata"]["name"] for s in cluster.items(*SNAPSHOTS, NS)] == ["s1"]
    cluster.ready_snapshots()
    cluster.fail("POST", "/persistentvolumeclaims", status, carried_out=True)
    restored = backend.restore_snapshot("s1", to="copy")
    assert restored.name == "copy" and restored.origin_snapshot == "s1" and _pvcs(cluster) == ["copy", "data"]


def test_a_snapshot_and_a_restore_without_an_answer_say_they_may_exist(backend, cluster):
    backend.create_volume("data", size="1Gi")
    cluster.bind_volumes()
    backend.create_snapshot("data", name="s1")
    cluster.ready_snapshots()
    cluster.fail("POST", "", 504)
    with pytest.raises(BackendError, match="HTTP 504 .*; the snapshot 's2' may have been created all the same: "
                                           "see 'dtrain snapshot list' before you retry") as err:
        backend.create_snapshot("data", name="s2")
    _one_line(err)
    with pytest.raises(BackendError, match="HTTP 504 .*; the volume 'copy' may have been created all the same: "
                                           "see 'dtrain volume list' before you retry") as err:
        backend.restore_snapshot("s1", to="copy")
    _one_line(err)


# ------------------------------------------------------------------------- exec through the websocket API


def _exec_into(backend, cluster, writes) -> list[list[str]]:
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")
    commands: list[list[str]] = []

    def kubelet(namespace: str, pod: str, command: list[str]) -> list[tuple[int, bytes]]:
        commands.append([pod, *command])
        return writes

    cluster.on_exec = kubelet
    return commands


def test_exec_copies_the_output_and_returns_the_exit_code(backend, cluster, capsys):
    """The websocket exec path itself: the output of each channel, and the exit code of the Status."""
    commands = _exec_into(backend, cluster, exec_writes("out\n", "err\n", exit_code=7))
    assert backend.exec("train", ["sh", "-c", "exit 7"], rank=1) == 7
    assert commands == [["train-worker-0", "sh", "-c", "exit 7"]]
    assert capsys.readouterr()[:2] == ("out\n", "err\n")
    cluster.on_exec = lambda namespace, pod, command: exec_writes("fine\n")
    assert backend.exec("train", ["true"]) == 0


def test_a_read_during_an_exec_handshake_stays_a_plain_request(backend, cluster, capsys):
    """kubernetes' stream() swaps the `request` of the ApiClient it is given for a websocket call
    until the handshake ends: the exec shared the backend's ApiClient, so another thread's plain read
    in that window went out as a websocket upgrade and failed. The kubelet here holds the handshake
    until a read made meanwhile has its answer."""
    _exec_into(backend, cluster, [])
    entered, answered = threading.Event(), threading.Event()
    seen: list[object] = []

    def reader() -> None:
        entered.wait(30)
        try:
            seen.append(backend.get("train").status)
        except Exception as err:  # noqa: BLE001 - the failure the test shows
            seen.append(err)
        answered.set()

    def kubelet(namespace: str, pod: str, command: list[str]):
        entered.set()
        answered.wait(30)
        return exec_writes("done\n")

    cluster.on_exec = kubelet
    thread = threading.Thread(target=reader)
    thread.start()
    assert backend.exec("train", ["true"]) == 0
    thread.join(30)
    assert seen == [JobStatus.RUNNING], seen
    assert capsys.readouterr().out == "done\n"


def test_exec_copies_bytes_exactly(backend, cluster, capsysbinary):
    """A file copied out with `dtrain exec JOB -- cat FILE > copy`: each frame was decoded as UTF-8
    on its own, so bytes that are not UTF-8, and a character split between two frames, came back
    as U+FFFD."""
    data = bytes(range(256)) * 4
    _exec_into(backend, cluster, [(1, b"caf\xc3"), (1, b"\xa9\n"), (1, data), (2, b"\xff warn\n"), *exec_writes()])
    assert backend.exec("train", ["cat", "/mnt/model.pt"]) == 0
    assert capsysbinary.readouterr() == (b"caf\xc3\xa9\n" + data, b"\xff warn\n")


def test_exec_of_a_command_that_cannot_start_is_one_line(backend, cluster):
    """The kubelet ends with an InternalError whose cause is a sentence: int() of it was a
    ValueError traceback."""
    message = ('error executing command in container: failed to exec in container: OCI runtime exec failed: '
               'exec: "nosuch": executable file not found in $PATH: unknown')
    status = {"metadata": {}, "status": "Failure", "message": f"Internal error occurred: {message}",
              "reason": "InternalError", "details": {"causes": [{"message": message}]}, "code": 500}
    _exec_into(backend, cluster, [(3, json.dumps(status).encode())])
    with pytest.raises(BackendError, match="cannot run 'nosuch' in pod train-master-0: Internal error occurred: "
                                           ".*executable file not found") as err:
        backend.exec("train", ["nosuch"])
    _one_line(err)


def test_an_exec_session_that_ends_without_a_status_is_one_line(backend, cluster):
    """The session closed with no status (a proxy between ended it): a TypeError traceback, and no
    word that the command may still run."""
    _exec_into(backend, cluster, [(1, b"partial output\n")])
    with pytest.raises(BackendError, match="ended without the command's exit status: the command may still "
                                           f"run there; check with 'kubectl -n {NS} get pod train-master-0'"):
        backend.exec("train", ["sleep", "100"])


# ------------------------------------------------------------------------- the user's kubeconfig


def _cli(home, tmp_path, server: FakeKubeServer, **settings) -> Dtrain:
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes", "project": "lanes", "kubernetes": {
        "kubeconfig": str(kubeconfig), "image": IMAGE, **settings}}))
    return Dtrain(home)


@pytest.mark.parametrize("setting, needles", [
    # was split into letters: the pods named pull secrets r, e, g, c, d and could not pull
    ("image_pull_secrets: regcred", ("invalid Kubernetes image_pull_secrets 'regcred'", "[regcred]")),
    ("mpirun_args: --tag-output --allow-run-as-root", ("mpirun_args", "[--tag-output, --allow-run-as-root]")),
    ("image: 5", ("invalid Kubernetes image 5: use a string",)),  # was a TypeError traceback
    ("snapshot_watcher: 'false'", ("invalid Kubernetes snapshot_watcher 'false': use true or false",)),
])
def test_settings_of_the_wrong_type_are_one_line(home, setting, needles):
    image = "" if setting.startswith("image:") else "  image: i:1\n"  # a key given twice is refused first
    (home / "config.yaml").write_text(f"backend: kubernetes\nkubernetes:\n{image}  {setting}\n")
    proc = Dtrain(home)("submit", "x", "--dry-run", "--", "python", "t.py", check=False)
    assert_usage_error(proc, *needles)


_REFRESHING = """# our team's cluster: keep this comment
apiVersion: v1
kind: Config
current-context: gke
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: gke, context: {cluster: c, user: u}}]
users:
- name: u
  user:
    auth-provider:
      name: gcp
      config: {cmd-path: "TOKEN_COMMAND"}
"""


def test_a_token_refresh_leaves_the_kubeconfig_as_it_was(tmp_path):
    """An auth-provider whose token is refreshed (gcp with cmd-path, oidc, azure) made the client
    re-dump the whole kubeconfig with the new token: comments and order gone, written through a
    link to the user's dotfiles. kubectl's users never see a read-only tool rewrite it."""
    command = tmp_path / "print-token"
    command.write_text('#!/bin/sh\necho \'{"credential": {"access_token": "fresh", '
                       '"token_expiry": "2099-01-01T00:00:00Z"}}\'\n')
    command.chmod(0o755)
    dotfile = tmp_path / "dotfiles-kubeconfig"
    dotfile.write_text(_REFRESHING.replace("TOKEN_COMMAND", str(command)))
    before = dotfile.read_bytes()
    (tmp_path / "kubeconfig").symlink_to(dotfile)
    client = client_from_config(KubernetesConfig(kubeconfig=str(tmp_path / "kubeconfig")))
    try:
        assert client.configuration.api_key == {"authorization": "Bearer fresh"}  # the refresh did run
    finally:
        client.close()
    assert dotfile.read_bytes() == before and (tmp_path / "kubeconfig").is_symlink()
