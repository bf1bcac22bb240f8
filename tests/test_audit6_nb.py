"""Notebook defects found by the sixth audit (local backend; the real jupyter-server where one runs)."""

from __future__ import annotations

import socket

from dtrain.backends.local.notebook import taken_by_another


def test_a_port_is_taken_by_another_only_while_something_outside_the_job_holds_it(tmp_path):
    job_dir = tmp_path / "jobs" / "nb"
    job_dir.mkdir(parents=True)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        assert taken_by_another(job_dir, port)  # the job has no process: the listener is another program's
    assert not taken_by_another(job_dir, port)  # closed: free again
