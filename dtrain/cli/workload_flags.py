"""Each workload command's flags for `dtrain completion` (the flag and what is offered after it: its
choices, '' for a value of its own, None for none). Written by `python scripts/workload_flags.py` from
the workloads' parsers, which import torch; tests/test_cli_completion.py holds the two equal."""

WORKLOAD_FLAGS: dict[str, dict[str, str | None]] = {
    "lanes prepare": {
        "-h": None, "--help": None, "--url": "", "--sha256": "", "--out": "", "--size": "", "--force": None,
    },
    "lanes synth": {
        "-h": None, "--help": None, "--out": "", "--train": "", "--test": "", "--seed": "", "--archive": None,
    },
    "lanes train": {
        "-h": None, "--help": None, "--recipe": "demo paper tiny", "--data-dir": "", "--out-dir": "",
        "--max-steps": "", "--epochs": "", "--stop-after": "", "--lr": "", "--seed": "",
        "--backend": "gloo nccl mpi", "--backbone-weights": "", "--resume": None, "--no-resume": None,
        "--checkpoint-every": "", "--checkpoint-dir": "", "--batch-size": "", "--use-workers": None,
        "--no-use-workers": None, "--num-workers": "", "--use-val": None, "--no-use-val": None,
        "--val-batch-size": "", "--enable-snapshot": None, "--no-enable-snapshot": None, "--pvc-name": "",
        "--bf16": None, "--no-bf16": None, "--cuda-graphs": None, "--no-cuda-graphs": None,
        "--keep-heap": None, "--no-keep-heap": None,
    },
    "lanes predict": {
        "-h": None, "--help": None, "--checkpoint": "", "--data-dir": "", "--split": "test train val",
        "--out": "", "--overlays": "", "--max-overlays": "", "--batch-size": "", "--threshold": "",
        "--limit": "", "--device": "", "--bf16": None, "--no-bf16": None, "--keep-heap": None,
        "--no-keep-heap": None, "--json": None,
    },
    "lanes evaluate": {
        "-h": None, "--help": None, "--pred": "", "--gt": "", "--json": None,
    },
    "cifar10 train": {
        "-h": None, "--help": None, "--batch-size": "", "--epochs": "", "--lr": "", "--momentum": "",
        "--backend": "", "--device": "", "--data-dir": "", "--test-dir": "", "--model-dir": "", "--seed": "",
        "--max-steps": "", "--metrics-file": "", "--num-workers": "", "--log-interval": "",
        "--checkpoint-dir": "", "--checkpoint-every": "", "--keep-checkpoints": "", "--resume": "true false",
        "--no-resume": "true false",
    },
    "cifar10 synth": {
        "-h": None, "--help": None, "--out": "", "--format": "python binary", "--n-train": "", "--n-test": "",
        "--seed": "",
    },
    "cifar10 download": {
        "-h": None, "--help": None, "--out": "", "--url": "", "--md5": "",
    },
    "bench scaling": {
        "-h": None, "--help": None, "--workload": "cifar10 lanes", "--processes": "", "--data-dir": "",
        "--out": "", "--gpu": "", "--cpu-per-process": "", "--batch": "", "--steps": "", "--warmup": "",
        "--repeats": "", "--ceiling": None, "--project": "", "--home": "", "--json": None,
    },
}
