"""Check a request against botocore's own service model before anything is sent.

botocore's ParamValidator checks required members, unknown names, types and minimums; the
walker below adds what it leaves to the server: maximum lengths and values, enums and the
regular-expression patterns of the model. Both read the model shipped with botocore (offline).
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache

from dtrain.errors import SpecError
from dtrain.names import shown


@lru_cache(maxsize=8)
def service_model(service: str):
    """The model as botocore ships it (and AWS_DATA_PATH adds), read without a session: a profile
    that does not exist or a config file that does not parse is no reason to refuse a dry run or
    a `--local` job (the AWS clients report those, in one line, when they are made)."""
    import os

    import botocore.loaders  # lazy: boto3/botocore is the optional 'sagemaker' extra
    import botocore.model

    data = botocore.loaders.create_loader(os.environ.get("AWS_DATA_PATH")).load_service_model(service, "service-2")
    return botocore.model.ServiceModel(data, service_name=service)


def check_enum(service: str, shape: str, owner: str, value: str, flag: str) -> None:
    """SpecError unless `value` is one of the model's values for `shape` (a setting saved for later
    jobs is checked as their requests will be); nothing to check without botocore."""
    import importlib.util
    if importlib.util.find_spec("botocore") is None:
        return
    choices = service_model(service).shape_for(shape).enum
    if choices and value not in choices:
        raise SpecError(_not_one_of(flag, value, choices, _reference(service, owner)))


def check_request(service: str, operation: str, params: dict) -> None:
    """Raise SpecError naming every way `params` breaks the operation's input shape."""
    from botocore.validate import ParamValidator
    shape = service_model(service).operation_model(operation).input_shape
    report = ParamValidator().validate(params, shape)
    problems = [report.generate_report()] if report.has_errors() else []
    problems += list(_walk(shape, params, operation, service))
    if problems:
        raise SpecError(f"{service} {operation} request is invalid: " + "; ".join(problems))


def _walk(shape, value, path: str, service: str, owner: str = ""):
    """`owner`: the structure whose member `shape` is (where the API reference lists an enum)."""
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                yield from _walk(member, value[name], f"{path}.{name}", service, shape.name)
    elif kind == "list" and isinstance(value, list):
        yield from _bounds(shape.metadata, len(value), path, "items")
        for i, item in enumerate(value):
            yield from _walk(shape.member, item, f"{path}[{i}]", service, owner)
    elif kind == "map" and isinstance(value, dict):
        yield from _bounds(shape.metadata, len(value), path, "entries")
        for k, v in value.items():
            yield from _walk(shape.key, k, f"{path} key {k!r}", service, owner)
            yield from _walk(shape.value, v, f"{path}[{k!r}]", service, owner)
    elif kind == "string" and isinstance(value, str):
        yield from _bounds(shape.metadata, len(value), path, "characters")
        pattern = shape.metadata.get("pattern")
        if pattern and not _regex(pattern).fullmatch(value):
            yield f"{path}={value!r} does not match {pattern}"
        if shape.enum and value not in shape.enum:
            yield _not_one_of(path, value, shape.enum, _reference(service, owner))
    elif kind in ("integer", "long") and isinstance(value, int):
        if "max" in shape.metadata and value > shape.metadata["max"]:
            yield f"{path}={value} is above {shape.metadata['max']}"


SHOWN_CHOICES = 8  # an enum this long is listed whole; SageMaker's 225 instance types made a 3.9 KB line


def _not_one_of(path: str, value: str, choices: list[str], reference: str) -> str:
    if len(choices) <= SHOWN_CHOICES:
        return f"{path}={value!r} is not one of {', '.join(choices)}"
    close = difflib.get_close_matches(value, choices, n=5)
    guess = f"did you mean {', '.join(close)}? " if close else ""
    return f"{path}={shown(value)} is not one of its {len(choices)} values: {guess}all are listed at {reference}"


def _reference(service: str, owner: str) -> str:
    """Where AWS documents a structure's members (SageMaker's pages list each enum's values)."""
    if service == "sagemaker" and owner:
        return f"https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_{owner}.html"
    return f"the {service} API reference ({owner or 'the request'})"


def _bounds(meta: dict, n: int, path: str, what: str):
    if "max" in meta and n > meta["max"]:
        yield f"{path} has {n} {what}, more than {meta['max']}"


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern:
    # The models use Java regexes; their \p{...} classes are the one difference in the shapes
    # we send. They only ever appear inside [...], so each becomes the body of a Python class:
    # letters and numbers (\p{L}, \p{N}) -> \w (Unicode-aware), separators (\p{Z}) -> \s.
    for java, py in ((r"\p{XDigit}", "0-9a-fA-F"), (r"\p{Alnum}", "A-Za-z0-9"), (r"\p{L}", "\\w"),
                     (r"\p{Z}", "\\s"), (r"\p{N}", "\\w")):
        pattern = pattern.replace(java, py)
    return re.compile(pattern)
