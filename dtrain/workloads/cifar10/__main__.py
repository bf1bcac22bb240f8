"""`python -m dtrain.workloads.cifar10 {train,synth} ...`; errors print as one line, exit 2."""

import sys

from dtrain.errors import DtrainError
from dtrain.training import exit_process
from dtrain.workloads.cifar10 import main

if __name__ == "__main__":
    try:
        code = main()
    except DtrainError as e:
        print(f"error: {e}", file=sys.stderr)
        code = 2
    exit_process(code)  # os._exit after a process group: see dtrain.training.teardown
