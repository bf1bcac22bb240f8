"""Left open by the storage round: a name beginning with '-' on a verb whose names are optional, a
snapshot or volume deleted on a full home disk, and hints that dropped -p/--backend."""

from __future__ import annotations

import pytest
from conftest import assert_usage_error

from dtrain.names import NAME_RULE


@pytest.mark.parametrize("words", [("delete", "-x"), ("delete", "job", "-x"), ("delete", "a", "-x"),
                                   ("suspend", "-x"), ("resume", "-x"), ("describe", "a", "-x"),
                                   ("snapshot", "verify", "-x"), ("snapshot", "wait", "a", "-x")])
def test_a_name_beginning_with_a_dash_meets_the_naming_rule_where_names_are_optional(dt, words):
    """`dtrain delete -x` said argparse's 'unrecognized arguments: -x' (its names are nargs='*'),
    where `volume delete -x` names the rule."""
    proc = dt(*words, check=False)
    prog = " ".join(w for w in ("dtrain", *words[:2]) if w not in ("a", "job", "-x"))
    assert_usage_error(proc, f"'-x' is neither an option of '{prog}' nor a name: names are {NAME_RULE}",
                       f"(see '{prog} --help')")


def test_a_long_option_left_over_keeps_the_unrecognized_line_and_its_hints(dt):
    """A '--word' is an option's spelling: the verb's own hint still answers it."""
    assert_usage_error(dt("delete", "a", "--prge", check=False), "unrecognized arguments: --prge")
    assert_usage_error(dt("list", "-x", check=False), "unrecognized arguments: -x")  # `list` takes no name
