"""Bad input to the workload commands, through the real `dtrain` command: one line naming the
problem and the fix, exit 2, no traceback, nothing started (no workers forked, no disk filled)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from conftest import Dtrain

GT = {"lanes": [[-2, 300, 310, 320], [-2, 600, 590, 580]], "h_samples": [240, 250, 260, 270],
      "raw_file": "clips/a/1/20.jpg"}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Scratch inputs in tmp_path, which is also the commands' working folder."""
    (tmp_path / "gt.json").write_text(json.dumps(GT) + "\n")
    (tmp_path / "gt_twice.json").write_text((json.dumps(GT) + "\n") * 2)
    pred = {"raw_file": GT["raw_file"], "lanes": [[-2, 301.5, 311.2, 318.9]], "run_time": 12.5}
    (tmp_path / "pred.json").write_text(json.dumps(pred) + "\n")
    (tmp_path / "pred_null.json").write_text(json.dumps({**pred, "lanes": [[-2, None, 311.2, 318.9]]}) + "\n")
    (tmp_path / "pred_big.json").write_text(json.dumps(pred).replace("301.5", "1" + "0" * 400) + "\n")
    (tmp_path / "pred_slow.json").write_text(json.dumps({**pred, "run_time": "slow"}) + "\n")
    (tmp_path / "afile").write_text("x")
    for name in ("bad.tar.gz", "bad.zip", "bad.rar"):
        (tmp_path / name).write_bytes(b"garbage")
    return tmp_path


CASES = [
    # 1. every number of `lanes train` and `cifar10 train` has a lower and an upper bound
    (["lanes", "train", "--num-workers", "100000", "--use-workers"], {},
     "--num-workers 100000 is out of range: give 0 to 64, e.g. --num-workers 64"),
    (["lanes", "train", "--use-workers"], {"NUM_WORKERS": "100000"}, "NUM_WORKERS=100000 is out of range: give 0 to 64, e.g. NUM_WORKERS=64"),
    (["lanes", "train", "--max-steps", "99999999999999999999"], {},
     "--max-steps 99999999999999999999 is out of range: give 1 to 10000000, e.g. --max-steps 10000000"),
    (["lanes", "train", "--lr", "1e300"], {}, "--lr 1e300 is out of range: give a number above 0 and at most 10, e.g. 0.05"),
    (["lanes", "train", "--lr", "nan"], {}, "--lr nan is out of range: give a number above 0 and at most 10, e.g. 0.05"),
    (["cifar10", "train", "--data-dir", ".", "--lr", "nan"], {},
     "--lr nan is out of range: give a number above 0 and at most 10, e.g. 0.001"),
    (["cifar10", "train", "--data-dir", ".", "--num-workers", "100000"], {},
     "--num-workers 100000 is out of range: give 0 to 64, e.g. --num-workers 64"),
    # usage errors of the workloads' own parsers are one line too
    (["lanes", "train", "--max-steps", "abc"], {},
     "--max-steps abc is not a whole number: give 1 to 10000000, e.g. --max-steps 1"),
    (["lanes", "train", "--max-steps", "1.5"], {},  # argparse said only "invalid int value: '1.5'", then no range
     "--max-steps 1.5 is not a whole number: give 1 to 10000000, e.g. --max-steps 2"),
    (["lanes", "train", "--max-steps", "1e30"], {}, "--max-steps 1e30 is out of range: "  # as typed, not the float 1e30 is
     "give 1 to 10000000, e.g. --max-steps 10000000"),
    # 2. prediction values the official script crashes on; a GT frame given twice
    (["lanes", "evaluate", "--pred", "pred_null.json", "--gt", "gt.json"], {},
     "pred_null.json:1: lanes[0][1] is null: x coordinates are numbers (-2 where there is no point)"),
    (["lanes", "evaluate", "--pred", "pred_big.json", "--gt", "gt.json"], {},
     "pred_big.json:1: lanes[0][1] is 1000000000000000000000000000000000000...: x coordinates are numbers "
     "(-2 where there is no point)"),
    (["lanes", "evaluate", "--pred", "pred_slow.json", "--gt", "gt.json"], {},
     'pred_slow.json:1: run_time must be a number of milliseconds, got "slow"'),
    (["lanes", "evaluate", "--pred", "pred.json", "--gt", "gt_twice.json"], {},
     "gt_twice.json:2: ground-truth frame clips/a/1/20.jpg appears twice (first at gt_twice.json:1): "
     "give one line per frame"),
    # 3. a folder or a device is no file
    (["lanes", "evaluate", "--pred", "/tmp", "--gt", "gt.json"], {},
     "prediction file /tmp is a folder, not a file: give a TuSimple JSON-lines file ('dtrain lanes predict' writes one)"),
    (["lanes", "evaluate", "--pred", "pred.json", "--gt", "/dev/null"], {},
     "label file /dev/null is not a regular file: give a TuSimple JSON-lines file (or run 'dtrain lanes prepare')"),
    # 4. synth: frame counts bounded, an --out that cannot be a folder
    (["lanes", "synth", "--out", "s", "--train", "99999999999999", "--test", "2"], {},
     "--train 99999999999999 is out of range: give 0 to 100000, e.g. --train 100000"),
    (["lanes", "synth", "--out", "afile", "--train", "2", "--test", "2"], {},
     "--out afile is a file, not a folder: give a folder (it is created if missing)"),
    (["lanes", "synth", "--out", "afile/sub", "--train", "2", "--test", "2"], {},
     "--out afile/sub: a part of the path is a file, not a folder: give a folder path"),
    (["lanes", "synth", "--out", "/proc/x", "--train", "2", "--test", "2"], {},
     "--out /proc/x cannot be created (No such file or directory): give a folder you can write to"),
    (["cifar10", "synth", "--out", "c", "--n-train", "99999999"], {},
     "--n-train 99999999 is out of range: give 5 to 1000000, e.g. --n-train 1000000"),
    # 5. prepare: the mask size bounded, a damaged archive and an unknown file type in one line
    (["lanes", "prepare", "--url", "gt.json", "--out", "o4", "--size", "30000x30000"], {},
     "--size width 30000 is out of range: give 16 to 4096, e.g. 4096"),
    (["lanes", "prepare", "--url", "bad.tar.gz", "--out", "o2"], {},
     "archive bad.tar.gz is damaged or not a zip or tar archive: download it again"),
    (["lanes", "prepare", "--url", "bad.zip", "--out", "o2"], {},
     "archive bad.zip is damaged or not a zip or tar archive: download it again"),
    (["lanes", "prepare", "--url", "bad.rar", "--out", "o3"], {},
     "--url bad.rar is neither an archive nor a label file that prepare reads: give .zip, .tar, .tar.gz, .tgz archives "
     "(train_set.zip, test_set.zip) and .json label files (test_label.json)"),
    # 6. predict: a device torch does not know, or one predict does not run on
    (["lanes", "predict", "--checkpoint", "gt.json", "--out", "p.json", "--device", "gpu"], {},
     "dtrain lanes predict: error: --device 'gpu' is not a device: give cpu or cuda (see 'dtrain lanes predict --help')"),
    (["lanes", "predict", "--checkpoint", "gt.json", "--out", "p.json", "--device", "meta"], {},
     "dtrain lanes predict: error: --device meta: predict runs on cpu or cuda (see 'dtrain lanes predict --help')"),
    # 7. train: output folders that cannot be folders, a backend this torch lacks
    (["lanes", "train", "--out-dir", "afile"], {},
     "--out-dir afile is a file, not a folder: give a folder (it is created if missing)"),
    (["lanes", "train", "--out-dir", "afile/sub"], {},
     "--out-dir afile/sub: a part of the path is a file, not a folder: give a folder path"),
    (["lanes", "train", "--out-dir", "run", "--checkpoint-dir", "afile"], {},
     "--checkpoint-dir afile is a file, not a folder: give a folder (it is created if missing)"),
    pytest.param(["lanes", "train", "--out-dir", "run", "--backend", "mpi"], {},
                 "--backend mpi: this torch is built without MPI: give gloo (CPU) or nccl (GPU), or leave it out to "
                 "pick one for the device",
                 marks=pytest.mark.skipif(torch.distributed.is_mpi_available(), reason="this torch has MPI")),
    # 8. a --url that is no URL, or names no file here
    (["lanes", "prepare", "--url", "http://[::1/x.tar.gz", "--out", "o2"], {},
     "--url http://[::1/x.tar.gz is not a URL (Invalid IPv6 URL): give http(s)://HOST/FILE, file:///PATH or a path"),
    (["cifar10", "download", "--out", "o2", "--url", "http://[::1/x.tar.gz"], {},
     "--url http://[::1/x.tar.gz is not a URL (Invalid IPv6 URL): give http(s)://HOST/FILE, file:///PATH or a path"),
    (["cifar10", "download", "--out", "o2", "--url", "example.com/x.tar.gz"], {},
     "--url example.com/x.tar.gz does not exist: give the CIFAR10 python archive (cifar-10-python.tar.gz) or its URL"),
    # 9. backbone weights that torch.load cannot read
    (["lanes", "train", "--out-dir", "run", "--backbone-weights", "gt.json"], {},
     "backbone weights gt.json: not a file torch.save wrote; give VGG16-BN features saved with "
     "torch.save(vgg16_bn().features.state_dict(), path)"),
]


@pytest.mark.parametrize("args, env, message", CASES,
                         ids=[" ".join(getattr(c, "values", c)[0][:3]) + f" {i}" for i, c in enumerate(CASES)])
def test_bad_input_gives_one_line_and_exit_2(home, files, args, env, message):
    proc = Dtrain(home, env)(*args, check=False, cwd=files)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert re.fullmatch(r"(dtrain: error: )?" + re.escape(message), proc.stderr.strip()), proc.stderr
    assert not (files / "s").exists() and not (files / "o4").exists() and not (files / "c").exists()


@pytest.mark.parametrize("value, low, high, says", [
    (10.0000001, 0, 10, "--lr 10.0000001 is out of range: give 0 to 10, e.g. --lr 10"),  # '%g' made it 10: "10 is out of range"
    (12.345678, 0, 10, "--lr 12.345678 is out of range"),
    (1e300, 0, 10, "--lr 1e+300 is out of range"),
    (-1.0, 0, 10.0, "--lr -1 is out of range: give 0 to 10, e.g. --lr 0"),
    (0.0001234567, 0.001, 0.999, "--lr 0.0001234567 is out of range: give 0.001 to 0.999, e.g. --lr 0.001"),
])
def test_a_workload_refusal_quotes_every_digit_of_the_number(value, low, high, says):
    from dtrain.errors import SpecError
    from dtrain.workloads.inputs import in_range

    with pytest.raises(SpecError) as e:
        in_range("--lr", value, low, high)
    assert str(e.value) == says or str(e.value).startswith(says), str(e.value)


@pytest.mark.parametrize("typed", ["1e9", "-0", "+20", "0020"])
def test_a_workload_refusal_quotes_a_whole_number_as_typed(typed):
    """`--max-steps 1e9` was refused as '1000000000 is out of range', `-0` as '0'."""
    import pickle

    from dtrain.errors import SpecError
    from dtrain.workloads.inputs import in_range, whole_number

    value = whole_number(typed)
    assert value == int(float(typed))
    with pytest.raises(SpecError) as e:
        in_range("--max-steps", value, 1, 10)
    assert str(e.value).startswith(f"--max-steps {typed} is out of range: give 1 to 10, e.g. --max-steps ")
    assert type(pickle.loads(pickle.dumps(value))) is int  # a data loader's workers get a plain number


def test_the_cli_quotes_a_workload_number_as_typed(home):
    proc = Dtrain(home)("lanes", "train", "--recipe", "tiny", "--max-steps", "1e9", check=False)
    assert proc.returncode == 2 and proc.stderr.strip() == \
        "dtrain: error: --max-steps 1e9 is out of range: give 1 to 10000000, e.g. --max-steps 10000000", proc.stderr


@pytest.mark.parametrize("typed", ["1e9", "-0", "1e400", "2048.0"])
def test_a_workload_refusal_quotes_a_number_as_typed(typed):
    """`--cpu-per-process 1e9` was refused as '1e+09 is out of range', `1e400` as 'inf'."""
    import pickle

    from dtrain.errors import SpecError
    from dtrain.workloads.inputs import in_range, real_number

    value = real_number(typed)
    assert value == float(typed)
    with pytest.raises(SpecError) as e:
        in_range("--cpu-per-process", value, 0.01, 1024)
    assert str(e.value).startswith(f"--cpu-per-process {typed} is out of range: give 0.01 to 1024, e.g. ")
    assert type(pickle.loads(pickle.dumps(value))) is float


def test_a_flags_typed_number_in_a_checkpoint_loads_with_weights_only(tmp_path):
    """`--lr 0.05` reached the optimizer's param_groups (and the scheduler's base_lrs) as the class
    that keeps its typed text: torch.load(weights_only=True) refused it, so every checkpoint of a
    run given --lr read as damaged and a resume started over."""
    import torch

    from dtrain.training.checkpoint import save_atomic
    from dtrain.workloads.inputs import real_number, whole_number

    lr, steps = real_number("0.05"), whole_number("1e3")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=real_number("9e-1"))
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=steps)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
             "extra": {"lr": lr, "steps": steps, "nested": (lr, {"k": [steps]}), "on": True}}
    save_atomic(state, tmp_path / "ckpt.pt")
    back = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    assert back["optimizer"]["param_groups"][0]["lr"] == 0.05 and back["extra"]["steps"] == 1000
    assert type(back["extra"]["lr"]) is float and type(back["extra"]["nested"][1]["k"][0]) is int
    assert back["extra"]["on"] is True and back["extra"]["nested"][0] == 0.05
    model.load_state_dict(back["model"])  # the model's state_dict kept what load_state_dict reads
