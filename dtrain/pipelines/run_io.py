"""What a run with kfp.local shows and keeps of its steps (runner.py re-exports every name here):
each step's log kept as STEP_LOG, the last lines the steps printed and a failed step's error, a
failed task's place in the pipeline's own words, `print` and logging given back after parallel
tasks, SIGTERM taken as Ctrl-C, and the environment the step subprocesses inherit.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import threading
from pathlib import Path
from typing import Iterator

from dtrain.names import cut

STEP_LOG = "step.log"  # each step's output (what the terminal showed), in the step's outputs folder


@contextlib.contextmanager
def _step_logs() -> Iterator[None]:
    """Keep each step's output after the run, as a KFP server keeps a step pod's log: kfp.local
    only prints it. Its function that runs a step's process (prints each line the process writes)
    is swapped, for the run, for one that prints them and writes them to STEP_LOG in the step's
    outputs folder (its executor output file's folder); a step that failed has one too. A KFP
    without that function runs as it is, leaving no logs."""
    from kfp.local import subprocess_task_handler as handler

    original = getattr(handler, "run_local_subprocess", None)
    if original is None:
        yield
        return

    def run_and_keep(full_command, env_vars=None):
        path = _step_log_path(full_command)
        if path is None:
            return original(full_command=full_command, env_vars=env_vars)
        env = {**os.environ, **env_vars} if env_vars else None
        with open(path, "a", encoding="utf-8", errors="replace") as log, \
                subprocess.Popen(full_command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 bufsize=1, env=env, errors="replace") as process:
            for line in iter(process.stdout.readline, ""):
                log.write(line)
                log.flush()
                print(line, end="")
            print("\n")
            return process.wait()

    handler.run_local_subprocess = run_and_keep
    try:
        yield
    finally:
        handler.run_local_subprocess = original


def _step_log_path(full_command: list[str]) -> Path | None:
    """STEP_LOG in the folder of the step's executor output file (named in its --executor_input),
    made if missing; None if the command names none (a KFP that calls it otherwise)."""
    try:
        given = json.loads(full_command[full_command.index("--executor_input") + 1])
        folder = Path(given["outputs"]["outputFile"]).parent
        folder.mkdir(parents=True, exist_ok=True)
    except (ValueError, IndexError, KeyError, TypeError, OSError):
        return None
    return folder / STEP_LOG


_KFP_GROUP = re.compile(r"^(condition-branches|condition|for-loop|exit-handler)-\d+\Z")  # names KFP makes up
_CHANNEL = re.compile(r"inputs\.parameter_values\['pipelinechannel--([^']+)'\]")


def _task_words(spec, chain: str) -> str:
    """KFP's chain of a failed task (`'train' inside 'condition-2' inside 'condition-branches-1'`) in
    the pipeline's own words, read from its IR: the step, with its display name where it has one,
    then each group it is in by the name the pipeline gave it (`dsl.If(..., name=...)`), an unnamed
    branch by its condition; KFP's wrapper of an If/Elif/Else chain says nothing and is left out."""
    names = re.findall(r"'([^']*)'", chain)
    if not names:
        return chain
    path, dag, found = list(reversed(names)), spec.root.dag, []
    for key in path:  # outermost first: each task is looked up in the DAG of the group around it
        task = dag.tasks.get(key) if dag is not None else None
        found.append(task)
        component = spec.components.get(task.component_ref.name) if task is not None else None
        dag = component.dag if component is not None and component.HasField("dag") else None
    words = []
    for key, task in zip(reversed(path), reversed(found)):  # innermost first, as KFP says them
        shown_as = task.task_info.name if task is not None and task.task_info.name else key
        if not words:
            words.append(f"'{key}'" + (f" ({shown_as})" if shown_as != key else ""))
        elif _KFP_GROUP.match(shown_as) and key.startswith("condition-branches-"):
            continue
        elif _KFP_GROUP.match(shown_as) and key.startswith("condition-") and task is not None:
            when = _CHANNEL.sub(r"\1", task.trigger_policy.condition)
            words.append(f"in the branch where {cut(when, 200)}" if when else f"inside '{key}'")
        elif shown_as != key and key.startswith("condition-"):
            words.append(f"in branch '{shown_as}'")
        else:
            words.append(f"inside '{shown_as}'")
    return " ".join(words)



_PY_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)): (.+)$")  # a traceback's last line


@contextlib.contextmanager
def _step_lines() -> Iterator[list[str]]:
    """The last lines the steps' logs showed: kfp.local prints each line of a step's output through
    `print` (its indenting one wraps the `print` of the moment the task began, this recorder)."""
    lines: list[str] = []
    shown_print = builtins.print

    def recorder(*args, **kwargs):
        if kwargs.get("file") is None and len(args) == 1 and isinstance(args[0], str):
            lines.extend(args[0].splitlines())
            del lines[:-200]
        return shown_print(*args, **kwargs)

    builtins.print = recorder
    try:
        yield lines
    finally:
        builtins.print = shown_print


def _step_error(lines: list[str]) -> str:
    """What a failed step raised (its traceback's last line: the exception and the first line of its
    message), for the run's one line; the whole story stays in the step's log above."""
    for line in reversed(lines):
        found = _PY_ERROR.match(line.strip())
        if found:
            said = found.group(2).strip()
            if said.endswith(":"):  # its message goes on over lines (a failed job's last log lines)
                said += " (in the step's log above)"
            return f"{found.group(1).rsplit('.', 1)[-1]}: {cut(said, 600)}"
    return "the step's log above ends with why"


@contextlib.contextmanager
def _print_and_logging_kept() -> Iterator[None]:
    """Give this process's `print` and root logger back as they were. For each task, kfp.local
    swaps both (`builtins.print` for one that indents, the root logger's handlers for one writing
    to the `sys.stdout` of that moment) and swaps them back when the task ends. The tasks of a
    `dsl.ParallelFor` run in threads at once, so a task that ended last put back what another had
    swapped in: an indenting `print` for good, and a handler holding a stream that may be closed
    since ("--- Logging error --- I/O operation on closed file" when a library logs later)."""
    root = logging.getLogger()
    print_, handlers, level = builtins.print, root.handlers[:], root.level
    try:
        yield
    finally:
        builtins.print = print_
        root.handlers[:] = handlers
        root.setLevel(level)


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI job's timeout, `kill`) ends a run as Ctrl-C does, so the folders of its steps
    are cleaned and its jobs named; it used to end the process where it stood. Left alone where
    SIGTERM is not ours to take: handled or ignored already, or `run` called off the main thread."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextlib.contextmanager
def _environment(**values: str):
    """Set variables for the step subprocesses (they inherit this process's environment)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
