"""`python -m dtrain.workloads.cifar10 {train,synth} ...`; errors print as one line, exit 2."""

import sys

from dtrain.errors import DtrainError
from dtrain.workloads.cifar10 import main

if __name__ == "__main__":
    try:
        sys.exit(main())
    except DtrainError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
