"""How a message says things, the same way everywhere: a user's value repeated (shown, at most SHOWN
characters), a number and its noun (counted, noun, them, listed), a message from elsewhere on one line
(cut), the hints of the CLI's and the workloads' parsers (abbreviated, near_choice, with_near), a
typed record as a notebook cell shows it (given_repr: the fields given, not every default), and an
argument as each door names it (FLAGS: named, given_as, switched; a whole sentence: door_words).

dtrain.names re-exports every name here (its callers import them from there); this module imports
nothing of dtrain but dtrain.numbers, so names, the spec and the workloads all share it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from dtrain.numbers import Typed

SHOWN = 80  # the most characters of a user's value an error message repeats


def shown(value) -> str:
    """`value` as an error message repeats it: its repr, at most SHOWN characters ('...' where cut);
    a number as it was written (WrittenInt, WrittenFloat: '1e9', not 1000000000).

    Built piece by piece (reprlib), so a huge value (a list that YAML aliases multiply, a
    10**5000) costs no more than its first few items: no message grows with its input."""
    import reprlib  # only refusals need it

    if isinstance(value, Typed) and len(value.text) <= SHOWN:
        return value.text  # a longer one is named by its size below, as a plain one is
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"{'-' if value < 0 else ''}<a whole number of about {round(value.bit_length() * 0.30103)} digits>"
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong = 3, SHOWN, SHOWN, 40
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = short.maxfrozenset = 6
    text = short.repr(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def counted(n: int, one: str, many: str | None = None, *, typed: str | None = None) -> str:
    """`n` and its noun, as a message says it: '1 GPU', '2 GPUs', '1 process', '4 processes'; `typed`:
    the number as the user typed it ('1E3'), shown in place of `n`."""
    return f"{n if typed is None else typed} {noun(n, one, many)}"


def noun(n: int, one: str, many: str | None = None) -> str:
    """The noun in the number `n` asks for: 'job' for 1, 'jobs' otherwise (no message writes the
    plural in brackets)."""
    return one if n == 1 else many or one + "s"


def them(items: Iterable, word: str = "them") -> str:
    """The pronoun (`word`: 'them', 'their', 'they') for `items` in their number: 'it', 'its' or 'it'
    for one ("wait for it", not "wait for them", of a single job)."""
    return {"them": "it", "their": "its", "they": "it"}[word] if len(list(items)) == 1 else word


def listed(items: Iterable, one: str, many: str | None = None) -> str:
    """Names after their noun in its number, as a message lists them: 'job a', 'jobs a, b'."""
    items = list(items)
    return f"{noun(len(items), one, many)} {', '.join(map(str, items))}"


def abbreviated(word: str, options: list[str]) -> str:
    """'flags are not abbreviated: ...' for `--ti`, the start of --timeout and --tier (argparse took a
    start of one flag for it, as kubectl and runai do not); '' for a word that starts no flag. The CLI's
    parser and the workloads' (which run without it) both say it."""
    flag = word.split("=", 1)[0]
    whole = [o for o in options if flag.startswith("--") and len(flag) > 2 and o.startswith(flag)]
    if not whole or flag in options:
        return ""
    value = word[len(flag):]
    return f"flags are not abbreviated: give {' or '.join(o + value for o in whole[:4])}"


def near_choice(message: str) -> str | None:
    """argparse's "invalid choice: 'sumbit' (choose from ...)" with the choice meant in place of the
    list (for a verb, 25 words that hide it), or None when no choice is near the word typed. The CLI's
    parser and the workloads' (`--recipe tinny`) both say it."""
    said = re.fullmatch(r"(argument .+: invalid choice: '(.*)') \(choose from (.*)\)", message)
    if said is None:
        return None
    near = difflib.get_close_matches(said[2], re.findall(r"'([^']*)'", said[3]), n=1, cutoff=0.6)
    return f"{said[1]}: did you mean '{near[0]}'?" if near else None


def cut(text: str, limit: int = 120) -> str:
    """A message from elsewhere (YAML's, Python's: they may quote the input) on one line of at
    most `limit` characters."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def with_near(message: str, name: str, near: str) -> str:
    """`message` with ' (did you mean NEAR?)' right after the first place it quotes `name`
    ("no job named 's' (did you mean 's1'?); see ..."); unchanged when it does not quote it."""
    quoted = repr(name)
    at = message.find(quoted)
    if at < 0:
        return message
    at += len(quoted)
    return f"{message[:at]} (did you mean {near!r}?){message[at:]}"


def given_repr(record, *, unset: Iterable[str] = ()) -> str:
    """`Name(field=value, ...)` of a dataclass record with the fields that differ from their defaults,
    in field order, as a SageMaker Estimator's user reads a spec; the fields named in `unset` (left to be
    filled in, though they hold a value) are left out too. `to_dict()` stays the whole record."""
    given = ", ".join(f"{name}={getattr(record, name)!r}" for name in given_fields(record, unset=unset))
    return f"{type(record).__name__}({given})"


def given_fields(record, *, unset: Iterable[str] = ()) -> list[str]:
    """The names of a dataclass record's fields that hold other than their defaults, in field order,
    but those in `unset`."""
    import dataclasses

    unset = set(unset)
    given = []
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        if f.name in unset or not f.repr:
            continue
        if f.default is not dataclasses.MISSING and _same(value, f.default):
            continue
        if f.default_factory is not dataclasses.MISSING and _same(value, f.default_factory()):
            continue
        given.append(f.name)
    return given


def _same(value, default) -> bool:
    """Whether `value` is its field's `default`: equal, and of its kind (a True is not a default 1)."""
    return type(value) is type(default) and value == default or value is default


# Each argument a refusal names, as each door spells it: the SDK's own argument (cpu), or the CLI's flag
# (--cpu), which the HTTP API's refusals name too (it answers as the CLI); a job file's field is named as
# written there (FileDoor). Every refusal
# told apart by door looks its argument up here (named, given_as, switched); an argument not here is its
# flag with dashes (a SageMaker option's instance_type, --instance-type; a setting's security_groups). A
# refusal whose sentence differs by more than a name says each door's in door_words.
FLAGS = {"cpu": "--cpu", "memory": "--memory", "idle_timeout": "--idle-timeout", "limit_bytes": "--limit-bytes",
         "working_dir": "--working-dir", "image": "--image", "image_pull_policy": "--image-pull-policy",
         "tail": "-t", "rank": "--rank", "timeout": "--timeout", "processes": "--processes", "gpu": "--gpu",
         "max_restarts": "--max-restarts", "previous": "--previous", "follow": "-f",
         "checkpoint_uri": "--checkpoint-s3-uri", "channels": "--channel"}


class FileDoor(str):
    """The CLI's door for a job read from a file (`submit -f job.yaml`): a field the file gave (`fields`) is
    named as written there (processes:, e.g. processes: 4), one it gave in a block (`nested`: max_wait ->
    sagemaker) as written there too (sagemaker: max_wait:, e.g. sagemaker: {max_wait: 7200}), one a flag
    gave as its flag, and a refusal that names the file's field says which file (said). Equal to "cli", so
    every other choice by door is the CLI's."""

    source: str
    fields: frozenset[str]
    nested: Mapping[str, str]

    def __new__(cls, source: str, fields: Iterable[str], nested: Mapping[str, str] | None = None) -> "FileDoor":
        door = super().__new__(cls, "cli")
        door.source, door.fields, door.nested = source, frozenset(fields), dict(nested or {})
        return door

    def said(self, words) -> str:
        """`words(self)`, a refusal worded by door (errors.Worded), led by the file's name where it names a
        field the file gave (as yaml_file's refusals are)."""
        text = words(self)
        return f"{self.source}: {text}" if text != words("cli") else text


def _in_file(arg: str, door: str) -> bool:
    return isinstance(door, FileDoor) and (arg in door.fields or arg in door.nested)


def _block(arg: str, door: str) -> str | None:
    """The job file's block that gave `arg` (sagemaker for its max_wait), None for a field of its own."""
    return door.nested.get(arg) if isinstance(door, FileDoor) and arg not in door.fields else None


def named(arg: str, door: str = "sdk") -> str:
    """Argument `arg` (FLAGS' key) as a refusal from `door` names it: cpu from the SDK, processes: from a
    job file that gave it (FileDoor), --cpu elsewhere."""
    if _in_file(arg, door):
        return f"{block}: {arg}:" if (block := _block(arg, door)) else f"{arg}:"
    return arg if door == "sdk" else FLAGS.get(arg, "--" + arg.replace("_", "-"))


def given_as(arg: str, value: str, door: str = "sdk", *, quoted: bool = False) -> str:
    """`arg` given `value`, as an example in a refusal from `door` writes it: cpu=2, --cpu 2; `quoted`: a
    string, which the SDK's example writes as Python does (memory='3Gi', --memory 3Gi); a job file's
    field as YAML does (processes: 4)."""
    if (block := _block(arg, door)) is not None:
        return f"{block}: {{{arg}: {value}}}"
    return f"{arg}={value!r}" if door == "sdk" and quoted else f"{arg}={value}" if door == "sdk" else \
        f"{named(arg, door)} {value}"


def switched(arg: str, door: str = "sdk") -> str:
    """A switch `arg` turned on, as a refusal from `door` writes it: previous=True, --previous."""
    if (block := _block(arg, door)) is not None:
        return f"{block}: {{{arg}: true}}"
    return f"{arg}=True" if door == "sdk" else f"{arg}: true" if _in_file(arg, door) else named(arg, door)


def door_words(door: str, *, cli: str, sdk: str, file: str | None = None, of: str = "") -> str:
    """A refusal whose sentence differs by door by more than a name (named, given_as and switched say those):
    `sdk` from the SDK, `cli` from the CLI and the HTTP API, which answer in its words, and from a job file,
    but `file` where the job file gave field `of` (FileDoor: add launcher: torchrun, not --launcher)."""
    return sdk if door == "sdk" else file if file is not None and _in_file(of, door) else cli
