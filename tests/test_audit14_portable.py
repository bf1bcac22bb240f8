"""A fourteenth audit: one job file taken, unchanged, from the local backend to Kubernetes (the
shipped fake API server), through the CLI, the HTTP API and the SDK:

- `dtrain list --backend kubernetes` (as `submit ... --backend kubernetes` takes it) was refused
  naming only the verb's help; the line now gives the command with --backend before the verb.
"""

from __future__ import annotations

import pytest

from conftest import assert_usage_error


@pytest.mark.parametrize("words, fixed", [
    (["list", "--backend", "kubernetes"], "dtrain --backend kubernetes list"),
    (["describe", "job", "cifar", "--backend=kubernetes"], "dtrain --backend=kubernetes describe job cifar"),
    (["wait", "cifar", "--backend", "local", "--timeout", "1s"], "dtrain --backend local wait cifar --timeout 1s"),
    (["logs", "cifar", "-f", "--backend"], "dtrain --backend BACKEND logs cifar -f"),
])
def test_a_backend_after_a_verb_that_takes_it_before_names_the_command(dt, words, fixed):
    proc = dt(*words, check=False)
    assert_usage_error(proc, f"takes --backend before the verb: {fixed} (see 'dtrain {words[0]} --help')")
