"""PATCH bodies applied as the API server applies them (the fake server serves PVC patches with it,
and the render tests validate a patched object): a JSON Patch (RFC 6902) or a JSON merge patch."""

from __future__ import annotations

import json


def apply_patch(obj: dict, patch: list | dict) -> dict:
    """A copy of `obj` with a JSON Patch (add, replace, remove on object members and array elements, an
    add at `/-` appending) or a JSON merge patch applied, as the API server would for those content types."""
    out = json.loads(json.dumps(obj))
    if isinstance(patch, dict):
        def merge(target: dict, change: dict) -> None:
            for k, v in change.items():
                if v is None:
                    target.pop(k, None)
                elif isinstance(v, dict) and isinstance(target.get(k), dict):
                    merge(target[k], v)
                else:
                    target[k] = v
        merge(out, patch)
        return out
    for op in patch:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        where = out
        for part in parents:
            where = where[_index(where, part)] if isinstance(where, list) else where[part]
        if isinstance(where, list):  # RFC 6902 4.1: add inserts at an index, '-' appends; others need one there
            at = len(where) if last == "-" and op["op"] == "add" else _index(where, last, room=op["op"] == "add")
            if op["op"] == "add":
                where.insert(at, op["value"])
            elif op["op"] == "replace":
                where[at] = op["value"]
            elif op["op"] == "remove":
                del where[at]
            else:
                raise ValueError(f"unsupported op {op['op']!r}")
        elif op["op"] in ("add", "replace"):
            if op["op"] == "replace" and last not in where:
                raise KeyError(f"{op['path']} does not exist")
            where[last] = op["value"]
        elif op["op"] == "remove":
            del where[last]
        else:
            raise ValueError(f"unsupported op {op['op']!r}")
    return out


def _index(array: list, token: str, *, room: bool = False) -> int:
    """An array index of a JSON Pointer (RFC 6901: digits, no leading zero) that is in `array`, or one
    past its end where `room` (an add there appends)."""
    if not token.isdigit() or (token != "0" and token.startswith("0")):
        raise IndexError(f"{token!r} is not an array index")
    if int(token) > len(array) - (not room):
        raise IndexError(f"index {token} is out of range of an array of {len(array)}")
    return int(token)
