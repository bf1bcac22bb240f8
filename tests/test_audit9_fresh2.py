"""Audit 9 (fresh2): what a new user of the CIFAR10 workload meets when --data-dir / --test-dir
name the wrong thing."""
import pytest

from dtrain.errors import DataError
from dtrain.workloads.cifar10.data import find_root, write_synthetic


@pytest.fixture
def data(tmp_path):
    write_synthetic(tmp_path / "data", n_train=10, n_test=5, seed=0)
    return tmp_path / "data"


def test_a_batch_file_is_answered_with_its_folder(data):
    """`--data-dir .../data_batch_1` said 'unpack cifar-10-python.tar.gz first', of data already unpacked."""
    batches = data / "cifar-10-batches-py"
    for split, name, flag in (("train", "data_batch_1", "--data-dir"), ("test", "test_batch", "--test-dir")):
        with pytest.raises(DataError) as e:
            find_root(batches / name, split)
        assert str(e.value) == (f"{flag} {batches / name} is one CIFAR10 batch file, not a folder: "
                                f"give its folder, {flag} {batches}")
        assert find_root(batches, split) == (batches, "python")  # the folder it names is taken


def test_another_file_names_the_archive_as_taken(data, tmp_path):
    """The hint was to unpack the archive, which the reader takes as it is."""
    other = tmp_path / "notes.txt"
    other.write_text("x")
    with pytest.raises(DataError) as e:
        find_root(other, "train")
    assert "unpack" not in str(e.value)
    assert str(e.value).startswith(f"--data-dir {other} is a file, not a folder")
    assert "cifar-10-python.tar.gz" in str(e.value)


def test_a_missing_test_dir_is_named_as_test_dir(tmp_path):
    """A missing --test-dir said 'CIFAR10 data folder X does not exist; pass --test-dir', to one who had."""
    with pytest.raises(DataError) as e:
        find_root(tmp_path / "nope", "test")
    assert str(e.value).startswith(f"--test-dir {tmp_path / 'nope'} does not exist: ")
    assert "leave --test-dir out" in str(e.value)
    with pytest.raises(DataError, match=r"^--data-dir .*nope does not exist: .*synth --out"):
        find_root(tmp_path / "nope", "train")


@pytest.mark.parametrize("world", [1, 2])
def test_nccl_on_cpu_is_one_line_before_any_group(world):
    """`torchrun --nproc-per-node 2 ... train --backend nccl` on a CPU machine: every rank died in
    init_process_group with a traceback ("Distributed package doesn't have NCCL built in"), while one
    process took the same flag silently. Both are now the same SpecError, before a group is joined."""
    import torch.distributed as dist

    from dtrain.errors import SpecError
    from dtrain.training.dist import setup_distributed

    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}  # port 1: joining would fail, not hang
    with pytest.raises(SpecError, match="^backend nccl needs a CUDA GPU and this process runs on cpu: use --backend gloo"):
        setup_distributed("nccl", device="cpu", env=env, timeout_s=5)
    assert not dist.is_initialized()
    assert setup_distributed("gloo", device="cpu", env={**env, "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"}).world_size == 1


@pytest.mark.parametrize("args, resume", [(["--no-resume"], False), (["--no-resume", "True"], False),
                                          (["--no_resume", "True"], False), (["--no-resume", "False"], True),
                                          (["--no_resume", ""], True), ([], True)])
def test_no_resume_as_a_sagemaker_hyperparameter(data, monkeypatch, args, resume):
    """The toolkit passes a hyperparameter no-resume=true as `--no-resume True` (or `--no_resume True`,
    the name as given): refused with 'unrecognized arguments: True', as `--resume False` was once."""
    from dtrain.workloads.cifar10.train import parse_args

    monkeypatch.delenv("SM_HPS", raising=False)
    assert parse_args(["--data-dir", str(data), *args]).resume is resume


def test_no_resume_in_sm_hps_and_a_bad_value(data, monkeypatch):
    from dtrain.errors import SpecError
    from dtrain.workloads.cifar10.train import parse_args

    monkeypatch.setenv("SM_HPS", '{"no_resume": true}')
    assert parse_args(["--data-dir", str(data)]).resume is False
    monkeypatch.delenv("SM_HPS")
    with pytest.raises(SpecError, match="^--no-resume 'maybe' is not true or false"):
        parse_args(["--data-dir", str(data), "--no-resume", "maybe"])
