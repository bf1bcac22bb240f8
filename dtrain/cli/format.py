"""Plain-text output shared by every CLI verb: tables, ages, sizes, durations."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction

from dtrain.errors import SpecError
from dtrain.names import shown


def warn(notices) -> None:
    """A call's notices (the warnings it returned with its result), one `dtrain: warning:` line each on stderr."""
    for notice in notices:
        print(f"dtrain: warning: {notice.message}", file=sys.stderr)


def status_word(info) -> str:
    """A job's STATUS as `list` and `describe` show it: Stopping for a job still Running whose every
    process is Terminating (SageMaker's Stopping: StopTrainingJob sent, its programs given time to
    save), as kubectl shows a pod being deleted; Starting for one placed whose processes are all still
    being launched (the scheduler moves it to Running before its first process has started: 'Running'
    beside PROCESSES '0 (2)' read as a job whose processes had gone; Run:AI says ContainerCreating); its
    status otherwise. --json keeps the status."""
    running = info.status.value == "Running"
    if running and info.processes and all(p.status == "Terminating" for p in info.processes):
        return "Stopping"
    if running and info.processes and all(p.status == "Pending" for p in info.processes):
        return "Starting"
    return info.status.value


def table(headers: list[str], rows: list[list[object]]) -> str:
    cells = [[str(c) for c in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells)


def age(since: float | str | None, now: float | None = None) -> str:
    """Kubernetes-style age: 45s, 12m, 3h, 2d (from unix seconds or an ISO 8601 time)."""
    if since is None:
        return "-"
    if isinstance(since, str):
        since = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
    secs = max(0, int((now or time.time()) - since))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def size(n: int | None) -> str:
    """Bytes in the units of a Kubernetes quantity, as a volume's size is given and shown (`--size
    1Gi`): 0B, 512B, 1.5Ki, 3Mi, 1Gi (one decimal, none when whole), so that `volume describe`'s Size
    and Used and `snapshot describe`'s Size read alike. --json keeps the bytes."""
    if n is None:
        return "-"
    if abs(n) < 1024:
        return f"{n:.0f}B"
    units = ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
    value, unit = float(n), 0
    while True:
        value /= 1024
        if round(abs(value), 1) < 1024 or unit == len(units) - 1:  # 1023.96Mi is 1Gi, not 1024.0Mi
            break
        unit += 1
    return f"{round(value, 1):g}{units[unit]}" if round(value, 1) < 1e6 else f"{value:.0f}{units[unit]}"


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h|d|)\Z", re.ASCII)
# Go's time.ParseDuration, as kubectl and Run:AI read --since and --timeout: terms such as 1h30m or
# 1m30.5s, units ns/us/ms/s/m/h (and d, as dtrain's own durations have it).
# [0-9], not \d: \d takes other scripts' digits ('١d'), which float() then read as 1
_GO_TERM = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|ms|s|m|h|d)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def go_duration(text: str) -> float | None:
    """'1h30m', '90s', '1.5h', '500ms' -> seconds; None when `text` is not such a duration."""
    text = text.strip()
    if not text or _GO_TERM.sub("", text):
        return None
    return sum(float(m.group(1)) * _GO_UNITS[m.group(2)] for m in _GO_TERM.finditer(text))


# --since as a duration: at most a century (older than any log; a longer one is a slip, and a
# 400-digit one was infinite, refused as "invalid since -inf: use a unix time", not as typed).
MAX_SINCE_DAYS = 36500


def parse_since(text: str, now: float | None = None) -> float:
    """--since 10m / 2h / 30s / 1h30m, or an RFC 3339 time (UTC unless it names a zone) -> unix seconds."""
    seconds = go_duration(text)
    if seconds is not None:
        if not seconds <= MAX_SINCE_DAYS * 86400:
            raise SpecError(f"invalid --since {shown(text)}: use a duration of at most {MAX_SINCE_DAYS}d, such as "
                            f"30s, 10m or 2h, or a time such as 2026-11-30T12:00:00Z")
        return (now or time.time()) - seconds
    return parse_time(text, "--since", "a duration such as 30s, 10m, 2h, or ")


def parse_duration(text: str) -> Fraction | None:
    """'90s', '30m', '1.5h', '2d' or seconds ('3600', '90.5') -> seconds, exactly (1.1h is 3960, where
    floating point made it 3960.0000000000005); None when `text` is no such duration. The flag's own
    check bounds it and refuses it as typed (spec.check_idle_timeout): '1.5s' is not rounded to 2."""
    m = _DURATION.match(text.strip())
    if len(text) > 40 or not text.isascii():  # float() and Decimal() read '٣٦٠٠' as 3600: no duration
        return None
    if m:
        return Fraction(Decimal(m.group(1))) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:  # seconds as every number flag reads them: what float() takes (' 5 ', '1_000', '+5', '5.', '1e3')
        number = Decimal(text) if math.isfinite(float(text)) else None
    except (ValueError, ArithmeticError):
        return None
    return Fraction(number) if number is not None and abs(number.adjusted()) <= 40 else None


def parse_time(text: str, flag: str = "--since-time", also: str = "") -> float:
    """An RFC 3339 time (Run:AI's and kubectl's --since-time) -> unix seconds. A time without a
    zone is UTC, as every time dtrain prints (`--timestamps`, describe): one copied from them
    without its Z means the same moment whatever the machine's TZ."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise SpecError(f"invalid {flag} {shown(text)}: use {also}a time such as 2026-11-30T12:00:00Z") from None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).timestamp()


def mapping(data: dict, indent: int = 0) -> str:
    """A readable, YAML-like rendering of nested dicts for `describe`."""
    pad = " " * indent
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:" + ("" if value else " {}"))
            if value:
                lines.append(mapping(value, indent + 2))
        elif isinstance(value, Lines):
            lines += [f"{pad}{key}:", *(f"{pad}  {line}" for line in value)]
        elif isinstance(value, (list, tuple)):
            if value and all(isinstance(v, dict) for v in value):
                lines.append(f"{pad}{key}:")
                for v in value:
                    sub = mapping(v, indent + 4).splitlines()
                    lines.append(f"{pad}  - {sub[0].strip()}")
                    lines += sub[1:]
            else:
                lines.append(f"{pad}{key}: {' '.join(str(v) for v in value) if value else '[]'}")
        else:
            lines.append(f"{pad}{key}: {'-' if value is None else _scalar(value)}")
    return "\n".join(lines)


def _scalar(value) -> str:
    """A value as one line: a string that is empty, has a control character (a newline in an
    -e value) or spaces at its ends is shown as a YAML double-quoted string, so each key stays
    on its own line and what it holds is exact."""
    if isinstance(value, str) and (not value or value != value.strip()
                                   or any(ord(c) < 32 or ord(c) == 127 for c in value)):
        return json.dumps(value)
    return str(value)


def shell_word(text: str) -> str:
    """`text` as one shell word that reads back as itself: shlex's quoting ('' for an empty value,
    'x y' for one with spaces), or bash's $'...' for one with a control character (a newline), so
    that it stays on one line."""
    if not any(ord(c) < 32 or ord(c) == 127 for c in text):
        return shlex.quote(text)
    escapes = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
    return "$'" + "".join(escapes.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 32 or ord(c) == 127 else c)
                          for c in text) + "'"


class Lines(tuple):
    """Words `mapping` shows one to a line under their key (a tuple of other values shares one line)."""


def env_flags(env: dict) -> Lines:
    """A job's environment as the -e flags that give it again (`describe`'s Spec), one a line, each
    value exact and pasteable, where `KEY: VALUE` made an empty value, spaces or a '=' ambiguous.
    --json keeps the mapping raw."""
    return Lines(f"-e {key}={shell_word(str(value))}" for key, value in env.items())


def described(head: dict, sections: dict[str, dict | None]) -> str:
    """`describe`'s one layout for jobs, volumes and snapshots: the head's capitalised labels
    (`Name: x`, as kubectl and Run:AI describe), then each non-empty section's own keys, indented
    under its title (a job's spec, a backend's details), as the YAML a user writes them in."""
    parts = [mapping(head)]
    for title, data in sections.items():
        if data:
            parts += [f"{title}:", mapping(data, 2)]
    return "\n".join(parts)


def dry_run_text(docs, as_json: bool | str = False) -> str:
    """A dry run's documents: YAML as `kubectl apply -f -` takes it, or (--json) one JSON object a line, as a
    script asking for --json parses it (jq reads a stream of them); -o yaml: those objects as YAML documents."""
    if as_json == "yaml":
        return plain_yaml(*(json.loads(json.dumps(d, default=str)) for d in docs))
    return "".join(json.dumps(d, default=str) + "\n" for d in docs) if as_json else plain_yaml(*docs)


def record_text(data, form: bool | str, indent: int | None = 2, stream: bool = False) -> str:
    """What --json and `-o json` print of a record or a list of them (dates as strings), or for `-o yaml`
    (kubectl's, Run:AI's, the AWS CLI's `--output yaml`; `form` "yaml") that JSON's very value as one YAML
    document, a list staying a list. `stream`: one of several printed a line each (`wait --json`), each
    YAML document opened by '---', so the whole reads back as a stream of them."""
    text = json.dumps(data, indent=indent, default=str)
    if form != "yaml":
        return text
    return ("---\n" if stream else "") + plain_yaml(json.loads(text)).rstrip("\n")


def plain_yaml(*docs) -> str:
    """YAML as a person writes it and `kubectl apply -f -` takes: no &anchors / *aliases (a value
    shared by two fields is written out twice), keys in the order given, documents split by ---."""
    import yaml

    class _Plain(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True

    return yaml.dump_all(docs, Dumper=_Plain, sort_keys=False, default_flow_style=False)
