"""Names and sizes, checked the same way by every part of dtrain (Kubernetes rules): kept
apart from the job spec so that the storage layer imports only this.

Each naming rule is written here once: object names, storage-class names, quantities, and
the names dtrain gives to what it makes for a job (`pvc-<job>-<i>`).
"""

from __future__ import annotations

import contextvars
import difflib
import re
from collections.abc import Iterable
from decimal import Decimal
from fractions import Fraction
from math import ceil, inf

from dtrain.errors import NotFoundError, SpecError
from dtrain.numbers import TypedFloat, TypedInt, plain, typed
# how a message says things: dtrain.wording's, every name still dtrain.names.NAME for its callers
from dtrain.wording import (FLAGS, SHOWN, abbreviated, counted, cut, door_words, given_as, given_fields,  # noqa: F401
                            given_repr, listed, named, near_choice, noun, shown, switched, them, with_near)

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
MAX_NAME = 53  # NAME_RE's bound
# NAME_RE in words, as check_name and the CLI's '-x' (neither an option nor a name) say it
NAME_RULE = (f"1-{MAX_NAME} lower-case letters, digits or '-', starting and ending with a letter or digit "
             f"(e.g. 'train-lanes-1')")
# A Kubernetes quantity: a number (12, 1.5, .5, 5.) and a binary suffix, a decimal exponent (1e3,
# 1E-3) or a decimal suffix (group 1 the number, group 2 the suffix). 'K' is not Kubernetes' but
# dtrain has always taken it for 'k'.
SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[eE][-+]?[0-9]+|[numkKMGTPE])?$")
# A StorageClass name: a DNS-1123 subdomain, dot-separated labels that start and end with a letter or
# digit. Its 253-character bound is check_storage_class's: Rust's regex (the HTTP schema) has no lookahead.
CLASS_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# check_mounted_volume's rule as one pattern (the HTTP API's schema): a volume name, or a dotted claim's
CLAIM_RE = re.compile(rf"^(?:{NAME_RE.pattern[1:-1]}|{CLASS_RE.pattern[1:-2]}+)$")
MAX_CLASS = 253
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_EXPONENTS = {None: "0", "n": "-9", "u": "-6", "m": "-3", "k": "3", "K": "3", "M": "6", "G": "9", "T": "12",
              "P": "15", "E": "18"}  # decimal suffixes, read by float() as exponents: 4194304000m is 4Mi exactly
MAX_PAGE = 1000  # records in one page of a list (`Client.page`, `page_volumes`, ...: the HTTP lists' `limit`)
MAX_OFFSET = 10_000_000  # records skipped before a page: bounded, and far beyond any job table
MAX_GPU_QUOTA = 1_000_000  # a project's GPU quota (`dtrain project create --gpu-quota`, the HTTP API's gpu_quota)
MAX_LIMIT_BYTES = 2**60  # `logs --limit-bytes` (the SDK's and HTTP API's limit_bytes): 1Ei, past any log
MAX_TAIL = 10**9  # lines of `logs --tail`: more than any log holds, and a number every backend can pass on
# MAX_PROCESSES is the one bound on a job's processes: submit, submit-dist, the pipelines'
# `processes` parameter and docs/reliability.md all say this number (dtrain.spec re-exports it).
MAX_PROCESSES = 4096
MAX_WAIT = 366 * 86400  # `wait --timeout` (Client.wait's timeout): a year and a day, past any training run
EXEC_RUNNING_WAIT = 60.0  # exec's wait for a Pending job or a process being launched: kubectl exec's --pod-running-timeout
MAX_HTTP_WAIT = 600  # the HTTP API's /wait?timeout=: a request holds a thread that long at most
MAX_TIME = 253_402_300_799.0  # the last unix time an RFC 3339 stamp can name (9999-12-31T23:59:59Z)
# The numbers of `dtrain logs` and `dtrain wait` are refused in the CLI's words by every door (CLI,
# SDK, HTTP query); only what a door spells its own way differs: how it asks for every line, every
# rank (the CLI's -1 and 'all', the SDK's None, a query left out) or a duration (the CLI's alone).
EVERY = {"cli": ("-1", "'all'"), "sdk": ("None", "None"), "http": ("leave it out", "leave it out")}


# A number as the user wrote it where Python writes it back otherwise (a job file's 017, 0x1F,
# 1_000, 12:30 (750), 0.10; a flag's 1e3 or -0): dtrain.numbers holds the one class pair and walk.
WrittenInt, WrittenFloat, written = TypedInt, TypedFloat, typed  # their names here since before it


def check_name(name: str, what: str = "job") -> str:
    """Names follow Kubernetes DNS-1123 labels so every backend accepts them unchanged."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise SpecError(
            f"invalid {what} name {shown(name)}: use {NAME_RULE}")
    return name


def name_list(value, what: str, example: str) -> tuple[str, ...]:
    """Names an SDK argument takes as one string or a list, tuple or set of strings (`unset='vpc'` is
    one name, not its characters); anything else (None, a number, a Path, bytes, a mapping) is one
    SpecError line naming `what`, not a TypeError from inside."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SpecError(f"invalid {what} {shown(value)}: give a name or a list of names, e.g. {example}")


def check_storage_class(name: str) -> str:
    """A storage class: 'local' on the local backend, a StorageClass name on Kubernetes."""
    return check_subdomain(name, "storage class", "'local' or 'fast.nvme'")


def check_subdomain(name: str, what: str, example: str, *, term: str = "") -> str:
    """A name Kubernetes checks as a DNS-1123 subdomain (a StorageClass, a scheduler, a
    VolumeSnapshotClass); `term` follows the rule in the message, e.g. ' (a DNS-1123 subdomain)'."""
    if not isinstance(name, str) or len(name) > MAX_CLASS or not CLASS_RE.fullmatch(name):
        raise SpecError(f"invalid {what} {shown(name)}: use at most {MAX_CLASS} lower-case letters, digits, "
                        f"'-' or '.', each '.'-separated part starting and ending with a letter or digit{term}, "
                        f"e.g. {example}")
    return name


def check_mounted_volume(name) -> str:
    """The volume a job mounts (--pvc NAME:MOUNT): a dtrain volume's name (check_name), or an existing
    Kubernetes claim's full name, which Kubernetes checks as a DNS-1123 subdomain and so may have dots
    (one another tool made, e.g. 'data.v1': Run:AI's --existing-pvc takes it). dtrain's volume verbs name
    volumes as labels, so a dotted claim is mounted only; a local job refuses it (dotted_volume_refusal)."""
    if isinstance(name, str) and "." in name:
        return check_subdomain(name, "volume name", "'data.v1'", term=" (an existing Kubernetes claim's full name)")
    return check_name(name, "volume")


def is_claim_name(name: str) -> bool:
    """Whether `name` is a claim another tool made (a dot, which no dtrain volume name has): one
    dtrain mounts (--pvc NAME:MOUNT) and shows, and never changes (claim_refusal)."""
    return isinstance(name, str) and "." in name


def claim_refusal(name: str, verb: str, kubectl: str, cmd=lambda words: f"dtrain {words}") -> str:
    """Why `verb` leaves another tool's claim alone, the verbs that take it (`cmd`: as a hint names
    them), and the command that does it (`kubectl`): as Run:AI's --existing-pvc, the claim's life is
    the tool's that made it."""
    return (f"volume {name!r} is a claim another tool made (its name has a '.'), which a job mounts (--pvc "
            f"{name}:MOUNT) and '{cmd(f'volume describe {name}')}' and '{cmd('volume list')}' show, but which only "
            f"that tool may {verb}: use it, or {kubectl}")


def dotted_volume_refusal(name: str, mount_path: str) -> str:
    """Why a local job cannot mount `name`, and the fix: a dotted name is only ever a Kubernetes claim's."""
    other = name.replace(".", "-")[:MAX_NAME].strip("-") or "data"
    return (f"invalid volume name {name!r} for a local job: a local volume's name is 1-{MAX_NAME} lower-case letters, "
            f"digits or '-', no '.' (a dotted name is an existing Kubernetes claim's, mounted with --backend kubernetes); "
            f"make a local one ('dtrain volume create {other}') and mount it: --pvc {other}:{mount_path}")


# Set while a spec is read back from where a backend kept it (JobSpec.from_stored): such a spec was
# checked when it was submitted, and the rules made stricter since (the env-name rule, the lowest
# --cpu and --memory, 2026-12-02; efs/fsx channel paths) must not make a stored job unreadable, so
# it can still be listed, described and deleted.
STORED = contextvars.ContextVar("dtrain_spec_stored", default=False)

MAX_SIZE = 2**60  # 1Ei: above any disk or memory; keeps the numbers parse_size works with small
MAX_QUANTITY_TEXT = 64  # characters of a quantity: '1.5Gi' is five
_EXPONENT_CLAMP = 200  # past MAX_QUANTITY_TEXT digits and 1Ei's 19 either way: the same bounds, the same ceil


def check_gpu_quota(value, what: str = "--gpu-quota") -> int:
    """A project's GPU quota: a whole number from 0 to MAX_GPU_QUOTA. `what` names it where it was
    given: the CLI's flag (and the HTTP API's, which answers as the CLI), or the SDK's argument."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPU_QUOTA:
        raise SpecError(f"invalid {what} {shown(value)}: use a whole number from 0 to {MAX_GPU_QUOTA}, e.g. "
                        f"{what}{' ' if what.startswith('-') else '='}8")
    return plain(value)


def check_limit_bytes(value, door: str) -> int:
    """kubectl logs' --limit-bytes: a whole number of bytes from 1 to MAX_LIMIT_BYTES, refused naming it
    as `door` does (the SDK's limit_bytes=, the CLI's flag, which the HTTP API's answer names too)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT_BYTES:
        whole = "None, the default, for the whole log" if door == "sdk" else "leave it out for the whole log"
        raise SpecError(f"invalid {named('limit_bytes', door)} {shown(value)}: use a number of bytes from 1 to "
                        f"{MAX_LIMIT_BYTES} ({whole}), e.g. {given_as('limit_bytes', '10000', door)}")
    return plain(value)


def check_port(value) -> int:
    """`dtrain server --port`: a TCP port, 0 for any free one."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise SpecError(f"invalid --port {shown(value)}: use 1-65535 (or 0 for any free port), e.g. --port 8500")
    return plain(value)


def check_page(limit: int | None, offset: int, what: str = "jobs") -> None:
    """A page's bounds: at most `limit` records (1 to MAX_PAGE; None: the rest) after `offset` of them;
    `what` they are (jobs, notebooks, volumes, snapshots), as the refusal names them."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE):
        raise SpecError(f"invalid limit {shown(limit)}: use a number of {what} from 1 to {MAX_PAGE}, e.g. 20")
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= MAX_OFFSET:
        raise SpecError(f"invalid offset {shown(offset)}: use a number of {what} from 0 to {MAX_OFFSET}")


def status_refusal(status, statuses: Iterable[str]) -> SpecError:
    """A status filter that is none of `statuses` (JobStatus's values; the HTTP API's list of them)."""
    return SpecError(f"invalid status {shown(status)}: use one of {', '.join(statuses)}")


def check_tail(value, door: str = "sdk") -> int:
    """logs' tail: a whole number of lines from 0 to MAX_TAIL (kubectl's --tail); the example in the
    words of `door` (the SDK's tail=, the CLI's -t, which the HTTP API's answer names too)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TAIL:
        raise SpecError(f"invalid tail {shown(value)}: use a number of lines from 0 to {MAX_TAIL}, or "
                        f"{EVERY[door][0]} for all of them (the default), e.g. {given_as('tail', '10', door)}")
    return plain(value)


def rank_refusal(typed, door: str = "sdk", one: bool = False) -> SpecError:
    """The refusal of logs' rank (`typed`: as the user wrote it) that is no process rank of any job,
    named as `door` takes it (the SDK's rank=, the CLI's --rank, which the HTTP API's answer names too);
    `one`: exec's, in the same words, with no 'all' (exec runs in one process), its rank named as the
    door takes it (exec_rank_named)."""
    named_ = exec_rank_named(door) if one else named("rank", door)
    return SpecError(f"invalid {named_} {shown(typed)}: use a process rank such as 0 (at most {MAX_PROCESSES - 1})"
                     + ("; exec runs in one process" if one else
                        f", or {EVERY[door][1]} for every rank's lines (the default)"))


def _checked_rank(value, below: float, refusal) -> int:
    """The one check of a rank that logs and exec take: a whole number from 0, under `below`; else the
    SpecError `refusal()` makes (each verb's own words)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < below:
        raise refusal()
    return plain(value)


def check_rank(value, door: str = "sdk", typed=None) -> int:
    """logs' rank: a whole number from 0 (that it is one of the job's ranks is the backend's to check,
    once the job is read: its line names them); `typed`: as the user wrote it."""
    return _checked_rank(value, inf, lambda: rank_refusal(value if typed is None else typed, door))


def exec_rank_named(door: str = "sdk") -> str:
    """exec's rank as a refusal names it in the words of a door: the SDK's argument (rank), the CLI's --rank,
    as logs' is (wording.FLAGS); the HTTP API has no exec."""
    return named("rank", door)


def check_exec_rank_form(value, door: str = "sdk") -> int:
    """exec's rank before the job is read (a job not found hid it): a whole number from 0 to the last
    rank any job can have, refused in logs' words (rank_refusal), naming the rank as `door` takes it;
    a whole number is named as the number, from the CLI as from the SDK."""
    return _checked_rank(value, MAX_PROCESSES, lambda: rank_refusal(value, door, one=True))


def check_exec_rank(value, name: str, processes: int, typed=None, door: str = "sdk") -> int:
    """exec's rank: one of job `name`'s `processes` ranks (exec runs in one process: no 'all'). One line
    whether the rank is no whole number, negative or past the job's last, naming the rank as `door`
    takes it (`typed`: as the user wrote it; a whole number is named as the number)."""
    return _checked_rank(value, processes, lambda: SpecError(
        f"invalid {exec_rank_named(door)} {shown(value if typed is None else typed)}: exec runs in one process; "
        f"job {name!r} has {its_ranks(processes)}"))


def its_ranks(processes: int) -> str:
    """A job's processes and their ranks, as a rank refusal names them: '1 process, rank 0' (it said
    'ranks 0 to 0'), '3 processes, ranks 0 to 2'."""
    if processes == 1:
        return "1 process, rank 0"
    return f"{counted(processes, 'process', 'processes')}, ranks 0 to {processes - 1}"


def wait_refusal(typed, door: str = "sdk") -> SpecError:
    """The refusal of a wait's timeout (`typed`: as the user wrote it): seconds from 0 to the door's
    bound (the HTTP API's is MAX_HTTP_WAIT), or with the CLI a duration."""
    bound = (f"{MAX_HTTP_WAIT} (a request waits at most that long; ask again to wait longer)" if door == "http" else
             f"{MAX_WAIT} (366 days)")
    more = {"cli": (" or a duration", f" or {given_as('timeout', '10m', door)}"),  # a duration: the CLI's alone
            "sdk": ("", " (None: wait until it ends)")}.get(door, ("", ""))   # Client.wait's None
    return SpecError(f"invalid {named('timeout', door)} {shown(typed)}: use seconds from 0 to {bound}{more[0]}, e.g. "
                     f"{given_as('timeout', '600', door)}{more[1]}")


def wait_longer(door: str = "sdk") -> str:
    """How a wait that timed out says to wait longer, in the words of `door` (the SDK's timeout=, the
    CLI's --timeout, which the HTTP API's answer names too)."""
    return given_as("timeout", "", door).rstrip()


def check_wait(value, door: str = "sdk") -> float:
    """A wait's timeout: a number of seconds from 0 to MAX_WAIT (Client.wait's timeout, the CLI's
    --timeout), refused in the words of `door`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_WAIT:
        raise wait_refusal(value, door)  # NaN compares false
    return plain(value)


def since_refusal(value, bounds: str = "") -> SpecError:
    """The refusal of logs' since (unix seconds; the CLI's --since is a duration or a time)."""
    return SpecError(f"invalid since {shown(value)}: use a unix time in seconds{bounds}, e.g. time.time() - 600 "
                     f"(the CLI's --since 10m)")


def check_since(value, typed=None) -> float:
    """logs' since: a unix time in seconds from 0 to MAX_TIME, as the HTTP query's schema bounds it
    (a time before 1970 holds no line; NaN and infinity broke Kubernetes' sinceSeconds); `typed`: as
    the user wrote it."""
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not 0 <= value <= MAX_TIME):  # NaN compares false
        raise since_refusal(value if typed is None else typed, f" from 0 to {MAX_TIME:.0f}")
    return plain(value)


def as_typed_number(text):
    """A number as a flag gave it (cli.jobs.real): an int for whole digits, a float for a decimal (2.5), else the
    text itself, named as typed ('1e3', 'nan')."""
    if isinstance(text, str):
        if re.fullmatch(r"[-+]?[0-9]{1,4000}", text.strip(), re.ASCII):  # int() takes at most 4300 digits
            return int(text)
        if re.fullmatch(r"[-+]?([0-9]{1,300}\.[0-9]{0,300}|\.[0-9]{1,300})", text.strip(), re.ASCII):
            return float(text)
    return text


def parse_size(text: str, what: str = "size", *, minimum: int = 0, example: str = "100Gi") -> int:
    """'100Gi' -> bytes. A Kubernetes quantity (binary suffixes Ki..Ei, decimal ones n, u, m,
    k..E, or an exponent: 1e3); from `minimum` bytes to 1Ei. Every refusal names the range and
    `example`, a size that suits what is sized (8Gi of memory, 100Gi of volume)."""
    lowest = "1 byte" if minimum == 1 else _quantity(minimum)
    bounds = f"from {lowest} to 1Ei" if minimum else "of at most 1Ei"
    number, suffix = _size_groups(text, what, bounds, example)
    # First roughly, in floating point: an exponent far out of range (1e999999999) never becomes a
    # 10**n. Rounding keeps order, so whatever is in range passes; then exactly, and as Kubernetes'
    # Quantity.Value() does, a fraction of a byte rounds up.
    if suffix in _UNITS:
        scale = Fraction(_UNITS[suffix])
        rough = float(number) * _UNITS[suffix]
    else:
        exponent = int(_EXPONENTS.get(suffix) or suffix[1:])
        scale = None  # 10**exponent, once the value is known to be in range
        rough = float(f"{number}e{exponent}")
    if minimum <= rough <= MAX_SIZE:
        # In range roughly, a number of at most MAX_QUANTITY_TEXT digits has an exponent far inside
        # +-_EXPONENT_CLAMP unless it is 0 ('0e999999999') or under a byte ('1e-99999999', which Kubernetes
        # rounds up to 1n, then a byte): clamped, neither ever builds a 10**99999999 (it hung).
        exponent = max(-_EXPONENT_CLAMP, min(exponent, _EXPONENT_CLAMP)) if scale is None else 0
        exact = Fraction(Decimal(number)) * (scale if scale is not None else Fraction(10) ** exponent)
        if minimum <= exact <= MAX_SIZE:
            return ceil(exact)
    raise SpecError(f"invalid {what} {shown(text)}: use a quantity {bounds}, e.g. {example}")


def _size_groups(text: str, what: str, bounds: str, example: str = "100Gi") -> tuple[str, str | None]:
    """The number and suffix of a quantity as dtrain writes it: SIZE_RE, after an optional '+' (or a
    '-' before zero: -0 is 0)."""
    whole = isinstance(text, int) and not isinstance(text, bool) and text.bit_length() <= 256  # str(10**5000) fails
    given = str(text).strip() if isinstance(text, str) or whole else None
    negative = given is not None and given[:1] == "-" and SIZE_RE.fullmatch(given[1:])
    if negative and negative.group(1).strip("0.") != "":
        raise SpecError(f"invalid {what} {shown(text)}: it cannot be negative; use a quantity {bounds}, "
                        f"e.g. {example}")
    unsigned = given[1:] if given is not None and given[:1] in "+-" else given
    m = SIZE_RE.fullmatch(unsigned) if unsigned is not None and len(given) <= MAX_QUANTITY_TEXT else None
    if not m:
        meant = _meant_quantity(unsigned) if unsigned is not None else None
        raise SpecError(f"invalid {what} {shown(text)}: use a Kubernetes quantity {bounds} such as 512Mi, {example} "
                        f"or 2G" + (f" (did you mean {meant}?)" if meant else ""))
    return m.group(1), m.group(2)


_UNIT_SPELT = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([kmgtpe])(i?)(b?)$", re.IGNORECASE)


def _meant_quantity(text: str) -> str | None:
    """The quantity meant by a unit spelt as elsewhere (10GB, 1.5GiB, 100gi, 5mb; Kubernetes takes no 'B',
    and its 'm' is a thousandth): '10Gi or 10G' (binary or decimal) where the 'i' was left out, '1.5Gi'
    where it was given; None for anything else (it said only what a quantity looks like)."""
    m = _UNIT_SPELT.fullmatch(text)
    if not m or (not m.group(3) and not m.group(4) and m.group(2) in "kMGTPE"):  # 2G, 4k: taken as given
        return None
    number, letter = m.group(1), m.group(2).upper()
    binary = f"{number}{letter}i"
    return binary if m.group(3) else f"{binary} or {number}{'k' if letter == 'K' else letter}"


def _quantity(n: int) -> str:
    """Bytes as the shortest exact binary quantity: 4194304 -> '4Mi'."""
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        if n and n % _UNITS[suffix] == 0:
            return f"{n // _UNITS[suffix]}{suffix}"
    return str(n)


# The units of each family, largest first, with their size in bytes; below a byte, m, u and n (a
# nano is Kubernetes' finest step: it rounds finer values up).
_BELOW = [("", Fraction(1)), ("m", Fraction(1, 10**3)), ("u", Fraction(1, 10**6)), ("n", Fraction(1, 10**9))]
_BINARY = [(s, Fraction(_UNITS[s])) for s in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki")] + _BELOW
_DECIMAL = [(s, Fraction(10) ** int(_EXPONENTS[s])) for s in ("E", "P", "T", "G", "M", "k")] + _BELOW


def kubernetes_quantity(text: str, factor: int = 1, what: str = "size") -> str:
    """A quantity dtrain takes (parse_size's grammar), times `factor`, as Kubernetes takes it, exactly.

    Kubernetes' ParseQuantity refuses what dtrain takes for convenience ('K', a leading '+') and an
    exponent beside a suffix ('1.23457e+06Mi', which '%g' once made of 1234567.5Mi, rounded). So the
    value keeps the user's unit when it is a whole number of it ('4Gi' * 2 -> '8Gi', '1e3' * 2 ->
    '2e3', '5000K' -> '5000k'), and otherwise takes the largest smaller unit of the same family that
    makes it whole ('1234567.5Mi' -> '1264197120Ki', '12345.67Mi' -> '12945373265920m'); an exponent
    takes the digits instead ('1.5e3' -> '15e2'). The range is the caller's check (parse_size)."""
    number, suffix = _size_groups(text, what, "of at most 1Ei")
    value = Fraction(Decimal(number)) * factor  # the number has no exponent: Decimal reads it exactly
    if suffix not in _UNITS and suffix not in _EXPONENTS:  # an exponent: never 10**exponent itself
        exponent = int(suffix[1:])
        while value.denominator != 1:  # ends: the denominator divides a power of 10
            value, exponent = value * 10, exponent - 1
        return f"{value}e{exponent}"
    unit = {"K": "k", None: ""}.get(suffix, suffix)
    ladder = _BINARY if unit.endswith("i") else _DECIMAL
    names = [name for name, _ in ladder]
    exact = value * ladder[names.index(unit)][1]
    for name, size in ladder[names.index(unit):]:
        if (exact / size).denominator == 1:
            return f"{exact / size}{name}"
    return f"{ceil(exact / ladder[-1][1])}n"


MIN_VOLUME = 2**20  # 1Mi: a smaller volume is a missing unit ('--size 100' is 100 bytes), never a wish
_BELOW_BYTE = {"m": "milli", "u": "micro", "n": "nano"}


def parse_volume_size(text: str, *, minimum: int = MIN_VOLUME) -> int:
    """A volume's size: a quantity from 1Mi to 1Ei. Kubernetes reads a plain number as bytes and 'm'
    as milli, so '--size 100' (meant as 100Gi) or '500m' (meant as 500M) asked for a volume of a few
    bytes and was made; such a size is refused in one line that names the unit to write. `minimum`:
    1 for a size read back from a record made before this rule (JobSpec.from_stored)."""
    return parse_least_size(text, "volume size", minimum=minimum)


def parse_least_size(text: str, what: str, *, minimum: int, example: str = "100Gi") -> int:
    """parse_size with a floor that only a missing or mistaken unit goes under ('--memory 4' is 4
    bytes, '--memory 500m' half a byte): a size under it is refused in one line that names the unit
    to write; a malformed, negative or too large one in parse_size's own line."""
    try:
        size = parse_size(text, what)
    except SpecError:
        size = None  # malformed, negative or too large: parse_size's own line below
    if size is not None and 0 < size < minimum:
        number, suffix = _size_groups(text, what, "", example)
        bounds = f"use a quantity from {_quantity(minimum)} to 1Ei"
        if suffix is None:
            raise SpecError(f"invalid {what} {shown(text)}: a number without a unit is bytes ({size} "
                            f"byte{'s' if size > 1 else ''}); {bounds}: write the unit, e.g. {number}Gi")
        if suffix in _BELOW_BYTE:
            raise SpecError(f"invalid {what} {shown(text)}: '{suffix}' is {_BELOW_BYTE[suffix]} ({size} "
                            f"byte{'s' if size > 1 else ''}); {bounds}: {number}Mi or {number}M for megabytes")
        raise SpecError(f"invalid {what} {shown(text)}: that is {size} byte{'s' if size > 1 else ''}; {bounds}, "
                        f"e.g. {example}")
    return parse_size(text, what, minimum=minimum, example=example)


LABEL_JOB = "dtrain.io/job"  # the job an object was made for: a Kubernetes label; locally on the volumes a job makes


def volume_maker(volume: str) -> str | None:
    """The job whose new volume `volume` would be by its name (job_volume_name's pvc-J-i: J), else None."""
    made = re.fullmatch(r"pvc-(.+)-\d+", volume)
    return made.group(1) if made else None


def job_volume_name(job: str, index: int) -> str:
    """Run:AI's naming: the i-th new volume (`--pvc CLASS:SIZE:MOUNT`) of job J is pvc-J-i.

    A volume name obeys check_name, so a long job name leaves no room for it; the refusal names the
    job name, which the user typed, not the volume name, which they did not."""
    name = f"pvc-{job}-{index}"
    if not NAME_RE.fullmatch(name):
        most = MAX_NAME - len(name) + len(job)
        raise SpecError(f"job name {shown(job)} is {len(job)} characters: a job whose --pvc CLASS:SIZE:MOUNT "
                        f"creates volume pvc-<job>-{index} may have at most {most}; shorten the name")
    return name


def require_project(project: str, known: list[str]) -> None:
    """'default', or one of the `known` projects. A job goes only to a project that exists (made
    with `dtrain project create`), as `dtrain config project` requires: a mistyped -p would
    otherwise make a project of its own, with no quota and out of `dtrain list -p`'s sight."""
    if not project:  # else "create it first with 'dtrain project create '"
        raise SpecError("the project name is empty: give one, e.g. 'dtrain config project default' "
                        "(see 'dtrain project list')")
    if project != "default" and project not in known:
        listed = f"(projects: {', '.join(known) or 'none'})"
        near = near_name(project, ["default", *known])
        if near is not None:  # a typo ('lane-detectoin'): "create it first" named the wrong fix
            raise NotFoundError(f"no project named {project!r} (did you mean {near!r}?); a new project is made "
                                f"with 'dtrain project create {project}' {listed}")
        raise NotFoundError(f"no project named {project!r}; create it first with "
                            f"'dtrain project create {project}' {listed}")


def near_name(name: str, *groups: Iterable[str]) -> str | None:
    """The name one slip away from `name` (a typo, a missing suffix), as `git` names its near
    command: the closest in the first of `groups` that holds one close enough; None when none is."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_CLASS:
        return None
    for group in groups:
        near = difflib.get_close_matches(name, [n for n in group if n != name], n=1, cutoff=0.6)
        if near:
            return near[0]
    return None
