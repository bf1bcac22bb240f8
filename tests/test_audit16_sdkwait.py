"""Client.wait and Client.logs named their arguments as the CLI's flags: wait(timeout=-1) said 'invalid
--timeout -1: ..., e.g. --timeout 600' and, run out, 'wait longer (--timeout)'; logs(rank=-1) 'invalid
--rank -1', logs(tail=-1) '..., e.g. -t 10', logs(previous=True, follow=True) '--previous cannot be
followed: ... drop -f'. The SDK's door now names its own arguments (Backend.wait and Backend.logs take
the Client's door, as Backend.exec does); `dtrain wait` and `dtrain logs` say what they said.
"""

from __future__ import annotations

import pytest

from conftest import Dtrain
from dtrain.errors import SpecError, TimeoutError_


def _refusal(call) -> str:
    with pytest.raises(SpecError) as err:
        call()
    return str(err.value)


def test_wait_and_logs_name_the_sdks_arguments_and_the_cli_its_flags(dt: Dtrain):
    from dtrain import Client

    client = Client(home=dt.home)
    dt("submit", "sleeper", "--", "sleep", "60")
    try:
        assert _refusal(lambda: client.wait("sleeper", timeout=-1)) == (
            "invalid timeout -1: use seconds from 0 to 31622400 (366 days), e.g. timeout=600 (None: wait until it ends)")
        with pytest.raises(TimeoutError_) as late:
            client.wait("sleeper", timeout=0)
        assert "wait longer (timeout=) or check 'dtrain " in str(late.value), str(late.value)
        assert _refusal(lambda: client.logs("sleeper", rank=-1)) == (
            "invalid rank -1: use a process rank such as 0 (at most 4095), or None for every rank's lines (the default)")
        assert _refusal(lambda: client.logs("sleeper", tail=-1)) == (
            "invalid tail -1: use a number of lines from 0 to 1000000000, or None for all of them (the default), "
            "e.g. tail=10")
        assert _refusal(lambda: client.logs("sleeper", previous=True, follow=True)) == (
            "previous=True cannot be followed: the previous attempt has ended; drop follow=True to read its lines, "
            "or drop previous=True to follow the current attempt")
        assert _refusal(lambda: client.logs("sleeper", previous=1)) == (
            "invalid previous 1 or follow False: use True or False")
        # the CLI's words, as before
        said = dt("wait", "sleeper", "--timeout", "0", check=False)
        assert said.returncode == 124 and "wait longer (--timeout) or check 'dtrain " in said.stderr, said.stderr
        said = dt("logs", "sleeper", "--rank", "-1", check=False)
        assert said.returncode == 2 and "invalid --rank '-1': use a process rank such as 0" in said.stderr, said.stderr
        said = dt("logs", "sleeper", "-t", "-2", check=False)
        assert said.returncode == 2 and said.stderr.rstrip().endswith("e.g. -t 10"), said.stderr
        said = dt("logs", "sleeper", "--previous", "-f", check=False)
        assert said.returncode == 2 and "--previous cannot be followed" in said.stderr and "drop -f" in said.stderr
        cli = Client(home=dt.home)
        cli.door = "cli"  # as dtrain's main sets it: a refusal the CLI's checks let through says its flags
        assert _refusal(lambda: cli.wait("sleeper", timeout=-1)).startswith("invalid --timeout -1: use seconds")
        assert _refusal(lambda: cli.logs("sleeper", rank=-1)).startswith("invalid --rank -1: use a process rank")
        assert _refusal(lambda: cli.logs("sleeper", tail=-1)).endswith("e.g. -t 10")
    finally:
        dt("delete", "sleeper")


def test_wait_snapshot_and_wait_volume_name_the_sdks_timeout(dt: Dtrain):
    """Client.wait_snapshot and Client.wait_volume said the CLI's '--timeout' too (their shared loop took no door)."""
    from dtrain import Client

    dt("volume", "create", "data")
    dt("snapshot", "create", "data", "--name", "s1")
    client = Client(home=dt.home)
    for call in (lambda: client.wait_snapshot("s1", timeout=-1), lambda: client.wait_volume("data", timeout=-1)):
        assert _refusal(call).startswith("invalid timeout -1: use seconds from 0 to "), _refusal(call)
    cli = Client(home=dt.home)
    cli.door = "cli"
    assert _refusal(lambda: cli.wait_snapshot("s1", timeout=-1)).startswith("invalid --timeout -1: use seconds")
    assert client.wait_snapshot("s1", timeout=0).name == "s1"  # a local snapshot is ready once taken
