"""Labels under Kubernetes' rules (pure): a job's labels (`--label`), the node labels a job selects
(`--node-selector`, Run:AI's `--node-type`), and the label selectors that pick jobs (`-l`)."""

from __future__ import annotations

import re
from typing import Mapping

from dtrain.errors import SpecError, Worded
from dtrain.names import shown
from dtrain.spec.fields import _STORED, _keys, _text, as_text


# Kubernetes label rules (SageMaker's tag rules take them too): a name of 63 characters at most,
# alphanumeric at both ends, '-', '_' and '.' between, with an optional DNS-subdomain prefix and '/';
# a value of 63 at most, the same characters, or empty.
_LABEL_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY_RE = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_PART}\Z")
LABEL_VALUE_RE = re.compile(rf"^({_LABEL_PART})?\Z")
MAX_LABELS = 40  # SageMaker takes 50 tags a job, two of them dtrain's
OWNED_LABEL_PREFIXES = ("dtrain.io/", "app.kubernetes.io/", "aws:", "dtrain:")  # dtrain's own, and AWS's


def _labels(labels) -> dict[str, str]:
    """The spec's labels: KEY -> value as Kubernetes takes them on an object (and SageMaker as tags)."""
    if not isinstance(labels, Mapping):
        raise SpecError(f"invalid labels {shown(labels)}: must be a mapping of KEY: value, e.g. {{team: vision}}")
    if len(labels) > MAX_LABELS:
        raise SpecError(f"{len(labels)} labels: a job takes {MAX_LABELS} at most (SageMaker's tag limit)")
    out = {}
    for key, value in dict(labels).items():
        _label(key, value, "label", example="team, example.com/team", arg="labels")
        if key.startswith(OWNED_LABEL_PREFIXES) and not _STORED.get():
            raise SpecError(f"invalid label key {key}: the prefix is dtrain's or the platform's own; use another")
        out[key] = value
    return out


def _label(key, value, what: str, *, example: str, arg: str | None = None, fix: str | None = None) -> None:
    """One KEY: value pair under Kubernetes' label rules, `what` ('label', 'node selector', 'toleration') naming
    it; `arg`: the SDK's argument it came in (JobSpec's labels, node_selector), or `fix`: how the SDK writes it
    instead (Toleration(key='a', value='1')). A value's refusal is worded by door (errors.Worded): a job file's
    value YAML read as no string is told '(quote it in YAML)', a Python caller's how Python writes it, and a
    string's refusal (a flag's too) names only the rule, which quoting cannot meet."""
    if not isinstance(key, str) or len(key) > 253 + 1 + 63 or not LABEL_KEY_RE.match(key):
        raise SpecError(f"invalid {what} key {shown(key)}: use a name of 63 letters, digits, '-', '_' or '.' at "
                        f"most, alphanumeric at both ends, with an optional prefix and '/' (e.g. {example})")
    if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
        said = (f"invalid value {shown(value)} of {what} {_keys([key])}: use 63 letters, digits, '-', '_' or '.' at "
                f"most, alphanumeric at both ends")
        if isinstance(value, str):  # quoting it would not help: the flag's, the file's, the SDK's string as it is
            raise SpecError(said)
        written = fix or f"{arg}={{{key!r}: {as_text(value)}}}"
        raise Worded(lambda door: f"{said} (quote it in YAML)" if door != "sdk" else  # a job file's `a: 1`, `a: yes`
                     f"invalid value {shown(value)} of {what} {_keys([key])}: must be a string, e.g. {written}")


# Node selection, as a pod's nodeSelector: every KEY=VALUE must be a label of the node. Run:AI's
# `--node-type T` is the node label run.ai/type=T (its "group nodes" guide: kubectl label node N run.ai/type=T).
NODE_TYPE_LABEL = "run.ai/type"
MAX_NODE_SELECTOR = 16  # terms of a node selector: a node has few labels, and each one narrows the nodes


def node_labels(labels, what: str = "node selector", *, arg: str | None = None) -> dict[str, str]:
    """A node's labels, or a node_selector naming them: KEY -> value, each a Kubernetes label; unlike
    `labels`, any prefix (kubernetes.io/hostname, node.kubernetes.io/instance-type, run.ai/type)."""
    if not isinstance(labels, Mapping):
        raise SpecError(f"invalid {what} {shown(labels)}: must be a mapping of KEY: value, "
                        f"e.g. {{{NODE_TYPE_LABEL}: dgx-a100}}")
    if len(labels) > MAX_NODE_SELECTOR:
        raise SpecError(f"{what}: {len(labels)} labels, {MAX_NODE_SELECTOR} at most; keep the ones that tell "
                        f"the nodes apart")
    for key, value in dict(labels).items():
        _label(key, value, what, example=f"{NODE_TYPE_LABEL}, kubernetes.io/hostname", arg=arg)
    return dict(labels)


def parse_node_selector(items, node_type: str | None = None) -> dict[str, str]:
    """Repeated ``--node-selector KEY=VALUE`` (kubectl's nodeSelector) and Run:AI's ``--node-type T``
    (``run.ai/type=T``) as one mapping; the last value of a key wins. The rules are the spec's."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = _text(item, "--node-selector").partition("=")
        if not sep:
            raise SpecError(f"invalid --node-selector {shown(item)}: use KEY=VALUE, e.g. "
                            f"--node-selector kubernetes.io/hostname=gpu-node-1")
        out[key] = value
    if node_type is not None:
        given = out.get(NODE_TYPE_LABEL)
        if given is not None and given != node_type:
            raise SpecError(f"--node-type {node_type} is --node-selector {NODE_TYPE_LABEL}={node_type}, but "
                            f"--node-selector {NODE_TYPE_LABEL}={given} was given too: keep one")
        out[NODE_TYPE_LABEL] = _text(node_type, "--node-type")
    return out


def parse_labels(items) -> dict[str, str]:
    """Repeated ``--label KEY=VALUE`` (Run:AI's flag) as a mapping; the last value of a key wins.
    The rules are the spec's (`labels`), checked when the spec is made."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = _text(item, "--label").partition("=")
        if not sep:
            raise SpecError(f"invalid --label {shown(item)}: use KEY=VALUE, e.g. --label team=vision")
        out[key] = value
    return out


MAX_SELECTOR = 1024  # characters of a label selector
# What parse_selector takes, as one regular expression (the HTTP schema's pattern: no lookahead)
_SEL_KEY = r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?" + _LABEL_PART
_SEL_TERM = rf" *(! *{_SEL_KEY}|{_SEL_KEY}( *(==|!=|=) *({_LABEL_PART})?)?) *"
SELECTOR_PATTERN = rf"^{_SEL_TERM}(,{_SEL_TERM})*$"


def parse_selector(text: str, given: str = "-l ") -> tuple[tuple[str, str, str], ...]:
    """A label selector as kubectl's `-l` takes it, equality-based: comma-separated `KEY=VALUE` (or
    `==`), `KEY!=VALUE`, `KEY` (has the label) and `!KEY` (has not); all must hold. Each term is
    (key, op, value), op one of '=', '!=', 'exists', '!exists'. `given`: how the door the selector came
    through takes one, for the refusals' examples (the CLI's `-l `, HTTP's `?label_selector=`)."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_SELECTOR:
        raise SpecError(f"invalid label selector {shown(text)}: use KEY=VALUE, KEY!=VALUE, KEY or !KEY, "
                        f"comma-separated, at most {MAX_SELECTOR} characters (e.g. {given}pipeline/run-name=nightly)")
    terms = []
    for raw in text.split(","):
        term = raw.strip()
        if "!=" in term:
            key, _, value = term.partition("!=")
            op = "!="
        elif "=" in term:
            key, _, value = term.partition("==") if "==" in term else term.partition("=")
            op = "="
        elif term.startswith("!"):
            key, op, value = term[1:], "!exists", ""
        else:
            key, op, value = term, "exists", ""
        key, value = key.strip(), value.strip()
        if not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(value) or "=" in value:
            raise SpecError(f"invalid label selector term {shown(term)}: use KEY=VALUE, KEY!=VALUE, KEY or !KEY "
                            f"with label keys and values (e.g. {given}team=vision,pipeline/runid)")
        terms.append((key, op, value))
    return tuple(terms)


def selects(terms: tuple[tuple[str, str, str], ...], labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy every term of a parsed selector (`parse_selector`)."""
    for key, op, value in terms:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:  # kubectl: a job without the label matches KEY!=VALUE
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True
