"""The arrows between packages point one way, and the public API is pinned."""

from __future__ import annotations

import ast
import os
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
        if rel[0] == "server":  # the HTTP API only calls the client, like the CLI
            assert not {m for m in mods if m.startswith(("dtrain.backends.", "dtrain.storage", "dtrain.cli",
                                                         "dtrain.training", "dtrain.workloads"))}, path


def test_public_api_is_pinned():
    assert sorted(dtrain.__all__) == ["Client", "DtrainError", "JobSpec", "JobStatus", "NewVolume", "Toleration",
                                      "VolumeMount", "parse_env", "parse_pvc"]
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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """dtrain module -> the dtrain modules it imports: every import statement, at any depth
    (inside functions and `if TYPE_CHECKING:` too), relative ones resolved."""
    paths = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        out = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                for a in node.names:  # `from pkg import mod` imports the module, else the package
                    out.add(f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base)
        graph[name] = {m for m in out if m in paths and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_inside_dtrain():
    graph = import_graph()
    assert {"dtrain.storage.engine", "dtrain.backends.base"} <= graph.keys()
    assert "dtrain.storage.packs" in graph["dtrain.storage.engine"]  # the walker sees real edges
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_storage_imports_neither_the_spec_nor_a_backend():
    graph = import_graph()
    for name, deps in graph.items():
        if name.startswith("dtrain.storage"):
            assert not {d for d in deps if d == "dtrain.spec" or d.startswith(("dtrain.spec.", "dtrain.backends",
                                                                                 "dtrain.client", "dtrain.cli"))}, name


def test_the_spec_is_pure_and_its_modules_import_only_those_above_them():
    """dtrain.spec (a package) imports no backend, client, CLI, server, storage, config or database, and
    no module of it imports the package itself (its names are for the rest of dtrain)."""
    graph = import_graph()
    order = ["fields", "env", "volumes", "labels", "tolerations", "aliases", "job", "notebook", "yaml_file"]
    assert {n for n in graph if n.startswith("dtrain.spec.")} == {f"dtrain.spec.{m}" for m in order}
    for i, module in enumerate(order):
        deps = graph[f"dtrain.spec.{module}"]
        assert not {d for d in deps if d.startswith(PLATFORM + ("dtrain.server",))}, module
        inside = {d.removeprefix("dtrain.spec.") for d in deps if d.startswith("dtrain.spec.")}
        assert inside <= set(order[:i]), (module, inside - set(order[:i]))


def _loaded_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after `statement`."""
    out = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys; print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True, cwd=PKG.parent,
                         env=dict(os.environ, PYTHONPATH=str(PKG.parent))).stdout
    return set(out.split())


def test_start_up_imports_only_what_every_command_needs():
    """Each of these cost every fresh process milliseconds (docs/benchmarks.md, issue 17): a
    snapshot from a fresh process imports `dtrain.storage`, every command `dtrain.cli.main`."""
    storage = _loaded_after("import dtrain.storage")
    assert not storage & {"dataclasses", "inspect", "ctypes", "shutil", "hashlib", "concurrent.futures",
                          "logging", "_strptime", "yaml"}
    cli = _loaded_after("import dtrain.cli.main")
    assert not cli & {"yaml", "dtrain.pipelines.runner", "kfp", "torch", "boto3", "kubernetes"}
    # a volume or snapshot command opens the local backend, not its job machinery
    local = _loaded_after("import dtrain.backends.local.backend") - cli
    assert not local & {"dtrain.backends.local.supervisor", "dtrain.backends.local.notebook", "secrets",
                        "dtrain.backends.local.launch", "dtrain.backends.local.cgroups", "socket", "subprocess"}
    # reading and stopping jobs (`dtrain list`, `describe`, `delete`) needs the rank records, not
    # the supervisor's machinery
    jobs = _loaded_after("import dtrain.backends.local.backend, dtrain.backends.local.ranks, "
                         "dtrain.backends.local.scheduler") - cli
    assert not jobs & {"dtrain.backends.local.supervisor", "dtrain.backends.local.notebook", "secrets",
                       "dtrain.backends.local.launch", "socket", "subprocess"}


def test_a_command_builds_only_its_own_section_of_the_parser():
    """`dtrain VERB ...` builds VERB's section of the parser (a whole parser is ~20 ms of every
    command); each section must parse and explain its verbs exactly as the whole parser does."""
    import argparse

    from dtrain.cli.main import SECTIONS, build_parser, verb_of

    def verbs(parser):
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        return action.choices

    whole = verbs(build_parser())
    assert [v for section, _ in SECTIONS for v in section] == list(whole)  # the same verbs, in --help order
    for section, _ in SECTIONS:
        for verb in section:
            own = verbs(build_parser(verb))
            assert list(own) == list(section)
            assert own[verb].format_help() == whole[verb].format_help()
    assert verb_of(["--home", "h", "--backend=local", "snapshot", "list"]) == "snapshot"
    assert verb_of(["--help"]) is verb_of([]) is verb_of(["--ho", "h", "list"]) is None
    assert list(verbs(build_parser("no-such-verb"))) == list(whole)  # its error lists every verb


def unused_imports(path: Path) -> list[str]:
    """The names `path` imports at its top and never uses, but for those a `# noqa: F401` line re-exports."""
    source = path.read_text()
    tree, lines = ast.parse(source), source.splitlines()
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    unused = []
    for node in tree.body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)) or getattr(node, "module", "") == "__future__":
            continue
        if any("noqa: F401" in line for line in lines[node.lineno - 1:node.end_lineno]):
            continue
        unused += [n for a in node.names if (n := (a.asname or a.name).split(".")[0]) not in used]
    return unused


def test_the_sagemaker_backend_imports_only_what_it_uses():
    """contract.py imported posixpath and used it nowhere; a re-export says so (noqa: F401)."""
    assert {p.name: unused_imports(p) for p in (PKG / "backends" / "sagemaker").glob("*.py")
            if unused_imports(p)} == {}
