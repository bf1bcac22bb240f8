"""The CIFAR10 workload: the reference small CNN, both on-disk formats, DDP training.

    python -m dtrain.workloads.cifar10 synth --out DIR [--format python|binary] [--n-train N] ...
    python -m dtrain.workloads.cifar10 train --data-dir DIR --model-dir OUT [--batch-size B] ...
    python -m dtrain.workloads.cifar10 download --out DIR [--url URL] [--md5 HEX]

Runs inside jobs, so it imports nothing from dtrain but dtrain.errors, dtrain.replace (files
written whole), dtrain.training and dtrain.workloads.inputs (the checks of user input every
workload shares).
"""

from __future__ import annotations

USAGE = "usage: python -m dtrain.workloads.cifar10 {train,synth,download} [options]  (add --help after a command)"


def main(argv: list[str] | None = None) -> int:
    """Dispatch `train ...`, `synth ...` or `download ...`; the dtrain CLI can call this with its own argv."""
    import sys

    from dtrain.errors import SpecError
    from dtrain.names import near_name

    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        from dtrain.workloads.cifar10.train import main as train_main

        return train_main(rest)
    if command == "synth":
        from dtrain.workloads.cifar10.data import synth_main

        return synth_main(rest)
    if command == "download":
        from dtrain.workloads.cifar10.download import download_main

        return download_main(rest)
    near = near_name(command, ["train", "synth", "download"])  # `trian`: the command meant, as dtrain names a verb
    hint = f" (did you mean {near!r}?)" if near else ""
    raise SpecError(f"unknown cifar10 command {command!r}{hint}; use 'train', 'synth' or 'download'")
