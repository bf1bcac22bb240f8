"""The arrows between packages point one way, and the public API is pinned."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import dtrain
from dtrain.backends.base import Backend

PKG = Path(dtrain.__file__).parent
PLATFORM = ("dtrain.client", "dtrain.backends", "dtrain.cli", "dtrain.storage", "dtrain.config", "dtrain.db",
            "dtrain.bench", "dtrain.pipelines")


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_training_code_runs_without_the_platform():
    """Importing every workload entry point pulls in no backend, CLI, client, SQLite or storage."""
    code = ("import sys, dtrain.training, dtrain.workloads.lanes.train, dtrain.workloads.lanes.predict, "
            "dtrain.workloads.lanes.prepare, dtrain.workloads.cifar10.train\n"
            f"bad = sorted(m for m in sys.modules if m.startswith({PLATFORM!r}) or m == 'sqlite3')\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_static_arrows():
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).parts
        mods = imports_of(path)
        if rel[0] in ("training", "workloads"):
            assert not {m for m in mods if m.startswith(PLATFORM)}, path
        if rel[0] == "backends":
            assert not {m for m in mods if m.startswith(("dtrain.cli", "dtrain.client"))}, path
        if rel[0] == "pipelines":  # steps use the Client, like the CLI; components run in KFP pods
            assert not {m for m in mods if m.startswith(("dtrain.cli.", "dtrain.storage", "dtrain.backends."))
                        and m != "dtrain.backends.base"}, path
        if rel[0] == "cli":
            assert not {m for m in mods if m.startswith(("dtrain.backends.", "dtrain.storage"))}, path


def test_public_api_is_pinned():
    assert sorted(dtrain.__all__) == ["Client", "DtrainError", "JobSpec", "JobStatus", "NewVolume", "VolumeMount",
                                      "parse_env", "parse_pvc"]
    public = {n for n in vars(Backend) if not n.startswith("_")}
    assert {"submit", "get", "list", "logs", "wait", "delete", "nodes"} <= public
    assert {"wait"} & {n for n in vars(Backend) if n.startswith("_")} == set()
    # `wait` is written once: no backend overrides it
    from dtrain.backends.kubernetes.backend import KubernetesBackend
    from dtrain.backends.local.backend import LocalBackend
    for cls in (LocalBackend, KubernetesBackend):
        assert "wait" not in vars(cls) and "logs" not in vars(cls) and "submit" not in vars(cls)


def test_no_caller_probes_a_backend_with_getattr():
    """Callers use the declared verbs; a missing one raises NotSupportedError, never a silent None."""
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
                target = ast.unparse(node.args[0]) if node.args else ""
                assert "backend" not in target.lower(), f"{path}:{node.lineno}: {ast.unparse(node)}"
