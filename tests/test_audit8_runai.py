"""The Run:AI + NetApp lane-detection walk-through, as its reader types it: lineage and results
that must read right, not only exit 0."""

from __future__ import annotations

from conftest import Dtrain


def test_a_volume_a_job_made_names_that_job_as_a_pvc_does(dt: Dtrain):
    """`--pvc local:100Gi:/mnt` makes pvc-<job>-0 for the job (Run:AI's data job); `volume describe`
    and `--json` name that job (`Job:`), as the Kubernetes backend reads it from the PVC's
    dtrain.io/job label. Before, the local backend said `Job: -` for it."""
    dt("submit", "download-data", "--pvc", "local:1Gi:/mnt", "--", "true")
    dt("wait", "download-data")
    info = dt.json("volume", "describe", "pvc-download-data-0")
    assert info["job"] == "download-data"
    assert "Job: download-data" in dt("volume", "describe", "pvc-download-data-0").stdout
    listed = {v["name"]: v for v in dt.json("volume", "list")}
    assert listed["pvc-download-data-0"]["job"] == "download-data"
    # a volume made by hand, and one restored from the job's volume, were made for no job
    dt("volume", "create", "by-hand")
    assert dt.json("volume", "describe", "by-hand")["job"] is None
    dt("snapshot", "create", "pvc-download-data-0", "--name", "s1", "--job", "download-data")
    dt("snapshot", "restore", "s1", "--to", "restored")
    restored = dt.json("volume", "describe", "restored")
    assert restored["job"] is None and restored["origin_snapshot"] == "s1"
