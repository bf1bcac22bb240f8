"""Write dtrain/cli/workload_flags.py: each workload command's flags, read from its own parser.

    python scripts/workload_flags.py          # after changing a workload's flags

`dtrain completion bash` completes them from that table, since building the parsers imports torch
(the lanes and cifar10 modules), which printing the script at every shell start must not load.
tests/test_cli_completion.py fails, naming this command, when the table and the parsers differ.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from unittest import mock

from dtrain.cli.completion import flags_of
from dtrain.cli.main import WORKLOADS

TARGET = Path(__file__).resolve().parents[1] / "dtrain" / "cli" / "workload_flags.py"
HEAD = '''"""Each workload command's flags for `dtrain completion` (the flag and what is offered after it: its
choices, '' for a value of its own, None for none). Written by `python scripts/workload_flags.py` from
the workloads' parsers, which import torch; tests/test_cli_completion.py holds the two equal."""

'''


class _Built(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _stop(parser, args=None, namespace=None):
    raise _Built(parser)


def parser_of(module: str, func: str) -> argparse.ArgumentParser:
    """The parser the command's main builds, taken when it would read the words: nothing runs."""
    main = getattr(importlib.import_module(module), func)
    with mock.patch.object(argparse.ArgumentParser, "parse_known_args", _stop):
        try:
            main([])
        except _Built as built:
            return built.parser
    raise RuntimeError(f"{module}.{func} read no words with an argparse parser")


def table() -> dict[str, dict[str, str | None]]:
    """Each workload command ('lanes train') and its parser's flags, in dtrain's --help order."""
    return {f"{group} {verb}": flags_of(parser_of(module, func))
            for (group, verb), (module, func, _) in WORKLOADS.items()}


def text() -> str:
    """The module: each command's flags packed into lines of at most 110 characters, in the parser's order."""
    lines = ["WORKLOAD_FLAGS: dict[str, dict[str, str | None]] = {"]
    for command, flags in table().items():
        lines.append(f"    {json.dumps(command)}: {{")
        line = ""
        for flag, offered in flags.items():
            item = f"{json.dumps(flag)}: {'None' if offered is None else json.dumps(offered)},"
            if line and len(line) + 1 + len(item) > 110:
                lines.append(line)
                line = ""
            line = f"{line} {item}" if line else " " * 8 + item
        lines += [line, "    },"]
    return HEAD + "\n".join([*lines, "}"]) + "\n"


if __name__ == "__main__":
    TARGET.write_text(text())
    print(f"wrote {TARGET}", file=sys.stderr)
