"""The OpenAPI schema fuzzed with schemathesis against a real `dtrain server` on 127.0.0.1.

Bounded: a fixed number of examples per operation and mode, derandomized (the same cases on
every run, so a failure is never "now and then"). Every answer must be below 500 and match
the schema, and every refused request (4xx) must leave everything stored as it was: the
SQLite tables and the names under DTRAIN_HOME are compared before and after each refusal.

Submitting jobs and starting notebooks is fuzzed with schema-violating bodies only: a valid random
spec would start a real process (a random command, a JupyterLab that runs until deleted) on this machine.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from server_util import ServerProcess

schemathesis = pytest.importorskip("schemathesis", reason="the 'dev' extra (schemathesis) is not installed")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

pytestmark = pytest.mark.slow
EXAMPLES = 10  # per operation and generation mode
POSITIVE_ONLY_UNSAFE = {("POST", "/api/v1/jobs"), ("POST", "/api/v1/notebooks")}  # a valid one starts a process


def stored_state(home: Path) -> tuple:
    """Every row of every SQLite table, and every file and folder name (not WAL side files)."""
    tables = []
    for db in sorted(home.rglob("*.db")):
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
            tables += [(str(db), n, sorted(map(repr, conn.execute(f'SELECT * FROM "{n}"')))) for n in names]
        finally:
            conn.close()
    files = sorted(str(p.relative_to(home)) for p in home.rglob("*")
                   if not p.name.endswith(("-wal", "-shm", "-journal")) and "logs" not in p.parts)
    return tuple(tables), tuple(files)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    home = tmp_path_factory.mktemp("fuzz-home")
    work = tmp_path_factory.mktemp("fuzz-work")
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=work)
    http = server.http
    assert http.post("/api/v1/projects", json={"name": "team", "gpu_quota": 1}).status_code == 201
    assert http.post("/api/v1/volumes", json={"name": "seed-vol", "size": "1Gi"}).status_code == 201
    assert http.post("/api/v1/snapshots", json={"volume": "seed-vol", "name": "seed-snap"}).status_code == 201
    r = http.post("/api/v1/jobs", json={"name": "seed-job", "command": ["echo", "seeded"], "project": "team"})
    assert r.status_code == 201
    assert http.get("/api/v1/jobs/seed-job/wait", params={"timeout": 120}).json()["status"] == "Succeeded"
    yield server, home
    server.stop()


def test_fuzzed_requests_never_fail_the_server_and_refusals_change_nothing(seeded):
    server, home = seeded
    schema = schemathesis.openapi.from_url(server.url + "/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    tried: dict[str, int] = {}
    for op in operations:
        modes = [GenerationMode.NEGATIVE] if (op.method.upper(), op.path) in POSITIVE_ONLY_UNSAFE else \
            [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
        for mode in modes:
            _fuzz(op, mode, server, home, tried)
    assert sum(tried.values()) >= len(operations) * 5, tried


def _fuzz(op, mode, server: ServerProcess, home: Path, tried: dict[str, int]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(generation_mode=mode))
    def check(case):
        before = stored_state(home)
        response = case.call(base_url=server.url, timeout=60)
        label = f"{case.method} {case.formatted_path} {mode.value}"
        assert response.status_code < 500, (label, response.status_code, response.text)
        if 400 <= response.status_code < 500:
            assert stored_state(home) == before, f"{label} was refused ({response.status_code}) but changed state"
            error = response.json().get("error")
            assert error and "\n" not in error, (label, response.text)  # one line that says what is wrong
            assert "should match pattern" not in error, (label, error)  # names.py's words, never a regex
        if mode is GenerationMode.POSITIVE:
            case.validate_response(response)
        tried[op.label] = tried.get(op.label, 0) + 1
    try:
        check()
    except Unsatisfiable:
        assert mode is GenerationMode.NEGATIVE, op.label  # nothing to break in a request without inputs
