"""SageMaker's failure file: what a job writes to output/failure is the job's FailureReason.

A log's last line is often a launcher's (torchrun ends a failure with a row of '='), so every
error of the workload, a usage error included, also goes there on SageMaker. Light (standard library,
dtrain.errors, dtrain.workloads.inputs): every command's main is wrapped by it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from dtrain.errors import DtrainError
from dtrain.replace import open_in
from dtrain.workloads.inputs import Parser

RESOURCE_CONFIG_FILE = Path("/opt/ml/input/config/resourceconfig.json")  # in every SageMaker training container
OPT_ML_OUTPUT = Path("/opt/ml/output")
MAX_FAILURE = 1024  # SageMaker's FailureReason: the first 1024 characters of output/failure


def reports_failure(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """A command's main that, on SageMaker, also writes its error to the failure file (the dtrain CLI
    and `python -m` both call the command's main)."""
    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except Exception as err:
            write_failure(str(err) if isinstance(err, DtrainError) else f"{type(err).__name__}: {err}")
            raise

    return wrapped


class CommandParser(Parser):
    """The commands' parser: a usage error is one line (exit 2), also written to the failure file."""

    def error(self, message: str):
        write_failure(f"{self.prog}: error: {message}")
        super().error(message)


def failure_file(env: Mapping[str, str] | None = None) -> Path | None:
    """$SM_OUTPUT_DIR/failure (the training toolkit's), /opt/ml/output/failure in a SageMaker container
    without it, else None: elsewhere nothing reads the file."""
    env = os.environ if env is None else env
    if env.get("SM_OUTPUT_DIR", "").strip():
        return Path(env["SM_OUTPUT_DIR"]) / "failure"
    return OPT_ML_OUTPUT / "failure" if RESOURCE_CONFIG_FILE.is_file() else None


def write_failure(text: str) -> None:
    """`text`, on one line, into the failure file, unless one is there (another rank's: the first
    failure) or the file or its folder is a link (never followed). Never raises: the error itself
    is what the caller reports."""
    path = failure_file()
    fd = None if path is None else open_in(path.parent, path.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    if fd is None:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(" ".join(text.split())[:MAX_FAILURE] + "\n")
    except OSError:
        pass
