"""python -m dtrain.workloads.lanes {train,predict,evaluate,synth,prepare} ...

Each command is its module's main(argv); only the chosen module is imported, so `train` under
torchrun loads no more than training needs.
"""

import importlib
import sys

from dtrain.names import near_name
from dtrain.workloads.inputs import one_line_errors

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
        near = near_name(argv[0], COMMANDS) if argv else None  # `trian`: the command meant, as dtrain names a verb
        hint = f"error: no command {argv[0]!r} (did you mean {near!r}?); " if near else ""
        print(f"{hint}usage: python -m dtrain.workloads.lanes {{{','.join(COMMANDS)}}} ...", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]])
    return one_line_errors(module.main, argv[1:])


if __name__ == "__main__":
    code = main()
    if sys.argv[1:2] == ["train"]:
        from dtrain.training import exit_process

        exit_process(code)  # os._exit after a process group: see dtrain.training.teardown
    sys.exit(code)
