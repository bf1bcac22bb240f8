"""A number as the user typed it, and the walk that makes every such number plain again.

A refusal quotes what was typed ('--cpu 1e9', a job file's 0.10), not what Python read it as
(1000000000, 0.1): the number keeps its `text`. What stores or sends a number (a spec's dump, a
checkpoint, a data loader's workers) takes the plain one (`plain_numbers`).

Imports nothing from dtrain and nothing but the standard library (not torch): the spec, the CLI,
the workloads and the in-job helpers all use it, and the workloads run without the platform.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any


class Typed:
    """A number typed otherwise than Python writes it (1e9, -0, +5, 007, 0x1F, 0.10, 1e400 that is
    inf): a number where a field takes one, its `text` where a field takes a string and where a
    refusal repeats it. It pickles as the plain number (a data loader's workers, a checkpoint)."""

    _plain: type
    text: str

    def __new__(cls, value, text: str = ""):
        number = cls._plain.__new__(cls, value)
        number.text = text or (str(value) if cls._plain is int else repr(value))
        return number

    def __reduce__(self):
        return self._plain, (self._plain(self),)


class TypedInt(Typed, int):
    """A whole number as typed (Typed)."""

    _plain = int


class TypedFloat(Typed, float):
    """A float as typed (Typed)."""

    _plain = float


# A plain YAML scalar with an exponent (1e3, 2E0, 1.5e3, 1e+3): a number to YAML 1.2 and to every flag
# (float() reads it), a string to YAML 1.1 (PyYAML), whose floats need a dot and a signed exponent.
NUMBER_WORD_RE = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+", re.ASCII)


class NumberWord(str):
    """A job file's unquoted 1e3 that YAML 1.1 reads as a string (NUMBER_WORD_RE): a field that takes a
    number reads it as its flag reads `--processes 1e3` (whole_number, real_number); anywhere else (a
    command word, an env value) it is the string as typed (`plain`)."""


def typed(value, text: str):
    """`value` (an int or float read from `text`) keeping `text` where Python writes it otherwise;
    anything else (a bool, a string, a number written as Python writes it) unchanged."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or str(value) == text:
        return value
    return (TypedInt if isinstance(value, int) else TypedFloat)(value, text)


def yaml11_form(value) -> str | None:
    """Pure: the YAML 1.1 form, other than decimal digits, a number read from YAML was written in:
    'hexadecimal' (0x7000), 'binary' (0b101), 'octal' (017, which YAML 1.1 reads as 15 and YAML 1.2
    as 17), 'sexagesimal' (1:30, read as 90) or 'with _' (1_000). None for a number written in
    decimal (-5, 0.10, 1e9) and for anything else. A form
    taken silently is a port or a count the user did not mean (spec.check_yaml_numbers refuses it)."""
    if not isinstance(value, Typed) or isinstance(value, bool):
        return None
    text = value.text.lower().lstrip("+-")
    if text.startswith(("0x", "0b")):
        return "hexadecimal" if text[1] == "x" else "binary"
    if ":" in text:
        return "sexagesimal"
    if isinstance(value, int) and len(text) > 1 and text[0] == "0":
        return "octal"
    return "with _" if "_" in text else None


def whole_number(text: str) -> int | float | str:
    """The one rule for a whole number a user types as text: a CLI flag (--processes, --tail, --rank,
    --gpu-quota, ...) and an HTTP query parameter (?tail=, ?rank=, ?limit=) read it alike. The number goes
    on to the check that knows its range and names it ("invalid --processes 1.5: use a whole number from
    1 to 4096"), where int() said only "invalid int value". 1e3, 1_0 and 5. are whole (1000, 10, 5); a
    fraction, nan or inf goes on as a float, a run of digits past what int() reads as typed (the check
    refuses both); so does a word, named as typed."""
    t = text.strip()
    if not t.isascii():  # float() reads '١٢' and '１２' as 12: a word here, as a launcher's RANK=٣ is
        return text
    if re.fullmatch(r"[-+]?[0-9]{1,4000}", t, re.ASCII):  # int() takes at most 4300 digits
        return typed(int(t), t)
    if re.fullmatch(r"[-+]?[0-9]+", t, re.ASCII):
        return text
    try:
        value = float(t)
    except ValueError:  # a word: the check names it ("invalid --processes 'x': use a whole number ...")
        return text
    return whole(typed(value, t))  # refused as typed ('--processes 1e9', not 1000000000)


def whole(value):
    """`value` as the whole number it was typed as, where a float is one (a flag's `--processes 2.`, a job
    file's or a JSON body's 2.0 and 1e3: 2 and 1000, keeping their text for a refusal); anything else
    unchanged, for the check that knows its range: a fraction (2.5, and 2.0000000000000001, which float()
    reads as 2.0), nan, inf, one past 2**53 (1e300), a bool, a string."""
    if (isinstance(value, bool) or not isinstance(value, float) or not math.isfinite(value)
            or abs(value) > 2 ** 53 or exact(value).denominator != 1):
        return value
    return typed(int(value), value.text if isinstance(value, Typed) else repr(float(value)))


def real_number(text: str) -> float | str:
    """The one rule for a number of seconds (or another real) typed as text: a CLI flag's (`wait
    --timeout 600`) and an HTTP query parameter's (?timeout=, ?since=): float()'s, keeping what was typed
    for a refusal; a word stays the text, named as typed (so do other scripts' digits, '١٢')."""
    if not text.isascii():
        return text
    try:
        return typed(float(text), text.strip())
    except ValueError:
        return text


def exact(value):
    """The number `value` was typed as, exactly: a Fraction for a finite int or float, so that a bound
    is checked on what was typed ('--cpu 1024.0000000000001' is over 1024, though float() reads it as
    1024.0; '--gpu 1.0000000000000001' is a fraction). A float typed in Python (the SDK's 0.01) is
    taken as Python writes it (1/100, not the binary float just above it), so a bound written as a
    float (MIN_CPU = 0.01) compares as written too. inf, nan and anything else are returned as they
    are (NaN compares false with everything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value
    if isinstance(value, int):
        return Fraction(int(value))
    if not math.isfinite(value):
        return float(value)
    text = value.text if isinstance(value, Typed) else repr(float(value))
    try:
        number = Decimal(text) if len(text) <= 400 else None
    except (InvalidOperation, ValueError):  # a job file's sexagesimal 12:30.5: read as the float
        number = None
    if number is None or not number.is_finite() or abs(number.adjusted()) > 400:  # never a 10**999999
        return Fraction(float(value))
    return Fraction(number)


def plain(value):
    """A number of a subclass of int or float (Typed, but not bool) as the plain int or float, a
    NumberWord as the plain str; anything else unchanged."""
    if isinstance(value, bool) or type(value) in (int, float):
        return value
    if isinstance(value, NumberWord):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def plain_numbers(value: Any, *, in_place: bool = False) -> Any:
    """`value` with every number plain (`plain`), through dicts (keys too), lists and tuples (a
    namedtuple rebuilt as one); anything else (a tensor, a string) left as it is.

    `in_place`: dicts and lists are changed, not copied, so that a state_dict keeps its `_metadata`
    (torch.load(weights_only=True) refuses any class but int and float: a checkpoint holding a flag's
    `--lr 5e-2` read as damaged and a resume started over). Its keys are left: a key of a dict in
    place cannot change without rebuilding it."""
    if isinstance(value, dict):
        if not in_place:
            return {plain_numbers(k): plain_numbers(v) for k, v in value.items()}
        for key, item in value.items():
            new = plain_numbers(item, in_place=True)
            if new is not item:
                value[key] = new  # a key's value replaced: the dict's size is unchanged
        return value
    if isinstance(value, list):
        if not in_place:
            return [plain_numbers(v) for v in value]
        for i, item in enumerate(value):
            value[i] = plain_numbers(item, in_place=True)
        return value
    if isinstance(value, tuple):
        items = [plain_numbers(v, in_place=in_place) for v in value]
        if any(a is not b for a, b in zip(items, value)):
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return value
    return plain(value)
