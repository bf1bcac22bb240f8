"""Find, describe, compile and run pipelines: what `dtrain pipeline list|compile|run` call.

Compiling uses KFP's own compiler (the IR YAML a KFP 2 server takes). Running uses KFP's local
runner, `kfp.local.SubprocessRunner(use_venv=False)`: every step is a real subprocess in this
machine's Python environment, and the steps reach dtrain through $DTRAIN_HOME, which the run
sets for them (they inherit the environment). Their $TMPDIR is a folder of the run's own, emptied
of what KFP's component command leaves behind when the run ends (see _step_tmpdir); the jobs they
start get the user's $TMPDIR back. A shipped pipeline's names (jobs, volumes, snapshots) are
checked on its backend before the first step (steps.check_plan).

Here: finding, describing, compiling and running, and reading a run's folder. Beside it, each
name re-exported here: run_records.py (the typed records), run_params.py (the parameters checked
before a run), run_io.py (the steps' logs and printed lines, signals, environment) and run_tmp.py
(the steps' $TMPDIR and their processes).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

from dtrain.errors import JobFailedError, NotFoundError, SetupError, SpecError
from dtrain.names import cut, listed, near_name, shown
from dtrain.pipelines.run_io import (_CHANNEL, _KFP_GROUP, _PY_ERROR, STEP_LOG, _environment,  # noqa: F401
                                     _print_and_logging_kept, _step_error, _step_lines, _step_log_path, _step_logs,
                                     _task_words, _terminate_as_interrupt)  # (re-exported)
from dtrain.pipelines.run_params import (_EXAMPLES, _KFP_TYPES, _WORDS, MAX_EXACT_INT, MAX_JSON_DEPTH,  # noqa: F401
                                         _check_number, _completed, _convert, _depth, _did_you_mean, _from_json,
                                         _kfp_carries, check_params, parse_params, saved_backend,
                                         saved_backend_refused, with_backend, with_saved_backend)  # (re-exported)
from dtrain.pipelines.run_records import (BackendRefused, Param, Pipeline, PipelineInfo,  # noqa: F401
                                          RunInterrupted, RunResult, TaskResult)  # (re-exported)
from dtrain.pipelines.run_tmp import (_KFP_PROGRAM, STEP_STOP_S, _end_processes_with_tmpdir,  # noqa: F401
                                      _kfp_program_files, _make_run_folder, _process_tmpdirs, _remove_step_programs,
                                      _step_tmpdir, _steps_ended, _StepTmp, _sweep_ended_runs, _tmpdir_of,
                                      _tmpdirs_in_use)  # (re-exported)
from dtrain.replace import replace_file

SHIPPED = {  # name -> "module:function"; each module also has check, plan, fill and BACKEND_PARAM
    "hybrid-cifar10": "dtrain.pipelines.hybrid:hybrid_cifar10",
    "lane-detection": "dtrain.pipelines.lanes:lane_detection",
}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_KFP_STAMP = "%Y-%m-%d-%H-%M-%S-%f"  # kfp.local's run folders: NAME-<datetime.now() in this form>


def import_kfp():
    try:
        import kfp
    except ImportError:
        raise SetupError("pipelines need the KFP SDK: pip install 'dtrain[pipelines]'") from None
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
        from kfp.dsl.graph_component import GraphComponent  # what @dsl.pipeline makes (a component is none)

        found = sorted(name for name, value in vars(mod).items() if isinstance(value, GraphComponent))
        near = near_name(attr, found)
        its = f"did you mean {near!r}?" if near else (
            f"its @dsl.pipeline {listed(found, 'function')}: use {'it' if len(found) == 1 else 'one of them'}"
            if found else "it has no @dsl.pipeline function: decorate yours with @dsl.pipeline")
        what = f"{attr!r} is not a @dsl.pipeline function" if func is not None else f"there is no {attr!r}"
        raise SpecError(f"--module {shown(ref)}: {what} in {Path(path).name}; {its}")
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
    defaults fill the rest, but for a shipped pipeline's backend parameter: where `params` do not name
    it, the default backend saved in HOME's config.yaml for its default project (`dtrain config
    backend`), as `dtrain pipeline run` takes it. Step outputs go under `root` (default HOME/pipelines)."""
    from dtrain.config import UserConfig, home_dir

    pipeline = load(name, module=module)
    home = home_dir(home)
    given = {} if params is None else params
    saved, how = saved_backend(UserConfig.load(home))
    completed = with_saved_backend(pipeline, given, saved)
    try:
        values = check_params(pipeline, completed)
    except SpecError as err:  # the saved default's refusal says so; one a params entry named is as it is
        refused = None if completed is given else \
            saved_backend_refused(err, pipeline, saved, how, f"give params={{{pipeline.backend_param!r}: BACKEND}}")
        if refused is None:
            raise
        raise refused from None
    return run(pipeline, values, home=home, root=Path(root) if root else home / "pipelines")



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
