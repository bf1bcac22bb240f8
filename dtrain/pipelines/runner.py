"""Find, describe, compile and run pipelines: what `dtrain pipeline list|compile|run` call.

Compiling uses KFP's own compiler (the IR YAML a KFP 2 server takes). Running uses KFP's local
runner, `kfp.local.SubprocessRunner(use_venv=False)`: every step is a real subprocess in this
machine's Python environment, and the steps reach dtrain through $DTRAIN_HOME, which the run
sets for them (they inherit the environment). Their $TMPDIR is a folder of the run's own, emptied
of what KFP's component command leaves behind when the run ends (see _step_tmpdir); the jobs they
start get the user's $TMPDIR back. A shipped pipeline's names (jobs, volumes, snapshots) are
checked on its backend before the first step (steps.check_plan).
"""

from __future__ import annotations

import builtins
import contextlib
import difflib
import fcntl
import importlib
import importlib.util
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable, Iterator

from dtrain.errors import EnvironmentError_, JobFailedError, NotFoundError, SpecError
from dtrain.names import cut, shown
from dtrain.replace import replace_file

SHIPPED = {  # name -> "module:function"; each module also has check, plan, fill and BACKEND_PARAM
    "hybrid-cifar10": "dtrain.pipelines.hybrid:hybrid_cifar10",
    "lane-detection": "dtrain.pipelines.lanes:lane_detection",
}
_KFP_TYPES = {"String": str, "Integer": int, "Float": float, "Boolean": bool, "List": list, "Dict": dict}
_WORDS = {"Integer": "a whole number", "Float": "a number", "List": "a JSON list", "Dict": "a JSON object",
          "String": "a string", "Boolean": "True or False"}
_EXAMPLES = {"List": '["a", 1]', "Dict": '{"a": 1}'}
# KFP carries every number as a double (protobuf Value, in the IR and the local runner's executor
# input): a larger whole number arrives changed (10**23 as 99999999999999991611392), and nan or
# inf are refused by KFP itself once the run has started.
MAX_EXACT_INT = 2**53
# A List or Dict parameter travels as a protobuf Struct, which protobuf parses to 100 nested messages
# at most: each JSON level is two, inside KFP's executor input (49 levels ran, 50 failed the run).
MAX_JSON_DEPTH = 32
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KFP_STAMP = "%Y-%m-%d-%H-%M-%S-%f"  # kfp.local's run folders: NAME-<datetime.now() in this form>


@dataclass(frozen=True, kw_only=True)
class Param:
    name: str
    type: str  # KFP's type name: String, Integer, Float, Boolean, ...
    default: Any = None  # None with required=True
    required: bool = False
    description: str = ""  # the pipeline docstring's Args line (KFP puts it in the IR for the run form)


@dataclass(frozen=True, kw_only=True)
class PipelineInfo:
    name: str  # the name `pipeline run` takes (or the @dsl.pipeline name of a --module)
    description: str
    params: tuple[Param, ...]


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    info: PipelineInfo
    func: Any  # the kfp GraphComponent
    check: Callable[[dict], None] | None = None  # parameter rules of a shipped pipeline
    plan: Callable[[dict], Any] | None = None  # a shipped pipeline's steps.Plan: the names a run takes
    # a shipped pipeline's parameters with the names a run makes for itself filled in (hybrid's empty job_name),
    # so that the checks before the run and an interruption's message know them
    fill: Callable[[dict, Callable[[], str]], dict] | None = None
    # the parameter that names the dtrain backend a shipped pipeline's steps use (`dtrain --backend` sets it)
    backend_param: str | None = None


@dataclass(frozen=True, kw_only=True)
class TaskResult:
    name: str  # the task's name in the run
    outputs: dict[str, Any]  # its output parameters, and artifact metadata under the artifact's name


@dataclass(frozen=True, kw_only=True)
class RunResult:
    pipeline: str
    run_dir: Path  # KFP's local pipeline root for this run (each task's outputs)
    tasks: tuple[TaskResult, ...]  # the tasks that ran; a skipped branch has none

    def task(self, name: str) -> TaskResult | None:
        return next((t for t in self.tasks if t.name == name), None)


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped `run` once its steps began; the message names the jobs that go on."""


def import_kfp():
    try:
        import kfp
    except ImportError:
        raise EnvironmentError_("pipelines need the KFP SDK: pip install 'dtrain[pipelines]'") from None
    return kfp


def load(name: str | None = None, *, module: str | None = None) -> Pipeline:
    """A shipped pipeline by name, or a user's @dsl.pipeline from `path.py:function`."""
    if (name is None) == (module is None):
        raise SpecError("name one pipeline: a shipped one (see 'dtrain pipeline list') or --module path.py:function")
    import_kfp()
    if module:
        func, check, plan, fill, backend_param = _from_file(module), None, None, None, None
    elif name in SHIPPED:
        mod_name, attr = SHIPPED[name].split(":")
        mod = importlib.import_module(mod_name)
        func, check, plan, fill, backend_param = getattr(mod, attr), mod.check, mod.plan, mod.fill, mod.BACKEND_PARAM
    else:
        raise NotFoundError(f"no pipeline {shown(name)}: use one of {', '.join(SHIPPED)} (see 'dtrain pipeline list'), "
                            f"or --module path.py:function for your own")
    return Pipeline(info=describe(func, name), func=func, check=check, plan=plan, fill=fill,
                    backend_param=backend_param)


def _from_file(ref: str):
    path, sep, attr = ref.rpartition(":")
    if not sep or not path.endswith(".py") or not attr.isidentifier():
        raise SpecError(f"invalid --module {shown(ref)}: use path/to/file.py:function")
    if not Path(path).is_file():
        raise NotFoundError(f"--module {shown(ref)}: no file {shown(path)}")
    spec = importlib.util.spec_from_file_location(f"dtrain_user_pipeline_{Path(path).stem}", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)  # the user's own code, as `python path.py` would run it
    except SyntaxError as err:  # IndentationError too: where, and what Python says
        where = f" at line {err.lineno}" + (f", column {err.offset}" if err.offset else "") if err.lineno else ""
        raise SpecError(f"--module {shown(ref)}: {Path(path).name} is not valid Python{where}: "
                        f"{cut(err.msg)}") from None
    except Exception as err:  # the user's module failed as it was imported: one line saying where
        raise SpecError(f"--module {shown(ref)}: importing {Path(path).name} failed at {_user_line(err, path)} with "
                        f"{type(err).__name__}: {cut(err)}") from None
    func = getattr(mod, attr, None)
    if func is None or not hasattr(func, "pipeline_spec"):
        raise SpecError(f"--module {shown(ref)}: {attr!r} is not a @dsl.pipeline function in {path}")
    return func


def _user_line(err: BaseException, path: str) -> str:
    """'line N' of the user's file where `err` passed last through it, or 'its import'."""
    target, line = os.path.realpath(path), None
    tb = err.__traceback__
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) == target:
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"line {line}" if line else "its import"


def _type_name(kind) -> str:
    """KFP's type name; a parameter annotated typing.List[int] or dict[str, float] keeps the
    annotation as its type, and is the List or Dict that KFP compiles it to."""
    name = str(kind)
    base = name.split("[", 1)[0].removeprefix("typing.")
    return {"list": "List", "List": "List", "dict": "Dict", "Dict": "Dict"}.get(base, name)


def describe(func, name: str | None = None) -> PipelineInfo:
    spec = func.component_spec
    params = tuple(Param(name=k, type=_type_name(v.type), default=v.default, required=not v.optional,
                         description=v.description or "") for k, v in (spec.inputs or {}).items())
    return PipelineInfo(name=name or spec.name, description=spec.description or "", params=params)


def list_pipelines() -> list[PipelineInfo]:
    return [load(name).info for name in SHIPPED]


def compile_to(pipeline: Pipeline, out: str | Path) -> Path:
    """KFP's compiler -> the pipeline's IR YAML at `out`."""
    from kfp import compiler

    out = Path(out)
    if out.suffix not in (".yaml", ".yml", ".json"):
        raise SpecError(f"invalid -o {shown(str(out))}: KFP writes .yaml (or .json) files, e.g. -o pipeline.yaml")
    if out.is_dir():
        raise SpecError(f"invalid -o {shown(str(out))}: it is a folder; give a file path, e.g. -o {out}/pipeline.yaml")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        # KFP's compiler opens -o itself: through a symbolic link left at it (written wherever it
        # points), and in place (a failed compile left half a file). It writes a scratch copy instead,
        # which replaces -o whole (a link there is replaced, never followed).
        with tempfile.TemporaryDirectory(prefix="dtrain-compile-") as scratch:
            made = Path(scratch) / f"pipeline{out.suffix}"  # the suffix picks KFP's format
            compiler.Compiler().compile(pipeline.func, str(made))
            replace_file(out, made.read_bytes())
    except (FileExistsError, NotADirectoryError):
        raise SpecError(f"cannot write -o {shown(str(out))}: a part of its folder {shown(str(out.parent))} is a "
                        f"file, not a folder") from None
    except OSError as err:  # /proc/x.yaml, a read-only place, a full disk: what the kernel said
        raise SpecError(f"cannot write -o {shown(str(out))}: {cut(err.strerror or err)}; give a file in a folder "
                        f"you can write to") from None
    return out


def compile_pipeline(name: str | None = None, *, module: str | None = None, to: str | Path) -> Path:
    """The SDK's `dtrain pipeline compile`: a shipped pipeline (or `module='path.py:function'`, a
    user's @dsl.pipeline) compiled by KFP's compiler to the IR YAML (JSON for a .json path) at `to`."""
    return compile_to(load(name, module=module), to)


def run_pipeline(name: str | None = None, *, module: str | None = None, params: dict | None = None,
                 home: str | Path | None = None, root: str | Path | None = None) -> RunResult:
    """The SDK's `dtrain pipeline run`: on this machine with KFP's local runner, the steps using the
    dtrain home `home` (None: $DTRAIN_HOME, else ~/.dtrain, as dtrain.Client). `params`: typed values
    (an int for an Integer parameter, a list for a List one), held to the rules --param is held to;
    defaults fill the rest. Step outputs go under `root` (default HOME/pipelines)."""
    from dtrain.config import home_dir

    pipeline = load(name, module=module)
    values = check_params(pipeline, {} if params is None else params)
    home = home_dir(home)
    return run(pipeline, values, home=home, root=Path(root) if root else home / "pipelines")


def parse_params(pipeline: Pipeline, items: list[str]) -> dict[str, Any]:
    """`k=v` strings -> typed arguments; defaults fill the rest. Unknown, duplicate, bad or missing -> SpecError."""
    params = {p.name: p for p in pipeline.info.params}
    given: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in params:
            raise SpecError(f"invalid --param {shown(item)}:{_did_you_mean(key, params)} use KEY=VALUE with KEY "
                            f"one of {', '.join(params)}")
        if key in given:
            raise SpecError(f"--param {key} is given twice: give it once")
        given[key] = _convert(params[key], text)
    return _completed(pipeline, given)


def with_backend(pipeline: Pipeline, items: list[str], backend: str | None) -> list[str]:
    """`--param` items with `dtrain --backend NAME` as the pipeline's backend parameter (hybrid-cifar10's
    training_runtime, lane-detection's backend) where none was given: the flag was ignored, and the run went
    where the parameter's default said. A --module pipeline's steps name their own backends, and a --param
    that says another one contradicts the flag: both refused."""
    if backend is None:
        return items
    param = pipeline.backend_param
    if param is None:
        raise SpecError(f"dtrain --backend {backend} does not reach the steps of a --module pipeline (each names "
                        f"the backend it uses): leave it out and pass your pipeline's own parameter, if it has one")
    given = [item.partition("=")[2] for item in items if item.partition("=")[0] == param]
    if not given:
        return [*items, f"{param}={backend}"]
    if given[-1] != backend:
        raise SpecError(f"dtrain --backend {backend} and --param {param}={shown(given[-1])} disagree: give one of "
                        f"them (the pipeline's steps use --param {param})")
    return items


def _did_you_mean(key: str, params) -> str:
    """' did you mean 'lr'?' for a key that abbreviates to a parameter (learning_rate -> lr) or is one
    slip from one; '' otherwise. The cutoff is 0.75, as the CLI's flags: at difflib's 0.6,
    learning_rate met training_runtime."""
    words = [w for w in re.split(r"[_\-\s]+", key.strip().lower()) if w]
    initials = "".join(w[0] for w in words)
    near = [p for p in params if len(words) > 1 and p == initials] or \
        difflib.get_close_matches(key.strip(), list(params), n=1, cutoff=0.75)
    return f" did you mean '{near[0]}'?" if near else ""


def check_params(pipeline: Pipeline, given: dict[str, Any]) -> dict[str, Any]:
    """Typed arguments from Python (the SDK's `Client.run_pipeline`) -> the run's arguments, held to
    the rules `parse_params` applies to the command line's: each a parameter of the pipeline, of its
    KFP type (an int for a Float too), defaults filling the rest."""
    params = {p.name: p for p in pipeline.info.params}
    if not isinstance(given, Mapping):
        raise SpecError(f"params must be a dict of parameter names to values, not {type(given).__name__}, "
                        f"e.g. {{{next(iter(params), 'name')!r}: ...}}")
    checked: dict[str, Any] = {}
    for key, value in given.items():
        if key not in params:
            raise SpecError(f"pipeline {pipeline.info.name!r} has no parameter {shown(str(key))}:"
                            f"{_did_you_mean(str(key), params)} use one of {', '.join(params)} (see 'dtrain pipeline list')")
        param = params[key]
        kind = _KFP_TYPES.get(param.type)
        if kind is None:
            raise SpecError(f"parameter {key}: a {param.type} parameter cannot be given to a run here")
        wrong = isinstance(value, bool) != (kind is bool) or not (
            isinstance(value, (int, float)) if kind is float else isinstance(value, kind))
        if wrong:
            article = "an" if param.type[0] in "AEIOU" else "a"
            raise SpecError(f"parameter {key}={cut(repr(value), 100)}: use {_WORDS[param.type]} ({article} "
                            f"{param.type} parameter), not a {type(value).__name__}")
        if kind in (list, dict):
            try:
                text = json.dumps(value, allow_nan=False)
            except (TypeError, ValueError, RecursionError):
                raise SpecError(f"parameter {key}: use {_WORDS[param.type]} of JSON values (finite numbers, strings, "
                                f"true/false/null, lists and objects), e.g. {_EXAMPLES[param.type]}") from None
            value = _from_json(param, text, kind)
        checked[key] = float(value) if kind is float else value
    return _completed(pipeline, checked)


def _completed(pipeline: Pipeline, given: dict[str, Any]) -> dict[str, Any]:
    params = {p.name: p for p in pipeline.info.params}
    missing = [p.name for p in params.values() if p.required and p.name not in given]
    if missing:
        raise SpecError(f"pipeline {pipeline.info.name!r} needs --param {missing[0]}=VALUE")
    values = {**{p.name: p.default for p in params.values() if not p.required}, **given}
    if pipeline.check is not None:
        pipeline.check(values)  # first: a shipped pipeline's own bounds say more
    for key, value in given.items():
        _check_number(params[key], value)
    return values


def _convert(param: Param, text: str) -> Any:
    kind = _KFP_TYPES.get(param.type)
    if kind is None:
        raise SpecError(f"--param {param.name}: a {param.type} parameter cannot be given on the command line")
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise SpecError(f"invalid --param {param.name}={shown(text)}: use true or false")
        return text.lower() == "true"
    if kind in (list, dict):
        return _from_json(param, text, kind)
    try:
        value = kind(text)
    except ValueError:
        raise SpecError(f"invalid --param {param.name}={shown(text)}: use {_WORDS[param.type]}, "
                        f"e.g. {param.name}={param.default if param.default is not None else 1}") from None
    if kind is float and value == 0 and re.search(r"[1-9]", text.lower().partition("e")[0]):
        # 1e-400 reads as 0.0, and a later check would name the 0.0, not what was typed
        raise SpecError(f"invalid --param {param.name}={shown(text)}: it is too small for a float (it reads as "
                        f"0.0): use a larger number, e.g. {param.name}={param.default if param.default else 1}")
    return value


def _kfp_carries(value: int | float) -> bool:
    """Whether KFP carries VALUE unchanged: it holds numbers as doubles, so a finite float, or a
    whole number no larger than 2**53 either way."""
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= MAX_EXACT_INT


def _check_number(param: Param, value: Any) -> None:
    if param.type not in ("Float", "Integer") or _kfp_carries(value):
        return
    if param.type == "Float":
        raise SpecError(f"invalid --param {param.name}={shown(value)}: use a finite number (KFP carries no nan or inf)")
    raise SpecError(f"invalid --param {param.name}={shown(value)}: use a whole number from -{MAX_EXACT_INT} to "
                        f"{MAX_EXACT_INT} (KFP carries numbers as doubles, which hold no larger one exactly)")


def _from_json(param: Param, text: str, kind: type) -> Any:
    """A List or Dict parameter as JSON, its numbers held to what KFP carries unchanged."""
    def carried(read: Callable[[str], int | float]) -> Callable[[str], int | float]:
        def number(digits: str) -> int | float:
            value = read(digits)
            if not _kfp_carries(value):
                raise ValueError(digits)
            return value
        return number

    def no_constant(name: str):
        raise ValueError(name)

    try:
        value = json.loads(text, parse_int=carried(int), parse_float=carried(float), parse_constant=no_constant)
    except (ValueError, RecursionError):  # RecursionError: thousands of nested brackets
        value = None
    if not isinstance(value, kind) or _depth(value) > MAX_JSON_DEPTH:
        raise SpecError(f"invalid --param {param.name}={shown(text)}: use {_WORDS[param.type]} (at most "
                        f"{MAX_JSON_DEPTH} levels deep, its numbers finite, whole ones from -{MAX_EXACT_INT} to "
                        f"{MAX_EXACT_INT}), e.g. {param.name}={_EXAMPLES[param.type]}")
    return value


def _depth(value: list | dict) -> int:
    """How many lists and objects deep `value` is, level by level (no recursion)."""
    depth, level = 0, [value]
    while level:
        depth += 1
        level = [v for x in level for v in (x.values() if isinstance(x, dict) else x) if isinstance(v, (list, dict))]
    return depth


def run(pipeline: Pipeline, params: dict[str, Any], *, home: Path, root: Path,
        new_id: Callable[[], str] | None = None) -> RunResult:
    """Run on this machine with kfp.local; a failed step raises JobFailedError naming it, Ctrl-C or
    SIGTERM RunInterrupted naming the jobs that go on. A shipped pipeline whose job, volume or
    snapshot names are taken on its backend (a run before it left them), or whose jobs its backend
    would refuse (steps.check_plan's dry run), is refused first, before any step runs. NEW_ID: the
    ids of the names a run makes for itself (None: steps.new_run_id's random ones)."""
    from kfp import local

    from dtrain.client import Client
    from dtrain.pipelines import steps

    plan = pipeline.plan(params) if pipeline.plan is not None else None
    new_id, client = new_id or steps.new_run_id, None
    if plan is not None:
        client = Client(home=home, backend=plan.backend, sagemaker=plan.sagemaker)
        if pipeline.fill is not None:  # the names the run makes for itself, free on its backend
            params = steps.fill_free(params, fill=pipeline.fill, plan=pipeline.plan, client=client, new_id=new_id)
            plan = pipeline.plan(params)
        for notice in plan.notices:  # a parameter given that this run does not read: said, not refused
            print(f"dtrain: warning: {notice}", file=sys.stderr)
        steps.check_plan(pipeline.info.name, plan, client=client)
    root = _make_root(Path(root))
    before = set(root.iterdir())
    failed = None
    began = datetime.now()  # kfp.local names the run's folder NAME-<the time it began>
    user_tmp = os.environ.get("TMPDIR", "")  # the jobs the steps start get it back (steps.restore_tmpdir)
    with _interruption_said(pipeline.info.name, plan, home), _step_tmpdir(root) as tmp, _steps_ended(tmp.path), \
            _environment(DTRAIN_HOME=str(home), TMPDIR=str(tmp.path), **{steps.USER_TMPDIR: user_tmp}), \
            warnings.catch_warnings(), _print_and_logging_kept(), _terminate_as_interrupt(), _step_logs(), \
            _step_lines() as printed:
        # KFP removes the workspace folder (shutil.rmtree) when a run ends, whatever is in it: a
        # folder of this run's own, never one of ROOT that a user or another run may have.
        local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root),
                   workspace_root=str(tmp.path / "workspace"))
        # The component image names a container; the subprocess runner uses this Python on purpose.
        warnings.filterwarnings("ignore", message=".*base image.*", category=RuntimeWarning)
        # Display names are for the KFP UI; the local runner says it ignores them, once per step.
        warnings.filterwarnings("ignore", message=".*have no effect in the current local runner.*")
        try:
            pipeline.func(**params)
            tmp.finished = True
        except Exception as err:  # KFP's: a failed task, or a pipeline its local runner cannot run
            failed = _ANSI.sub("", str(err)) or type(err).__name__
    run_dir = _run_dir(root, set(root.iterdir()) - before, pipeline.func.pipeline_spec.pipeline_info.name, began)
    result = RunResult(pipeline=pipeline.info.name, run_dir=run_dir or root,
                       tasks=tuple(_tasks(run_dir)) if run_dir else ())
    if failed is not None:
        task = re.search(r"Inner task failed: (.+?)\.?$", failed)
        where_ = _task_words(pipeline.func.pipeline_spec, task.group(1)) if task else ""
        why = f" at step {where_}: {_step_error(printed)}" if task else f": {cut(failed, 400)}"
        step = re.findall(r"'([^']+)'", task.group(1))[:1] if task else []
        log = next(run_dir.rglob(f"{step[0]}/{STEP_LOG}"), None) if run_dir and step else None
        where = (f"the step's log: {log}" if log else f"its outputs: {run_dir}") if run_dir else "no step left outputs"
        raise JobFailedError(f"pipeline {pipeline.info.name!r} failed{why}; {where}{_left(plan, client)}")
    return result


def _left(plan, client) -> str:
    """'; it left ...' for a failed run's line: what it made that stays (steps.left_behind), if it can be asked."""
    from dtrain.errors import DtrainError
    from dtrain.pipelines import steps

    if plan is None:
        return ""
    try:
        said = steps.left_behind(plan, client=client)
    except DtrainError:  # the backend cannot be asked now: the run's failure is the news
        return ""
    return f"; {said}" if said else ""


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


def _make_root(root: Path) -> Path:
    """--root, made if missing: one line when it cannot be (a file there, a read-only place)."""
    try:
        root = root.resolve()
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise SpecError(f"invalid --root {shown(str(root))}: it or a folder above it is a file; give a folder "
                        f"for the run's outputs") from None
    except OSError as err:
        raise SpecError(f"cannot use --root {shown(str(root))}: {cut(err.strerror or err)}; give a folder you can "
                        f"write to") from None
    return root


def _run_dir(root: Path, new: set[Path], name: str, began: datetime) -> Path | None:
    """The folder kfp.local made for this run (None if it made none): of the folders `NAME-<time>`
    made meanwhile, the first to begin once this run began. Another run in the same root (a second
    `dtrain pipeline run`) makes its folder meanwhile too: the newest folder, taken before, was that
    run's when it began last."""
    ours = []
    for path in new:
        stamp = path.name.removeprefix(f"{name}-") if path.name.startswith(f"{name}-") else ""
        try:
            when = datetime.strptime(stamp, _KFP_STAMP)
        except ValueError:
            continue
        if when >= began and path.is_dir():
            ours.append((when, path))
    return min(ours)[1] if ours else None


def _tasks(run_dir: Path) -> Iterator[TaskResult]:
    """Every task's outputs; a task inside a loop is a folder deeper (`for-loop-2-iteration-0/show`)."""
    for out in sorted(run_dir.rglob("executor_output.json"), key=lambda p: p.stat().st_mtime):
        data = json.loads(out.read_text())
        outputs = dict(data.get("parameterValues") or {})
        for name, arts in (data.get("artifacts") or {}).items():
            for art in arts.get("artifacts") or []:
                outputs[name] = art.get("metadata") or {}
        yield TaskResult(name=out.parent.relative_to(run_dir).as_posix(), outputs=outputs)


# KFP's lightweight-component command: `program_path=$(mktemp -d)`, then the step's source is
# written to "$program_path/ephemeral_component.py" and run. In a pod the folder goes with the
# container; under the local runner it stayed in /tmp, one folder per step, for good.
_KFP_PROGRAM = "ephemeral_component.py"


@dataclass
class _StepTmp:
    path: Path
    finished: bool = False  # every step ended well: no job a step started can still need the folder


@contextlib.contextmanager
def _step_tmpdir(root: Path) -> Iterator[_StepTmp]:
    """A $TMPDIR for one run's steps, under ROOT/.tmp (a folder of this run only, so no other
    run's steps can be in it). However the run ends, the folders KFP's command made there (a
    `tmp.*` folder holding only its program file and that file's bytecode) are removed; the
    folder itself goes too if that left it empty and the run finished: after a failed or
    interrupted run a step's process may not have ended yet. Anything else there stays, for the
    user to see. The jobs the steps start do not get it: steps.restore_tmpdir gives them the
    user's $TMPDIR (what they write there, torch's torchinductor_<user> cache among it, is theirs).
    What earlier runs left there is tidied first (_make_run_folder)."""
    parent = root / ".tmp"
    if parent.is_symlink():
        raise SpecError(f"{parent} is a symbolic link: remove it (a run makes that folder itself)")
    tmp, held = _make_run_folder(root, parent)
    try:
        yield tmp
    finally:
        try:
            _remove_step_programs(tmp.path, remove_folder=tmp.finished)
        finally:
            os.close(held)


def _make_run_folder(root: Path, parent: Path) -> tuple[_StepTmp, int]:
    """A new folder for this run in PARENT and its lock (an open descriptor), then what ended runs
    left there tidied: all under a lock on PARENT, so that no other run's sweep sees this folder
    between its making and its lock."""
    def refused(err: OSError) -> SpecError:  # a --root this user may not write to, a read-only file system
        return SpecError(f"cannot use --root {shown(str(root))}: making {parent} failed ({cut(err.strerror or err)}); "
                         f"give a folder you can write to")

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        parent.mkdir(exist_ok=True)
        guard = os.open(parent, flags)
    except OSError as err:
        raise refused(err) from None
    try:
        fcntl.flock(guard, fcntl.LOCK_EX)
        try:
            tmp = _StepTmp(Path(tempfile.mkdtemp(prefix="run-", dir=parent)))
            held = os.open(tmp.path, flags)
        except OSError as err:
            raise refused(err) from None
        fcntl.flock(held, fcntl.LOCK_EX)  # this run's while it lasts: _sweep_ended_runs leaves it
        _sweep_ended_runs(parent, tmp.path)
        return tmp, held
    finally:
        os.close(guard)


def _sweep_ended_runs(parent: Path, own: Path) -> None:
    """Tidy what earlier runs left in PARENT: the folder of a run killed before its own clean-up
    (SIGKILL, a lost machine) or of a failed one (kept while its steps might still run). A folder
    is another run's while that run holds its lock, and a step's while any process of this user
    has it as $TMPDIR (a step outlives a runner killed alone); those are left as they are. Of the
    rest, the same rule as at a run's end: KFP's program folders go, then the folder if empty."""
    candidates = []
    with os.scandir(parent) as entries:
        for e in entries:
            if e.name.startswith("run-") and e.name != own.name and e.is_dir(follow_symlinks=False):
                candidates.append(os.path.abspath(e.path))
    if not candidates:
        return
    in_use = _tmpdirs_in_use()
    for path in candidates:
        if path in in_use:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:  # gone meanwhile, or replaced by a link: not ours to tidy
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a run still going
                continue
            with contextlib.suppress(OSError):  # changed meanwhile: left as it is
                _remove_step_programs(Path(path), remove_folder=True)
        finally:
            os.close(fd)


def _tmpdirs_in_use() -> set[str]:
    """The $TMPDIR of every process whose start-up environment can be read (this user's)."""
    return set(_process_tmpdirs().values())


def _process_tmpdirs() -> dict[int, str]:
    """pid -> the $TMPDIR it started with, for every process whose environment can be read."""
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (tmpdir := _tmpdir_of(int(pid))) is not None:
            found[int(pid)] = tmpdir
    return found


def _tmpdir_of(pid: int) -> str | None:
    """The $TMPDIR PID started with; None without one, or when its environment cannot be read
    (another user's process, one ended meanwhile, a zombie's reads empty)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:
        return None
    for item in environ.split(b"\0"):
        if item.startswith(b"TMPDIR="):
            return os.path.abspath(os.fsdecode(item[len(b"TMPDIR="):]))
    return None


STEP_STOP_S = 5.0  # how long an interrupted run's steps get to end on SIGTERM before SIGKILL


@contextlib.contextmanager
def _steps_ended(tmp: Path) -> Iterator[None]:
    """End the steps still running when a run is interrupted. kfp.local gives a step's process a
    quarter of a second after Ctrl-C and leaves it running: killed from a terminal, the step got
    SIGINT with its process group, but after SIGTERM to `dtrain pipeline run` alone (a CI timeout,
    `kill`) a step went on by itself, following its job or waiting on it, with no one reading it.
    A step is a process that started with this run's own $TMPDIR (the jobs the steps start get
    the user's back, so they go on, as the run's message says)."""
    try:
        yield
    except BaseException:
        _end_processes_with_tmpdir(tmp)
        raise


def _end_processes_with_tmpdir(tmp: Path) -> None:
    own, me = os.path.abspath(tmp), os.getpid()
    pids = [pid for pid, where in _process_tmpdirs().items() if where == own and pid != me]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STEP_STOP_S
    while pids:
        for pid in pids:  # reap the ones that are this process's children (KFP's `sh -ec`)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        pids = [pid for pid in pids if _tmpdir_of(pid) == own]
        if not pids or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _remove_step_programs(tmp: Path, *, remove_folder: bool) -> None:
    with os.scandir(tmp) as entries:
        folders = [e.path for e in entries if e.name.startswith("tmp.") and e.is_dir(follow_symlinks=False)]
    for folder in folders:
        with contextlib.suppress(OSError):  # changed meanwhile: left as it is; the run's result stands
            files = _kfp_program_files(folder)
            if files is None:
                continue
            for path in files:
                os.unlink(path)
            with contextlib.suppress(FileNotFoundError):
                os.rmdir(f"{folder}/__pycache__")
            os.rmdir(folder)
    if remove_folder:
        with contextlib.suppress(OSError):  # not empty: a step or a job left something of its own
            tmp.rmdir()


def _kfp_program_files(folder: str) -> list[str] | None:
    """The files of FOLDER if it is what KFP's command made: its program file and, where
    Python wrote bytecode, `__pycache__/ephemeral_component.*.pyc`; else None (links included)."""
    with os.scandir(folder) as inside:
        found = {e.name: e for e in inside}
    program, cache = found.pop(_KFP_PROGRAM, None), found.pop("__pycache__", None)
    if found or program is None or not program.is_file(follow_symlinks=False):
        return None
    files = [program.path]
    if cache is not None:
        if not cache.is_dir(follow_symlinks=False):
            return None
        with os.scandir(cache.path) as inside:
            compiled = list(inside)
        if not all(e.name.startswith("ephemeral_component.") and e.name.endswith(".pyc")
                   and e.is_file(follow_symlinks=False) for e in compiled):
            return None
        files += [e.path for e in compiled]
    return files


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
def _interruption_said(name: str, plan, home: Path) -> Iterator[None]:
    """An interrupted run raises RunInterrupted saying which of its jobs go on (they run apart from
    the steps); a user's own pipeline has no plan, and `dtrain list` shows what its steps started."""
    try:
        yield
    except KeyboardInterrupt:
        if plan is None:
            raise RunInterrupted(f"pipeline {name!r} interrupted; any job its steps submitted goes on: see "
                                 f"'dtrain list'") from None
        from dtrain.client import Client
        from dtrain.errors import DtrainError
        from dtrain.pipelines import steps

        try:
            client = Client(home=home, backend=plan.backend, sagemaker=plan.sagemaker)
            said = steps.going_on(name, plan, client=client)
        except DtrainError as err:  # the backend cannot be asked now: say so, in its words
            said = f"pipeline {name!r} interrupted; its jobs could not be listed ({cut(err, 300)}): see 'dtrain list'"
        raise RunInterrupted(said) from None


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
