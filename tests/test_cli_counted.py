"""CLI messages count with names.counted ('1 volume', '2 volumes'), never 'volume(s)'."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dtrain.cli

CLI = Path(dtrain.cli.__file__).parent


def test_no_cli_message_writes_a_plural_in_brackets():
    """`job(s)`, `snapshot(s)`, `volume(s)`: a count said with names.counted, a list with its noun's number."""
    found = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"[a-z]\(s\)", node.value):
                found.append(f"{path.name}:{node.lineno}: {node.value.strip()[:60]}")
    assert found == []


@pytest.mark.slow  # ~3.4 s
def test_one_change_is_said_in_the_singular(dt):
    dt("volume", "create", "data", "--size", "1Mi")
    (dt.home / "volumes" / "data" / "data" / "a.txt").write_text("one\n")
    dt("snapshot", "create", "data", "--name", "s1")
    (dt.home / "volumes" / "data" / "data" / "a.txt").write_text("two\n")  # modified: the one change
    assert dt("snapshot", "diff", "s1").stdout.splitlines()[-1] == "1 change"
