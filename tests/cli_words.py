"""Check a `dtrain ...` command as written in a doc or a message against the real parsers.

Only words are checked, not values: every verb must be a subcommand and every flag an option of
the parser that would read it, so a synopsis such as `dtrain logs JOB [-t N]` checks as well as a
runnable command. Workload verbs (`dtrain lanes train ...`) are checked against the workload's own
argparse parser, captured when its main() builds it (nothing runs).
"""

from __future__ import annotations

import argparse
import importlib
import re
import shlex
from unittest import mock

from dtrain.cli.main import WORKLOADS, build_parser

# `python -m dtrain.workloads.lanes train ...` runs the same parser as `dtrain lanes train ...`
MODULE_FORMS = {"dtrain.workloads.lanes": "lanes", "dtrain.workloads.cifar10": "cifar10"}


class _Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def workload_parser(group: str, verb: str) -> argparse.ArgumentParser:
    module, func = WORKLOADS[(group, verb)][:2]

    def capture(parser, *args, **kwargs):
        raise _Captured(parser)

    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture):
        try:
            getattr(importlib.import_module(module), func)([])
        except _Captured as got:
            return got.parser
    raise AssertionError(f"{module}.{func} built no argparse parser")


def words_of(text: str) -> list[str]:
    """A command line as shown -> words: $VARS and $((...)) become X, [optional] brackets and
    '...' are dropped, a trailing # comment is cut, a pipe or && ends the command."""
    text = re.sub(r"\$\(\([^)]*\)\)", "X", text)
    text = re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?", "X", text)
    text = text.replace("[", " ").replace("]", " ").replace("...", " ")
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        words = text.split()
    for stop in ("|", "&&", ";", ">", "2>&1", "||"):
        if stop in words:
            words = words[:words.index(stop)]
    return words


def _options(parser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def _check(parser, words: list[str], path: str, problems: list[str]) -> None:
    i = 0
    while i < len(words):
        w = words[i]
        if w == "--":
            problems += check_command(words[i + 1:], nested=True)
            return
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if w.startswith("-") and len(w) > 1 and not re.fullmatch(r"-\d+(\.\d+)?", w):
            name = w.split("=", 1)[0]
            action = _options(parser).get(name)
            if action is None:
                problems.append(f"{path}: no option {name}")
            elif action.nargs != 0 and "=" not in w:
                i += 1  # its value
                if action.nargs in ("+", "*"):
                    while i + 1 < len(words) and not words[i + 1].startswith("-"):
                        i += 1
        elif subs:
            alts = re.split(r"[/|]", w)
            if len(alts) > 1 and all(alt in subs[0].choices for alt in alts):
                w = alts[0]  # prose or a synopsis: `snapshot create/list/delete`, `lanes train|predict`
            if re.fullmatch(r"[A-Z][A-Z_]*", w):  # a synopsis' placeholder for any verb: `dtrain VERB --help`
                return
            if w not in subs[0].choices:
                problems.append(f"{path}: no command {w!r} (has {', '.join(subs[0].choices)})")
                return
            sub = subs[0].choices[w]
            if sub.prefix_chars == "\0":  # a workload verb: its own parser reads the rest
                group = path.split()[-1]
                _check(workload_parser(group, w), words[i + 1:], f"{path} {w}", problems)
                return
            parser, path = sub, f"{path} {w}"
        i += 1


def check_command(words: list[str], *, nested: bool = False) -> list[str]:
    """Problems with one command (empty when every verb and flag exists); non-dtrain commands pass."""
    words = [w for w in words if w]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        words = words[1:]  # VAR=value prefixes
    if len(words) >= 3 and words[0] in ("python", "python3") and words[1] == "-m" and words[2] in MODULE_FORMS:
        words = ["dtrain", MODULE_FORMS[words[2]], *words[3:]]
    if not words or words[0] != "dtrain":
        return []
    problems: list[str] = []
    _check(build_parser(), words[1:], "dtrain", problems)
    return problems
