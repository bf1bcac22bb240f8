"""python -m dtrain.workloads.lanes {train,predict,evaluate,synth,prepare} ...

Each command is its module's main(argv); only the chosen module is imported, so `train` under
torchrun loads no more than training needs.
"""

import importlib
import sys

from dtrain.errors import DtrainError
from dtrain.workloads.inputs import MACHINE_ERRNOS

COMMANDS = {
    "train": "dtrain.workloads.lanes.train",  # SCNN data-parallel training
    "predict": "dtrain.workloads.lanes.predict",  # TuSimple predictions, overlays, metric
    "evaluate": "dtrain.workloads.lanes.metric",  # TuSimple accuracy / FP / FN of a prediction file
    "synth": "dtrain.workloads.lanes.synth",  # synthetic TuSimple-format data
    "prepare": "dtrain.workloads.lanes.prepare",  # download / extract / precompute masks
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m dtrain.workloads.lanes {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]])
    try:
        return module.main(argv[1:]) or 0
    except DtrainError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        if err.errno not in MACHINE_ERRNOS:
            raise
        # a full, read-only or forbidden disk: one line, as the dtrain command prints it
        where = f" writing {err.filename}" if err.filename else ""
        print(f"error: {err.strerror}{where}: use a folder you can write to, with free space", file=sys.stderr)
        return 2


if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] == ["train"]:
        from dtrain.training import exit_process

        exit_process(code)  # os._exit after a process group: see dtrain.training.teardown
    sys.exit(code)
