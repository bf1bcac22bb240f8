"""Volumes and snapshots, audit 12: a name beginning with '-' given without '--', job hints that
carry -p and --backend, class folders made on first use, and bad input to the storage verbs.
Each test failed before its fix."""

from __future__ import annotations

import pytest

from dtrain.cli.main import main
from dtrain.names import NAME_RULE


# --- 1. a name beginning with '-' without '--' ---------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["volume", "create", "-x"], ["volume", "delete", "-x"], ["volume", "describe", "-x"],
    ["volume", "update", "-x", "--class", "fast"], ["snapshot", "create", "-x"],
    ["snapshot", "restore", "-x", "--to", "copy"], ["snapshot", "delete", "-x"], ["snapshot", "wait", "-x"],
    ["snapshot", "diff", "-x"], ["logs", "-x"], ["describe", "-x"],
])
def test_a_name_beginning_with_a_dash_is_named_with_the_naming_rule(argv, tmp_path, monkeypatch, capsys):
    """argparse said "the following arguments are required: name", as if no name had been given."""
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip()
    prog = "dtrain " + " ".join(w for w in argv[:2] if w != "-x")
    assert exit_.value.code == 2 and len(err.splitlines()) == 1
    assert err == (f"{prog}: error: '-x' is neither an option of '{prog}' nor a name: names are {NAME_RULE} "
                   f"(see '{prog} --help')")
    assert not (tmp_path / "home").exists()


def test_a_missing_name_with_no_stray_word_is_still_argparses_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    for argv, said in ((["volume", "create", "--size", "1Gi"], "required: name"),
                       (["volume", "create", "--si", "1Gi"], "required: name"),  # an abbreviation of --size
                       (["volume", "update", "work", "-x"], "required: --class/--storage-class"),
                       (["config", "-x"], "required: what")):  # a positional with choices: no name
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        assert said in err and "nor a name" not in err, err
