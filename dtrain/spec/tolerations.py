"""A job's tolerations of node taints (pure): Toleration, Run:AI's `--toleration`, a job file's list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from dtrain.errors import SpecError
from dtrain.names import shown
from dtrain.numbers import whole_number
from dtrain.spec.fields import _keys, _text, as_text
from dtrain.spec.labels import _label
from dtrain.spec.volumes import _volume_init


# A pod's tolerations: a taint (`kubectl taint nodes N KEY[=VALUE]:EFFECT`, e.g. on GPU nodes) keeps
# every pod off its node but those that tolerate it. The rules are the API server's (ValidateTolerations).
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_FIELDS = ("operator", "key", "value", "effect", "seconds")  # Run:AI's --toleration, in its order
MAX_TOLERATIONS = 16  # a node has few taints; as many as the terms of a node selector
MAX_TOLERATION_SECONDS = 365 * 24 * 3600  # a year; for ever is no `seconds` at all
TOLERATION_EXAMPLE = "--toleration operator=Exists,key=nvidia.com/gpu,effect=NoSchedule"


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """A node taint the job's pods tolerate (a pod's `tolerations` entry; Run:AI's ``--toleration``)."""

    key: str = ""  # the taint's key; '' (with operator Exists): every taint
    operator: str = "Equal"  # Equal: the taint's value is `value`; Exists: any value (Kubernetes' default: Equal)
    value: str = ""  # the taint's value (Equal only)
    effect: str = ""  # NoSchedule, PreferNoSchedule or NoExecute; '': every effect
    seconds: int | None = None  # NoExecute only: how long a pod stays once its node is tainted; None: for ever

    def __post_init__(self):
        key, value = self.key, self.value
        if self.operator in ("Lt", "Gt"):  # KEP-5471; a cluster without the gate creates the job but not its pods
            raise SpecError(f"toleration operator {self.operator} (a numeric comparison) is alpha in Kubernetes 1.35 "
                            f"(feature gate TaintTolerationComparisonOperators, off by default), so it is not taken here:"
                            f" use operator=Equal with the taint's exact value, or operator=Exists")
        if self.operator not in ("Equal", "Exists"):
            raise SpecError(f"invalid toleration operator {shown(self.operator)}: use Equal (the taint's value is "
                            f"value=...) or Exists (any value)")
        if key != "":  # a taint's key and value follow the label rules (which refuse a number, a NUL)
            _label(key, value, "toleration", example="nvidia.com/gpu, dedicated",
                   fix=f"Toleration(key={key!r}, value={as_text(value)})")
        elif self.operator != "Exists":
            raise SpecError(f"a toleration without a key must have operator=Exists (it then tolerates every "
                            f"taint): give key=KEY, e.g. {TOLERATION_EXAMPLE}")
        if self.operator == "Exists" and value != "":
            raise SpecError(f"toleration {key or '(every key)'} has operator=Exists, which matches any value: "
                            f"drop value={shown(value)}, or use operator=Equal")
        if self.effect not in ("", *TAINT_EFFECTS):
            raise SpecError(f"invalid toleration effect {shown(self.effect)}: use {', '.join(TAINT_EFFECTS[:-1])} "
                            f"or {TAINT_EFFECTS[-1]} (or leave it out: every effect)")
        if self.seconds is not None:
            if isinstance(self.seconds, bool) or not isinstance(self.seconds, int) \
                    or not 0 <= self.seconds <= MAX_TOLERATION_SECONDS:
                raise SpecError(f"invalid toleration seconds {shown(self.seconds)}: use a whole number from 0 to "
                                f"{MAX_TOLERATION_SECONDS} (a year), or leave it out to tolerate the taint for ever")
            object.__setattr__(self, "seconds", int(self.seconds))  # as typed on the command line: a plain int
            if self.effect != "NoExecute":
                raise SpecError(f"toleration seconds={self.seconds} needs effect=NoExecute (only a NoExecute taint "
                                f"evicts a running pod): add effect=NoExecute, or drop seconds")

    def to_dict(self) -> dict[str, Any]:
        """The fields given (operator always), as a job file and the HTTP API write them."""
        d = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect,
             "seconds": self.seconds}
        return {k: v for k, v in d.items() if k == "operator" or v not in ("", None)}

    def to_flag(self) -> str:
        given = self.to_dict()
        return ",".join(f"{k}={given[k]}" for k in TOLERATION_FIELDS if k in given)


Toleration.__init__ = _volume_init(  # type: ignore[method-assign]  # a wrong field: a SpecError naming the one meant
    Toleration, "Toleration(key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')")


def parse_toleration(text) -> Toleration:
    """``--toleration operator=Equal|Exists,key=KEY[,value=VALUE][,effect=EFFECT][,seconds=N]`` (Run:AI's
    flag; fields in any order, operator Equal where it is left out, as Kubernetes has it)."""
    text = _text(text, "--toleration")
    fields: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in TOLERATION_FIELDS:
            raise SpecError(f"invalid --toleration {shown(text)}: {shown(part)} is not one of "
                            f"{', '.join(f + '=...' for f in TOLERATION_FIELDS)}; e.g. {TOLERATION_EXAMPLE}")
        if name in fields:
            raise SpecError(f"invalid --toleration {shown(text)}: {name}= is given twice; give it once")
        fields[name] = value.strip()
    if "seconds" in fields:
        fields["seconds"] = whole_number(fields["seconds"])
    return Toleration(**fields)


def check_tolerations(items) -> tuple[Toleration, ...]:
    """A job's tolerations: each a Toleration, a mapping of its fields (a job file, JSON) or a
    --toleration string; at most MAX_TOLERATIONS."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (list, tuple)):
        raise SpecError(f"invalid tolerations {shown(items)}: must be a list, e.g. tolerations: "
                        f"[{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]")
    if len(items) > MAX_TOLERATIONS:
        raise SpecError(f"{len(items)} tolerations: a job takes {MAX_TOLERATIONS} at most; tolerate a key's every "
                        f"value and effect with one (operator=Exists and no effect)")
    out = []
    for item in items:
        if isinstance(item, str):
            item = parse_toleration(item)
        elif isinstance(item, Mapping):
            if bad := sorted((k for k in item if k not in TOLERATION_FIELDS), key=str):
                near = "seconds" if str(bad[0]).lower().replace("_", "") == "tolerationseconds" else None
                hint = f" (did you mean '{near}'?)" if near else ""
                raise SpecError(f"unknown toleration field {_keys(bad)}{hint}: its fields are "
                                f"{', '.join(TOLERATION_FIELDS)}")
            item = Toleration(**item)
        elif not isinstance(item, Toleration):
            raise SpecError(f"invalid toleration {shown(item)}: give a mapping of {', '.join(TOLERATION_FIELDS)}, "
                            f"or a --toleration string")
        out.append(item)
    return tuple(out)
