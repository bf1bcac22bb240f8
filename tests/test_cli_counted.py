"""Messages count with names.counted ('1 volume', '2 volumes') and list with names.listed ('job a',
'jobs a, b'), never 'volume(s)': the CLI's, the backends', the storage layer's and the workloads'."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dtrain
from dtrain.names import counted, listed

PACKAGE = Path(dtrain.__file__).parent
# Not plurals: a URL scheme, and torch's own words quoted as it prints them.
NOT_PLURALS = re.compile(r"http\(s\)|Error\(s\) in loading state_dict")


def test_no_message_writes_a_plural_in_brackets():
    """`job(s)`, `snapshot(s)`, `volume(s)`: a count said with names.counted, a list with names.listed."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and re.search(r"[a-z]\(s\)", NOT_PLURALS.sub("", node.value))):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value.strip()[:60]}")
    assert found == []


def test_a_list_names_its_noun_in_its_number():
    assert listed(["a"], "job") == "job a"
    assert listed(["a", "b"], "job") == "jobs a, b"
    assert counted(1, "process", "processes") == "1 process" and counted(3, "process", "processes") == "3 processes"


@pytest.mark.slow  # ~3.4 s
def test_one_change_is_said_in_the_singular(dt):
    dt("volume", "create", "data", "--size", "1Mi")
    (dt.home / "volumes" / "data" / "data" / "a.txt").write_text("one\n")
    dt("snapshot", "create", "data", "--name", "s1")
    (dt.home / "volumes" / "data" / "data" / "a.txt").write_text("two\n")  # modified: the one change
    assert dt("snapshot", "diff", "s1").stdout.splitlines()[-1] == "1 change"
