"""The SDK's refusals name what a notebook user gave (the argument, the field), not a CLI flag they never
typed; the CLI's words stay as they were."""

from __future__ import annotations

import pytest
from conftest import Dtrain
from dtrain.errors import SpecError
from dtrain.spec import JobSpec


def test_a_job_of_several_processes_without_a_launcher_is_named_by_its_fields_in_the_sdk(dt: Dtrain, tmp_path):
    """JobSpec(processes=2) said '--processes 2 needs a launcher: use dtrain submit-dist ...'."""
    for build in (lambda: JobSpec(name="x", command=["true"], processes=2),
                  lambda: JobSpec.from_dict({"name": "x", "command": ["true"], "processes": 2})):
        with pytest.raises(SpecError) as sdk:
            build()
        assert str(sdk.value) == "processes=2 needs a launcher: give launcher='torchrun' (or 'mpi') as well"
    assert JobSpec(name="x", command=["true"], processes=2, launcher="torchrun").processes == 2
    (tmp_path / "job.yaml").write_text("name: x\ncommand: [\"true\"]\nprocesses: 2\n")
    said = dt("submit", "-f", str(tmp_path / "job.yaml"), check=False)  # the CLI's words, as before
    assert said.returncode == 2 and said.stderr == ("dtrain: error: --processes 2 needs a launcher: use dtrain "
                                                    "submit-dist --launcher torchrun or dtrain submit-mpi\n"), said.stderr
