"""`python -m dtrain.workloads.cifar10 {train,synth,download} ...`; errors print as one line, exit 2."""

from dtrain.training import exit_process
from dtrain.workloads.inputs import one_line_errors
from dtrain.workloads.cifar10 import main

if __name__ == "__main__":
    exit_process(one_line_errors(main))  # os._exit after a process group: see dtrain.training.teardown
