"""Check a request against botocore's own service model before anything is sent.

botocore's ParamValidator checks required members, unknown names, types and minimums; the
walker below adds what it leaves to the server: maximum lengths and values, enums and the
regular-expression patterns of the model. Both read the model shipped with botocore (offline).
"""

from __future__ import annotations

import re
from functools import lru_cache

from dtrain.errors import SpecError


@lru_cache(maxsize=8)
def service_model(service: str):
    import botocore.session  # lazy: boto3/botocore is the optional 'sagemaker' extra
    return botocore.session.get_session().get_service_model(service)


def check_request(service: str, operation: str, params: dict) -> None:
    """Raise SpecError naming every way `params` breaks the operation's input shape."""
    from botocore.validate import ParamValidator
    shape = service_model(service).operation_model(operation).input_shape
    report = ParamValidator().validate(params, shape)
    problems = [report.generate_report()] if report.has_errors() else []
    problems += list(_walk(shape, params, operation))
    if problems:
        raise SpecError(f"{service} {operation} request is invalid: " + "; ".join(problems))


def _walk(shape, value, path: str):
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for name, member in shape.members.items():
            if name in value:
                yield from _walk(member, value[name], f"{path}.{name}")
    elif kind == "list" and isinstance(value, list):
        yield from _bounds(shape.metadata, len(value), path, "items")
        for i, item in enumerate(value):
            yield from _walk(shape.member, item, f"{path}[{i}]")
    elif kind == "map" and isinstance(value, dict):
        yield from _bounds(shape.metadata, len(value), path, "entries")
        for k, v in value.items():
            yield from _walk(shape.key, k, f"{path} key {k!r}")
            yield from _walk(shape.value, v, f"{path}[{k!r}]")
    elif kind == "string" and isinstance(value, str):
        yield from _bounds(shape.metadata, len(value), path, "characters")
        pattern = shape.metadata.get("pattern")
        if pattern and not _regex(pattern).fullmatch(value):
            yield f"{path}={value!r} does not match {pattern}"
        if shape.enum and value not in shape.enum:
            yield f"{path}={value!r} is not one of {', '.join(shape.enum)}"
    elif kind in ("integer", "long") and isinstance(value, int):
        if "max" in shape.metadata and value > shape.metadata["max"]:
            yield f"{path}={value} is above {shape.metadata['max']}"


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
