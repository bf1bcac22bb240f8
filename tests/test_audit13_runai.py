"""A Run:AI + NetApp user on dtrain (audit 13): the flags and habits of `runai submit-mpi`, `runai
logs`/`exec`, the lane-detection walk-through, each mistake one line naming what to type."""

from __future__ import annotations

import pytest
from conftest import assert_usage_error


# ---- Run:AI's flags that dtrain spells otherwise -------------------------------------------------
@pytest.mark.parametrize("words, needle", [
    (["--name", "train"], "the job's name is the first word: dtrain submit NAME [options] -- COMMAND"),
    (["train", "--backoff-limit", "2"], "restarts after a failure are --max-restarts N"),
    (["train", "--memory-limit", "8Gi"], "is --memory"),
    (["train", "--existing-pvc", "claimname=data,path=/mnt"], "--pvc data:/mnt"),
    (["train", "--interactive"], "dtrain notebook NAME"),
    (["train", "--command"], "the words after '--' are always the command"),
    (["train", "--preemptible"], "the preemptible ones: 'dtrain project list' shows the quotas"),  # it named it in ()
])
def test_a_runai_submit_flag_is_named_with_ours(dt, words, needle):
    """Each was "unrecognized arguments" alone, or (a flag with a value) "the command goes after '--'",
    which the command already did."""
    proc = dt("submit", *words, "--", "true", check=False)
    flag = words[0] if words[0] != "train" else words[1]
    assert_usage_error(proc, f"{flag} is Run:AI's: ", needle, "(see 'dtrain submit --help')")
    assert "the command goes after" not in proc.stderr
    assert dt.json("list", "-A") == []


def test_a_misspelt_flag_is_named_with_the_one_meant(dt):
    """`--proceses 2` said "the command goes after '--'" (the '2'), with the command after '--'."""
    proc = dt("submit-mpi", "train", "--proceses", "3", "--gpu", "1", "--", "true", check=False)
    assert_usage_error(proc, "unrecognized arguments: --proceses 3; did you mean --processes?",
                       "(see 'dtrain submit-mpi --help')")
    assert "the command goes after" not in proc.stderr
    proc = dt("logs", "train", "--tial", "3", check=False)
    assert_usage_error(proc, "did you mean --tail?")
    proc = dt("submit", "train", "python", "train.py", check=False)  # a command without '--' is still told so
    assert_usage_error(proc, "the command goes after '--'")
    assert dt.json("list", "-A") == []


def test_runai_volume_flag_is_not_read_as_sagemakers_volume_size(dt):
    """`runai submit -v /data:/mnt` habits: `--volume /data:/mnt` was taken for --volume-size, refused
    as "invalid --volume-size '/data:/mnt': use a whole number"."""
    for words in (["--volume", "/data:/mnt"], ["--volume=/data:/mnt"], ["-v", "/data:/mnt"]):
        proc = dt("submit", "train", *words, "--", "true", check=False)
        assert_usage_error(proc, f"{words[0].split('=')[0]} is Run:AI's", "--pvc VOLUME:MOUNT[:ro]")
        assert "volume-size" not in proc.stderr
    assert dt.json("list", "-A") == []


@pytest.mark.parametrize("verb, tail", [("exec", ["--", "ls"]), ("bash", []), ("logs", [])])
def test_runai_pod_flag_names_the_rank(dt, verb, tail):
    """`runai exec JOB --pod JOB-1 -- ls`: exec took --pod for --pod-running-timeout ("invalid
    --pod-running-timeout 'train-1': use seconds"); logs said only "unrecognized"."""
    dt("submit", "train", "--", "true")
    proc = dt(verb, "train", "--pod", "train-1", *tail, check=False)
    assert_usage_error(proc, f"--pod is Run:AI's: a job's processes are its ranks here: dtrain {verb} train --rank R",
                       "'train-1' is no pod of job 'train'")
    assert "pod-running-timeout" not in proc.stderr


# ---- a hint that names a listing must list the job ----------------------------------------------
@pytest.mark.slow
def test_a_deleted_jobs_refusals_name_the_listing_that_shows_it(dt):
    """`runai delete` then `runai exec`/`resume` habits: the refusal said "see 'dtrain list'", which hides
    a Deleted job; the listing named is the one that shows it. A job that ended otherwise keeps 'dtrain list'."""
    dt("submit", "gone", "--", "sleep", "60")
    dt("delete", "gone")
    for words in (["exec", "gone", "--", "ls"], ["resume", "gone"]):
        proc = dt(*words, check=False)
        assert_usage_error(proc, "job 'gone' is Deleted", "(see 'dtrain list --show-deleted')")
    assert "gone" not in dt("list").stdout and "gone" in dt("list", "--show-deleted").stdout
    dt("submit", "done", "--", "true")
    dt("wait", "done")
    assert_usage_error(dt("suspend", "done", check=False), "job 'done' is Succeeded", "(see 'dtrain list')")


# ---- a typo'd volume at submit -------------------------------------------------------------------
def test_a_misspelt_volume_at_submit_is_named_with_the_near_one(dt):
    """`--pvc pvc-download-tusimple-dat-0:/mnt` said "no volume named ..." alone at submit (and in its dry
    run, and for the seed's PVC_NAME), where `volume describe` of the same name said "did you mean"."""
    dt("volume", "create", "tusimple", "--size", "1Gi")
    for words in (["--pvc", "tusimpl:/mnt"], ["--pvc", "tusimpl:/mnt", "--dry-run"],
                  ["--pvc", "tusimple:/a", "--pvc", "tusimpl:/b"],
                  ["-e", "ENABLE_SNAPSHOT=true", "-e", "PVC_NAME=tusimpl"], ["--snapshot-on-success", "tusimpl"]):
        proc = dt("submit", "train", *words, "--", "true", check=False)
        assert_usage_error(proc, "no volume named 'tusimpl' (did you mean 'tusimple'?)", "dtrain volume list")
    assert_usage_error(dt("submit", "train", "--pvc", "zzzzzz:/mnt", "--", "true", check=False),
                       "no volume named 'zzzzzz': list volumes")  # nothing near: no guess
    assert dt.json("list", "-A") == []


# ---- an unknown flag in place of a required one -------------------------------------------------
def test_an_unknown_flag_given_for_a_required_one_is_named(dt):
    """`volume update work --speed fast` said only that --class is required, as if nothing had been
    typed; the unknown flag is named first (NetApp's --tier has its own line: test_polish1)."""
    dt("volume", "create", "work", "--size", "1Gi")
    proc = dt("volume", "update", "work", "--speed", "fast", check=False)
    assert_usage_error(proc, "unrecognized arguments: --speed; the following arguments are required: --class",
                       "(see 'dtrain volume update --help')")
    proc = dt("artifacts", "train", "--t0", "out", check=False)
    assert_usage_error(proc, "unrecognized arguments: --t0 (did you mean --to?); the following arguments are "
                             "required: --to")
    assert_usage_error(dt("artifacts", "train", check=False), "error: the following arguments are required: --to")
    assert dt.json("volume", "describe", "work")["storage_class"] == "local"


# ---- a misspelt project -------------------------------------------------------------------------
def test_a_misspelt_project_is_named_with_the_near_one_before_creating_it(dt):
    """`-p lane-detectoin` at submit (and `config project`) said "create it first with 'dtrain project create
    lane-detectoin'": the fix it named makes the typo a project; the near one is named first. `list -p` too."""
    dt("project", "create", "lane-detection")
    for words in (["submit", "x", "-p", "lane-detectoin", "--", "true"], ["config", "project", "lane-detectoin"]):
        assert_usage_error(dt(*words, check=False),
                           "no project named 'lane-detectoin' (did you mean 'lane-detection'?); a new project is "
                           "made with 'dtrain project create lane-detectoin' (projects: default, lane-detection)")
    assert_usage_error(dt("list", "-p", "lane-detectoin", check=False),
                       "no project named 'lane-detectoin' (did you mean 'lane-detection'? projects: default, lane-detection)")
    assert_usage_error(dt("submit", "x", "-p", "zzz", "--", "true", check=False),  # nothing near: as before
                       "no project named 'zzz'; create it first with 'dtrain project create zzz'")
    assert dt.json("list", "-A") == [] and "lane-detectoin" not in dt("project", "list").stdout
