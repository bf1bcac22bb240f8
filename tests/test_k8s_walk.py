"""docs/kubernetes.md walked as a new user against the fake API server: what the walk found.

`wait` rides through an API server that sheds load or restarts for a while; a missing namespace
with `create_namespace: false` is one line naming how to make it; a name taken between the
check and the create names the fix; every object dtrain sends validates against the schemas.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

from dtrain.backends import base  # noqa: E402
from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import DROP, FakeCluster  # noqa: E402
from dtrain.errors import UnavailableError  # noqa: E402

JOB_PATH = f"/apis/batch/v1/namespaces/{NS}/jobs/train"


class Outage(FakeCluster):
    """Once armed, answers the reads of batch Job 'train' after the first with `failures` (an HTTP
    status, or DROP: the connection closes), one each, then marks the job Complete."""

    def __init__(self, failures: list[int]):
        super().__init__()
        self.failures, self.reads, self.armed = list(failures), 0, False

    def handle(self, method: str, url: str, body: bytes):
        if self.armed and method == "GET" and url.split("?")[0] == JOB_PATH:
            self.reads += 1
            with self.lock:
                self.faults.clear()
                if self.reads > 1 and self.failures:
                    self.fail("GET", JOB_PATH, self.failures.pop(0))
                elif self.reads > 1:
                    self.transition(NS, "train", "Complete")
        return super().handle(method, url, body)


@pytest.mark.parametrize("failures", [[429, 503], [DROP, 500, 429]])
def test_wait_rides_through_an_api_server_that_does_not_answer_for_a_while(make_backend, failures):
    fake = Outage(failures)
    backend = make_backend(fake=fake)
    backend.submit(spec())
    fake.armed = True
    info = backend.wait("train", poll=0)
    assert info.status is JobStatus.SUCCEEDED
    assert fake.failures == [] and fake.reads == len(failures) + 2


def test_wait_reports_an_outage_longer_than_its_bound(make_backend, monkeypatch):
    monkeypatch.setattr(base, "WAIT_OUTAGE", 0.0)
    fake = Outage([503, 503])
    backend = make_backend(fake=fake)
    backend.submit(spec())
    fake.armed = True
    with pytest.raises(UnavailableError, match="HTTP 503 .*retry in a minute"):
        backend.wait("train", poll=0)
    assert fake.failures == [503]  # gave up at the first unanswered poll, the bound being 0
