"""A run's parameters checked before its first step (runner.py re-exports every name here):
`--param k=v` strings and the SDK's typed values held to the same rules, each of its KFP type and
within what KFP carries unchanged, defaults filling the rest.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from dtrain.errors import SpecError
from dtrain.names import cut, shown, written
from dtrain.numbers import plain

if TYPE_CHECKING:
    from dtrain.config import UserConfig
    from dtrain.pipelines.run_records import Param, Pipeline

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


def parse_params(pipeline: Pipeline, items: list[str]) -> dict[str, Any]:
    """`k=v` strings -> typed arguments; defaults fill the rest. Unknown, duplicate, bad or missing -> SpecError."""
    params = {p.name: p for p in pipeline.info.params}
    given: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep and key in params:  # `--param batch_size`: the value left out, not a key to guess at
            default = "required" if params[key].required else f"default {params[key].default!r}"
            raise SpecError(f"invalid --param {shown(item)}: give its value, {key}=VALUE ({default}; see "
                            f"'dtrain pipeline list')")
        if not sep or key not in params:
            raise SpecError(f"invalid --param {shown(item)}:{_did_you_mean(key, params)} use KEY=VALUE with KEY "
                            f"one of {', '.join(params)}")
        if key in given:
            raise SpecError(f"--param {key} is given twice: give it once")
        given[key] = _convert(params[key], text)
    return _completed(pipeline, given)


def with_backend(pipeline: Pipeline, items: list[str], backend: str | None, *, saved: str | None = None) -> list[str]:
    """`--param` items with `dtrain --backend NAME` as the pipeline's backend parameter (hybrid-cifar10's
    training_runtime, lane-detection's backend) where none was given: the flag was ignored, and the run went
    where the parameter's default said. A --module pipeline's steps name their own backends, and a --param
    that says another one contradicts the flag: both refused. `saved`: the default backend config.yaml
    gives the project the steps' jobs go to (`dtrain config backend NAME`), which sets the parameter as the
    flag does where the flag is not given (it was ignored too); a --param says otherwise, and a --module
    pipeline keeps its own parameters."""
    param = pipeline.backend_param
    if backend is None:
        if saved is None or param is None or any(item.partition("=")[0] == param for item in items):
            return items
        return [*items, f"{param}={saved}"]
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


def saved_backend(config: UserConfig) -> tuple[str, str]:
    """The default backend config.yaml gives the default project (the one the steps' jobs go to), and
    the words that saved it ('config backend NAME', with -p PROJECT where it is that project's own)."""
    project = config.project
    saved = config.backend_for(project)
    return saved, f"config backend {saved}" + (f" -p {project}" if project in config.project_backends else "")


def with_saved_backend(pipeline: Pipeline, given: Any, saved: str) -> Any:
    """The SDK's `params` with the saved default backend as a shipped pipeline's backend parameter where
    they do not name it (as with_backend does for the command line); anything else as given."""
    param = pipeline.backend_param
    if param is None or not isinstance(given, Mapping) or param in given:
        return given
    return {**given, param: saved}


def saved_backend_refused(err: SpecError, pipeline: Pipeline, saved: str, how: str, fix: str) -> SpecError | None:
    """The refusal of the backend a saved default set (a BackendRefused naming `saved`) as one line
    saying where it came from (`how`: the words that saved it) and `fix`, the way to run elsewhere;
    None for any other refusal."""
    from dtrain.pipelines.run_records import BackendRefused

    if pipeline.backend_param is None or not (isinstance(err, BackendRefused) and err.value == saved):
        return None
    return SpecError(f"{err}; {saved} is the default backend saved with 'dtrain {how}': {fix} to run this "
                     f"pipeline elsewhere")


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
    return {key: plain(value) for key, value in values.items()}  # a --param's number as typed only in refusals


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
        value = written(kind(text), text.strip())  # a refusal quotes threshold=2 as 2, lr=1e99 as 1e99
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

