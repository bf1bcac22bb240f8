"""`dtrain logs` of a Kubernetes job reads its pods' logs in bounded memory, as `kubectl logs`
does: it held every pod's whole log (the answer's bytes, then a str and a record per line, then
a sorted copy) before printing a line, so a long training's log could run the CLI out of memory.
Driven through the real CLI against the shipped fake API server; the CLI's peak memory is read
from the kernel (its ru_maxrss)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from conftest import DTRAIN  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeKubeServer  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

LINES = 120_000  # a pod: 120,000 lines of ~100 bytes, 12 MB of log each
PAD = "x" * 80


def _peak_kib(env: dict, *args: str, out) -> int:
    """Run `dtrain ARGS` with stdout to `out`; the most memory it held (KiB), as the kernel counted it."""
    probe = ("import resource, subprocess, sys; "
             "rc = subprocess.run(sys.argv[1:], stdout=sys.stdout).returncode; "
             "sys.stderr.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", probe, DTRAIN, *args], stdout=out, stderr=subprocess.PIPE,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return int(proc.stderr.strip().splitlines()[-1])


@pytest.mark.slow
def test_logs_of_two_long_pod_logs_are_merged_in_bounded_memory(backend, cluster, home, tmp_path):
    backend.submit(spec(launcher="torchrun", processes=2))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    server = FakeKubeServer(cluster).start()
    try:
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes", "project": "lanes", "kubernetes": {
            "kubeconfig": str(kubeconfig), "image": IMAGE}}))
        env = {**__import__("os").environ, "DTRAIN_HOME": str(home)}
        for pod in pods:
            cluster.append_log(NS, pod, f"{pod} first")
        with open(tmp_path / "short.txt", "w") as out:
            small = _peak_kib(env, "logs", "train", out=out)
        for step in range(LINES):
            for i, pod in enumerate(pods):
                cluster.append_log(NS, pod, f"rank {i} step {step:06d} {PAD}", at=1_800_000_000 + step + i / 2)
        with open(tmp_path / "long.txt", "w") as out:
            big = _peak_kib(env, "logs", "train", out=out)
        with open(tmp_path / "long.txt") as f:
            lines = f.read().splitlines()
    finally:
        server.close()
    assert len(lines) == 2 * LINES + 2
    # merged by time: rank 0's line of a step, then rank 1's, step after step
    assert lines[2:6] == [f"[rank {i}] rank {i} step {step:06d} {PAD}" for step in (0, 1) for i in (0, 1)], lines[:6]
    assert lines[-1] == f"[rank 1] rank 1 step {LINES - 1:06d} {PAD}"
    grew = (big - small) / 1024
    assert grew < 40, f"the CLI held {grew:.0f} MiB more for 24 MB of log ({small / 1024:.0f} MiB for a short one)"


def test_a_log_set_aside_where_there_is_no_room_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    import tempfile

    from conftest import tmpfs
    from dtrain.backends.kubernetes.logs import SPOOL, set_aside
    from dtrain.errors import StorageError

    with tmpfs(tmp_path / "tmp", "size=1m") as small:
        monkeypatch.setattr(tempfile, "tempdir", str(small))
        lines = (f"{i:08d} {PAD}" for i in range(2 * SPOOL // 90))  # past the memory's share, then past the disk
        with pytest.raises(StorageError) as err:
            set_aside(lines)
    message = str(err.value)
    assert message.startswith(f"cannot set a pod's log aside in {small} (No space left on device): free space "
                              "there, set TMPDIR to another folder, or read fewer lines (--tail, --rank)"), message
    assert "\n" not in message


def test_lines_set_aside_come_back_as_they_were(tmp_path):
    from dtrain.backends.kubernetes.logs import set_aside

    lines = ["plain", "", "carriage\rreturn", "ünïcödé \ufffd", "tab\tend "] * 3
    assert list(set_aside(iter(lines))) == lines
