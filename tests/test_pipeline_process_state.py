"""A pipeline run in this process leaves `print` and the root logger as it found them.

kfp.local swaps both around each task; the tasks of a `dsl.ParallelFor` run in two threads at once,
and a swap put back out of order stayed: every later `print` in the process indented, and the root
logger writing to the `sys.stdout` of that moment (closed since, in a test: "--- Logging error ---
I/O operation on closed file" when moto's server logged, tests later). The HTTP server, a notebook
or an SDK user runs pipelines in a process that lives on.
"""

from __future__ import annotations

import builtins
import io
import logging
import textwrap
from pathlib import Path

import pytest

from kfp.local import logging_utils

from dtrain.pipelines import runner

LOOP = textwrap.dedent('''
    from kfp import dsl

    @dsl.component(base_image="python:3.11")
    def wait(seconds: str) -> str:
        import time
        time.sleep(float(seconds))
        return seconds

    @dsl.pipeline(name="loop")
    def loop():
        # the first task (started first) ends first: it puts back the real print while the
        # second still runs, and the second then puts back the first one's indenting print
        with dsl.ParallelFor(["0", "3"]) as item:
            wait(seconds=item).set_caching_options(False)
''')


@pytest.mark.slow
def test_a_parallel_for_run_gives_print_and_the_root_logger_back(tmp_path):
    module = tmp_path / "loop.py"
    module.write_text(LOOP)
    root = logging.getLogger()
    before = (builtins.print, root.handlers[:], root.level)
    result = runner.run(runner.load(module=f"{module}:loop"), {}, home=tmp_path / "home", root=tmp_path / "runs")
    assert sorted(t.outputs["Output"] for t in result.tasks) == ["0", "3"]  # both tasks ran
    assert builtins.print is before[0]
    assert root.handlers == before[1] and root.level == before[2]


def test_swaps_put_back_out_of_order_are_undone():
    """The order the threads above may take, with kfp's own context managers, step by step."""
    root = logging.getLogger()
    real_print, handlers, level = builtins.print, root.handlers[:], root.level
    with runner._print_and_logging_kept():
        first_log, first_print = logging_utils.local_logger_context(), logging_utils.indented_print()
        second_log, second_print = logging_utils.local_logger_context(), logging_utils.indented_print()
        for cm in (first_log, first_print, second_log, second_print):
            cm.__enter__()
        for cm in (first_print, first_log, second_print, second_log):  # the first task ends first
            cm.__exit__(None, None, None)
        assert builtins.print is not real_print  # what kfp leaves: the first task's indenting print
        assert root.handlers != handlers
    assert builtins.print is real_print
    assert root.handlers == handlers and root.level == level
    buffer = io.StringIO()
    print("x", file=buffer)
    assert buffer.getvalue() == "x\n"


def test_a_failed_run_gives_them_back_too(tmp_path):
    module = tmp_path / "broken.py"
    module.write_text(LOOP.replace("time.sleep(float(seconds))", "raise SystemExit('no: ' + seconds)"))
    root = logging.getLogger()
    before = (builtins.print, root.handlers[:])
    try:
        runner.run(runner.load(module=f"{module}:loop"), {}, home=tmp_path / "home", root=tmp_path / "runs")
    except Exception as err:  # the run's own one-line failure
        assert "pipeline 'loop' failed" in str(err)
    else:
        raise AssertionError("a failing step must fail the run")
    assert builtins.print is before[0] and root.handlers == before[1]
    assert Path(tmp_path / "runs").is_dir()
