"""Docs are tested: every command a doc shows exists, and the runnable ones run as written.

- In README.md and docs/*.md, a ```console block holds `$ ` commands (a trailing `\\` continues
  a command; a heredoc `<<'EOF'` takes the lines up to its terminator). Other lines are output.
- A block whose fence follows `<!-- needs: cluster|aws|gpu|kfp-server|foreground -->` (directly,
  on the line before) cannot run here (`foreground`: it runs until Ctrl-C, e.g. a server): its
  commands are only checked against the parsers. So are the README
  walk-through's (between the walkthrough markers), which test_demo runs as scripts/demo.sh.
- Every other console block runs: each doc's blocks top to bottom, in one bash, in a fresh
  temporary DTRAIN_HOME and working folder; every command must exit 0. A doc holding
  `<!-- docs-test: slow -->` is run only in the slow suite.
- The Python a block outside the console ones feeds to `python - <<'EOF'` (a manifest piped to
  `kubectl apply -f -`) runs alone, as written, and prints something.
- Every `dtrain ...` command shown anywhere in a doc (inline code, any fenced block) and every one
  named in a message or help text of the source is checked against the parsers.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli_words import check_command, words_of

REPO = Path(__file__).resolve().parents[1]
NEEDS = ("cluster", "aws", "gpu", "kfp-server", "foreground")  # foreground: runs until Ctrl-C (a server)
NEEDS_RE = re.compile(r"^<!-- needs: ([a-z-]+(?:, *[a-z-]+)*) -->$")
SLOW_MARK = "<!-- docs-test: slow -->"


def docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass(frozen=True)
class Command:
    doc: str
    line: int  # 1-based line of its `$ `
    text: str  # the command as bash reads it (continuations and heredoc lines kept)
    runnable: bool


def _fences(lines: list[str]):
    """(opening line index, info string, body lines) of every fenced block."""
    i = 0
    while i < len(lines):
        m = re.match(r"^(```+|~~~+)\s*([\w-]*)", lines[i])
        if m:
            fence, info, start = m.group(1), m.group(2), i
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                i += 1
            yield start, info, lines[start + 1:i]
        i += 1


def _commands_of(body: list[str], first_line: int):
    i = 0
    while i < len(body):
        line = body[i]
        if not line.startswith("$ "):
            i += 1
            continue
        start, parts = i, [line[2:]]
        while parts[-1].endswith("\\") and i + 1 < len(body):
            i += 1
            parts.append(body[i])
        heredoc = re.search(r"<<-?\s*'?\"?([A-Za-z_]+)'?\"?", "\n".join(parts))
        if heredoc:
            while i + 1 < len(body) and body[i].strip() != heredoc.group(1):
                i += 1
                parts.append(body[i])
        yield first_line + start, "\n".join(parts)
        i += 1


def console_commands(path: Path) -> list[Command]:
    lines = path.read_text().splitlines()
    walkthrough = set()
    if "<!-- walkthrough:start -->" in lines:
        a, b = lines.index("<!-- walkthrough:start -->"), lines.index("<!-- walkthrough:end -->")
        walkthrough = set(range(a, b))
    out = []
    for start, info, body in _fences(lines):
        if info != "console":
            continue
        marker = NEEDS_RE.match(lines[start - 1].strip()) if start else None
        if marker:
            unknown = set(re.split(r", *", marker.group(1))) - set(NEEDS)
            assert not unknown, f"{path.name}:{start}: unknown needs {unknown}; use {', '.join(NEEDS)}"
        runnable = marker is None and start not in walkthrough
        for line, text in _commands_of(body, start + 2):
            out.append(Command(path.name, line, text, runnable))
    return out


def shown_dtrain_commands(path: Path) -> list[tuple[int, str]]:
    """Every `dtrain ...` a reader sees: inline code spans and lines of any fenced block."""
    found = []
    text = path.read_text()
    lines = text.splitlines()
    fenced = set()
    for start, info, body in _fences(lines):
        fenced |= set(range(start, start + len(body) + 2))
        joined = re.sub(r"\\\n\s*", " ", "\n".join(body))
        transcript = any(b.startswith("$ ") for b in body)  # then only `$ ` lines are commands
        for n, line in enumerate(joined.splitlines()):
            if transcript and not line.startswith("$ "):
                continue
            line = line[2:] if line.startswith("$ ") else line
            if re.match(r"\s*(\S+=\S+\s+)*(dtrain |python3? -m dtrain\.workloads\.)", line):
                found.append((start + 2 + n, line.strip()))
    prose = "\n".join("" if n in fenced else line for n, line in enumerate(lines))
    for m in re.finditer(r"`((?:[^`\n]|\n(?!\n))+)`", prose):  # a span may wrap, within its paragraph
        span = " ".join(m.group(1).split())
        if re.match(r"(dtrain |python3? -m dtrain\.workloads\.)", span):
            found.append((prose.count("\n", 0, m.start()) + 1, span))
    return found


# ---- every command shown exists -----------------------------------------------------------------
@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.name)
def test_every_dtrain_command_a_doc_shows_exists(doc):
    problems = []
    for line, text in shown_dtrain_commands(doc):
        if "{" in text:  # a synopsis of alternatives: {train,predict,...}
            continue
        problems += [f"{doc.name}:{line}: {p}   ({text[:80]})" for p in check_command(words_of(text))]
    for cmd in console_commands(doc):
        for part in re.split(r"\n(?![ \t])", cmd.text.replace("\\\n", " ")):
            problems += [f"{doc.name}:{cmd.line}: {p}" for p in check_command(words_of(part))]
    assert problems == []


@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.name)
def test_shell_commands_are_console_blocks(doc):
    """A dtrain command to type lives in a ```console block (run or marked), not in ```sh/bash."""
    lines = doc.read_text().splitlines()
    bad = [f"{doc.name}:{start + 1}" for start, info, body in _fences(lines)
           if info in ("sh", "bash", "shell") and any(re.match(r"\s*dtrain ", b) for b in body)]
    assert bad == [], "use ```console with `$ ` lines (and a needs marker if it cannot run here)"


# ---- the runnable blocks run as written ---------------------------------------------------------
def _runnable_docs():
    for doc in docs():
        if any(c.runnable for c in console_commands(doc)):
            slow = SLOW_MARK in doc.read_text()
            yield pytest.param(doc, id=doc.name, marks=[pytest.mark.slow] if slow else [])


def _script(commands: list[Command]) -> str:
    parts = ["set -o pipefail"]
    for i, c in enumerate(commands):
        parts.append(f"echo '### {c.doc}:{c.line}' >&2")
        parts.append(f"{c.text}\nrc=$?; if [ $rc -ne 0 ]; then echo \"### FAILED {c.doc}:{c.line} exit $rc\" >&2; "
                     f"exit 1; fi")
    return "\n".join(parts) + "\n"


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("doc", list(_runnable_docs()))
def test_doc_console_blocks_run_as_written(doc, tmp_path):
    commands = [c for c in console_commands(doc) if c.runnable]
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "DTRAIN_HOME": str(home), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    try:
        proc = subprocess.run(["bash", "-c", _script(commands)], cwd=work, env=env, capture_output=True,
                              text=True, timeout=1700)
    finally:
        subprocess.run(["bash", "-c", "for j in $(dtrain list -A --json | python -c 'import json,sys; "
                        "print(\" \".join(j[\"name\"] for j in json.load(sys.stdin) "
                        "if j[\"status\"] in (\"Pending\", \"Running\")))'); do dtrain delete $j; done"],
                       cwd=work, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, f"{proc.stderr[-3000:]}\n--- stdout ---\n{proc.stdout[-3000:]}"



# ---- the Python a non-console block feeds to `python -` (its output piped on: kubectl apply) ------------------
def piped_pythons(path: Path) -> list[tuple[int, str]]:
    """(line, source) of each `python - <<'EOF'` heredoc outside the console blocks (those run above, or
    say what they need): a ```bash block, indented in a list, whose output goes to `kubectl apply -f -`
    cannot run here, but the Python that writes the manifest can, and must run as written."""
    import textwrap

    lines = path.read_text().splitlines()
    console = {n for start, info, body in _fences(lines) if info == "console" for n in range(start, start + len(body) + 2)}
    found = []
    for i, line in enumerate(lines):
        m = re.match(r"\s*(?:\$ )?python3? - <<-?\s*'?\"?([A-Za-z_]+)", line)
        if m and i not in console:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == m.group(1)), len(lines))
            found.append((i + 1, textwrap.dedent("\n".join(lines[i + 1:end]))))
    return found


def test_the_collector_finds_the_python_fed_to_kubectl_in_kubernetes_md():
    found = piped_pythons(REPO / "docs" / "kubernetes.md")
    assert any("render_snapshot_class" in source for _, source in found), found


@pytest.mark.parametrize("doc", [d for d in docs() if piped_pythons(d)], ids=lambda p: p.name)
def test_python_a_doc_pipes_to_another_command_runs_as_written(doc, tmp_path):
    """docs/kubernetes.md's VolumeSnapshotClass (python - <<'EOF' | kubectl apply -f -) ran in no test."""
    env = {**os.environ, "DTRAIN_HOME": str(tmp_path / "home")}
    for line, source in piped_pythons(doc):
        proc = subprocess.run([sys.executable, "-"], input=source, cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, f"{doc.name}:{line}: {proc.stderr[-2000:]}"
        assert proc.stdout.strip(), f"{doc.name}:{line}: printed nothing for the command it is piped to"

def test_collector_reads_continuations_heredocs_and_markers(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("text\n```console\n$ dtrain submit a \\\n    --cpu 1 -- echo hi\nout\n$ cat > f <<'EOF'\n"
                   "a: 1\nEOF\n```\n<!-- needs: cluster -->\n```console\n$ dtrain nodes\n```\n")
    cmds = console_commands(doc)
    assert [(c.line, c.runnable) for c in cmds] == [(3, True), (6, True), (12, False)]
    assert cmds[0].text == "dtrain submit a \\\n    --cpu 1 -- echo hi"
    assert cmds[1].text == "cat > f <<'EOF'\na: 1\nEOF"
    assert check_command(words_of("dtrain submit a --storage-class x -- echo")) == [
        "dtrain submit: no option --storage-class"]
    doc.write_text("A span may wrap: `dtrain project create team-a\n--no-such-flag` and `dtrain nodes`.\n")
    assert shown_dtrain_commands(doc) == [(1, "dtrain project create team-a --no-such-flag"), (2, "dtrain nodes")]


# ---- every command a message or help text names exists ------------------------------------------
def _strings(tree: ast.AST):
    """String constants and f-strings (values as X), docstrings left out (they are prose)."""
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    parts_of_fstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts_of_fstrings |= {id(v) for v in node.values}
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and id(node) not in parts_of_fstrings):
            yield node.lineno, node.value


def _message_commands():
    """`dtrain VERB ...` in every string of the package, joined across implicit concatenation."""
    found = []
    for path in sorted((REPO / "dtrain").rglob("*.py")):
        for line, text in _strings(ast.parse(path.read_text())):
            for m in re.finditer(r"(?:^|[\s'`(\"])(dtrain (?:[a-z][\w-]*)(?:[^'`\")\n;:,]|:(?=\S))*)", text):
                found.append((f"{path.relative_to(REPO)}:{line}", m.group(1).strip()))
    return found


# Sentences where "dtrain" is the subject, not a command (each one read and listed here).
PROSE = {"dtrain create it", "dtrain inside the cluster", "dtrain home", "dtrain did not put there"}


def test_every_command_named_in_messages_and_help_exists():
    found = _message_commands()
    assert len(found) > 20  # the collector does see the messages
    problems = [f"{where}: {p}   ({text})" for where, text in found if text not in PROSE
                for p in check_command(words_of(text))]
    assert problems == []


# Where a backtick is what the text is: the HTTP schema's descriptions (OpenAPI's are CommonMark), the
# scaling report (a Markdown table) and the completion script's comments. submit's line, once in Run:AI's
# backticks ("You can run `runai describe job ...`"), quotes its command as every other message does.
MARKDOWN_OK = ("dtrain/server/", "dtrain/bench/scaling.py", "dtrain/cli/completion.py")


def test_messages_quote_commands_as_dtrain_does_not_in_markdown():
    """A message or help text quotes a command in single quotes ('dtrain snapshot list'), as most
    did; storage's and the lanes workload's said it in Markdown backticks, which a terminal shows as is,
    and so did the bench scripts' (bench/ab.py's "a `git worktree add` folder", snapshots.py's --tools)."""
    found = [f"{path.relative_to(REPO)}:{line}: {text[:100]}"
             for path in sorted((REPO / "dtrain").rglob("*.py")) + sorted((REPO / "bench").glob("*.py"))
             if not str(path.relative_to(REPO)).startswith(MARKDOWN_OK)
             for line, text in _strings(ast.parse(path.read_text())) if "`" in text]
    assert found == []


# ---- every benchmark command a doc shows names a script and its options ----------------------------
class _Parser(Exception):
    def __init__(self, parser):
        self.parser = parser


def bench_options(script: Path) -> set[str]:
    """The option strings of a bench script's argparse parser."""
    return {s for a in bench_parser(script)._actions for s in a.option_strings}


def bench_parser(script: Path) -> argparse.ArgumentParser:
    """A bench script's argparse parser, captured when its main() builds it (nothing runs)."""
    import runpy
    from unittest import mock

    def capture(parser, *args, **kwargs):
        raise _Parser(parser)

    sys.path.insert(0, str(script.parent))  # the scripts import their neighbour ab.py
    try:
        with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), \
                mock.patch.object(sys, "argv", [str(script)]):
            runpy.run_path(str(script), run_name="__main__")
    except _Parser as got:
        return got.parser
    finally:
        sys.path.remove(str(script.parent))
    raise AssertionError(f"{script.name} built no argparse parser")


def shown_bench_commands(path: Path) -> list[tuple[int, str, str]]:
    """(line, script, its arguments) of every `bench/NAME.py ...` or `bench/NAME.sh` a doc names
    (continuation lines joined; the arguments end at a pipe, a backtick, `;`, `&&` or ` -- `)."""
    found = []
    for n, line in enumerate(re.sub(r"\\\n\s*", " ", path.read_text()).splitlines()):
        if re.match(r"\s+bench/\w+\.py\s{2,}", line):  # a row of a listing of the dtrain/ package tree
            continue
        for m in re.finditer(r"(?<![\w/.])bench/(\w+\.(?:py|sh))([^`|;&\n]*)", line):
            found.append((n + 1, m.group(1), " ".join(m.group(2).split(" -- ")[0].split())))
    return found


@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.name)
def test_every_bench_command_a_doc_shows_names_a_script_and_its_options(doc):
    problems, options = [], {}
    for line, script, args in shown_bench_commands(doc):
        path = REPO / "bench" / script
        if not path.is_file():
            problems.append(f"{doc.name}:{line}: no bench/{script}")
            continue
        if script.endswith(".py"):
            if script not in options:
                options[script] = bench_options(path)
            flags = [w.split("=", 1)[0] for w in args.split() if w.startswith("--")]  # --a=--bf16: --a
            problems += [f"{doc.name}:{line}: bench/{script} has no option {flag}"
                         for flag in flags if flag not in options[script]]
    assert problems == []


def test_the_bench_command_collector_reads_flags_up_to_the_training_arguments(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("run `bench/heap.py --rounds 2` and\n```\n.venv/bin/python bench/platform_ab.py --data-dir D \\\n"
                   "    --rounds 4 -- --recipe demo\n```\n(`dtrain/bench/scaling.py` is not one)\n")
    assert shown_bench_commands(doc) == [(1, "heap.py", "--rounds 2"), (3, "platform_ab.py", "--data-dir D --rounds 4")]
    assert {"--rounds", "--core"} <= bench_options(REPO / "bench" / "heap.py")


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "bench").glob("*.py") if p.name != "ab.py"))
def test_every_bench_scripts_help_says_what_it_measures_in_whole_sentences(script):
    """`--help` opens with the script's docstring (its first paragraph at least), never a line of
    it cut mid-sentence."""
    about = (bench_parser(REPO / "bench" / script).description or "").split("\n\n")[0].strip()
    assert about and about[-1] in ".:", f"bench/{script} --help opens with {about!r}"


# ---- every relative link between the docs leads somewhere ----------------------------------------
def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (outside fenced blocks)."""
    lines, fenced = path.read_text().splitlines(), set()
    for start, info, body in _fences(lines):
        fenced |= set(range(start, start + len(body) + 2))
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for n, line in enumerate(lines) if n not in fenced and re.match(r"#{1,6} ", line)}


@pytest.mark.parametrize("doc", docs(), ids=lambda p: p.name)
def test_every_relative_link_and_anchor_a_doc_gives_exists(doc):
    problems = []
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists():
                problems.append(f"{doc.name}:{n}: {target}: no {file}")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                problems.append(f"{doc.name}:{n}: {target}: {path.name} has no heading #{anchor}")
    assert problems == []


def test_sdk_md_names_every_field_of_each_record_its_records_section_lists():
    """docs/sdk.md's Records listed JobInfo without `uid`, SnapshotInfo without `job_uid`,
    `earlier_run` and `job_deleted`, ProjectInfo without `running` and `pending`, NodeInfo without
    `labels`, ...: a notebook user met attributes the reference never named."""
    import dataclasses

    import dtrain.backends.base as base

    text = (REPO / "docs" / "sdk.md").read_text()
    section = text[text.index("## Records"):text.index("`to_dict()` on")]
    missing, checked = [], set()
    for bullet in re.findall(r"^- (.*?)(?=^- |\Z)", section, re.S | re.M):
        words = set(re.findall(r"`([A-Za-z_]\w*)`", bullet))
        for name in sorted(words - {"JobSpec"}):  # a JobSpec's fields have their own table
            record = getattr(base, name, None)
            if dataclasses.is_dataclass(record):
                checked.add(name)
                missing += [f"{name}.{f.name}" for f in dataclasses.fields(record) if f.name not in words]
    assert {"JobInfo", "ProcessInfo", "SnapshotInfo", "ProjectInfo", "NodeInfo", "FreedInfo"} <= checked
    assert missing == [], "docs/sdk.md's Records section does not name these fields"


# ---- docs/demo.md's recorded output has the form dtrain prints now -----------------------------
def _keys(block: str) -> list[str]:
    """The shape of a `describe` output: each line's key ('Name', '  env'), values and tables left out."""
    return [m.group(1) for m in re.finditer(r"^(\s*[A-Za-z][\w ()/]*):(?: |$)", block, re.M)]


def _recorded(doc: str, command: str) -> str:
    """The output recorded under `$ COMMAND` in a transcript, up to the blank line."""
    start = doc.index(f"$ {command}\n") + len(command) + 3
    return doc[start:doc.index("\n\n", start)]


@pytest.mark.slow  # a data job and a two-process job: about 20 s
def test_the_demos_recorded_describe_outputs_have_the_form_dtrain_prints_now(tmp_path):
    """docs/demo.md's `describe job` and `snapshot describe` predated their UID and Name lines: the same commands,
    on a small job, print the same keys in the same order (Limits: only where this machine has cgroups)."""
    doc = (REPO / "docs" / "demo.md").read_text()
    env = {**os.environ, "DTRAIN_HOME": str(tmp_path / "home")}
    dtrain = str(Path(sys.executable).parent / "dtrain")

    def run(*words: str) -> str:
        proc = subprocess.run([dtrain, *words], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    run("project", "create", "lane-detection")
    run("config", "project", "lane-detection")
    run("submit", "download-tusimple-data", "--pvc", "local:100Gi:/mnt", "--", "true")
    run("wait", "download-tusimple-data")
    run("snapshot", "create", "pvc-download-tusimple-data-0", "--name", "tusimple-prepared",
        "--job", "download-tusimple-data")
    run("submit-dist", "train-lane-detection", "--processes", "2", "--cpu", "1", "--large-shm",
        "--pvc", "pvc-download-tusimple-data-0:/mnt", "-e", "ENABLE_SNAPSHOT=true",
        "-e", "PVC_NAME=pvc-download-tusimple-data-0", "--", "true")
    run("wait", "train-lane-detection")
    described = run("describe", "job", "train-lane-detection")
    [snap] = [line.split()[0] for line in run("snapshot", "list").splitlines() if "train-lane-detection" in line]
    recorded = _recorded(doc, "dtrain describe job train-lane-detection")
    shown = [k for k in _keys(described) if k != "Limits"]
    assert [k for k in _keys(recorded) if k != "Limits"] == shown, described
    recorded = _recorded(doc, next(re.finditer(r"^\$ (dtrain snapshot describe \S+)$", doc, re.M)).group(1))
    assert _keys(recorded) == _keys(run("snapshot", "describe", snap))
