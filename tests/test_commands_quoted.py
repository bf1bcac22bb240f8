"""Messages that named a command in parentheses, unquoted ("create the volume first (dtrain volume create)",
"restart the notebook (dtrain delete nb, then dtrain notebook start nb)"), quote it as every other message
does ("... with 'dtrain volume create'")."""
from __future__ import annotations

import pytest

from dtrain.backends.local.notebook import ACCESS_FILE, read_access
from dtrain.client_settings import _aws_region
from dtrain.errors import ConflictError, SpecError
from dtrain.spec import JobSpec
from dtrain.spec.volumes import parse_pvc


def test_a_new_read_only_volume_names_volume_create_quoted():
    with pytest.raises(SpecError, match="or create the volume first with 'dtrain volume create' and mount it with "
                                        "VOLUME:MOUNT:ro$"):
        parse_pvc("local:1Gi:/mnt:ro")
    with pytest.raises(SpecError, match="create the volume first with 'dtrain volume create' and mount it with {"):
        JobSpec.from_dict({"name": "j", "command": ["true"], "volumes": [
            {"storage_class": "local", "size": "1Gi", "mount_path": "/mnt", "read_only": True}]})


def test_an_unreadable_notebook_access_file_names_both_commands_quoted(tmp_path):
    (tmp_path / ACCESS_FILE).write_text("not json")
    with pytest.raises(ConflictError) as err:
        read_access(tmp_path, "nb")
    assert str(err.value).endswith(": remove it, then restart the notebook with 'dtrain delete nb' and "
                                   "'dtrain notebook start nb'"), str(err.value)


def test_a_bad_aws_region_variable_quotes_the_config_command(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "nowhere")
    with pytest.raises(SpecError, match=r"or unset it \('dtrain config sagemaker --region REGION' sets dtrain's "
                                        r"own\)$"):
        _aws_region("AWS_REGION")
