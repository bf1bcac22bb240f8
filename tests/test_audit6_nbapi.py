"""Notebooks through every door: `dtrain notebook start|list|open`, the SDK and the HTTP API make the
same notebook and say what is true of it (queued, not started, while its GPUs are busy)."""

from __future__ import annotations

import pytest

from conftest import Dtrain

pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")

def test_a_notebook_waiting_for_gpus_is_said_to_be_queued_not_started(dt_gpus: Dtrain):
    """`dtrain notebook NAME --gpu 1` printed 'started' while the notebook waited for a GPU."""
    dt = dt_gpus
    dt("submit", "hold", "--gpu", "2", "--", "sleep", "120")
    dt.wait_for("hold", {"Running"})
    said = dt("notebook", "nbq", "--gpu", "1").stdout
    assert dt.status("nbq") == "Pending"
    assert "'nbq' started" not in said and "'nbq' is queued, not started yet" in said, said
    assert "needs 1 GPUs, 0 free" in said, said  # why, as `dtrain describe job` says it
    assert "dtrain describe job nbq" in said and "dtrain notebook open nbq" in said, said
    said = dt("notebook", "free").stdout  # no GPU asked: placed at once
    assert dt.status("free") == "Running" and "'free' started" in said, said
