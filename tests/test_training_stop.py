"""A SIGTERM is never lost, whenever it comes: every rank stops after the same step.

Python runs a signal handler between two bytecodes. One that ran right after `should_stop`'s
all-reduce returned, and before its result was stored, set the flag the result then overwrote:
the rank trained on until SIGKILL (a stopped SageMaker job ran 30 s more, 3,480 steps, and its
rerun resumed past the end). Here rank 0's signal comes exactly there, deterministically.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO

RANKS = textwrap.dedent('''
    import json, os, signal, sys
    import torch.distributed as dist
    from dtrain.training import GracefulStop

    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=rank, world_size=2)
    real = dist.all_reduce

    def signal_as_it_returns(tensor, op):
        """The all-reduce, then SIGTERM: its handler runs before should_stop stores the result."""
        real(tensor, op=op)
        if rank == 0 and not seen:
            seen.append(1)
            os.kill(os.getpid(), signal.SIGTERM)

    seen = []
    dist.all_reduce = signal_as_it_returns
    with GracefulStop() as stop:
        answers = [stop.should_stop() for _ in range(3)]
        print(json.dumps({"rank": rank, "answers": answers, "signalled": getattr(stop, "signalled", None)}), flush=True)
    dist.destroy_process_group()
''')


@pytest.mark.slow
def test_a_signal_during_the_all_reduce_stops_every_rank_at_the_next_step(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(script), str(rank), str(port)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    got = {r["rank"]: r for r in (json.loads(out.strip().splitlines()[-1]) for out, _err in outs)}
    # the first call's all-reduce was already done when the signal came; the next one carries it
    assert got[0]["answers"] == got[1]["answers"] == [False, True, True]
    assert got[0]["signalled"] and not got[1]["signalled"]


WORKER = textwrap.dedent('''
    import multiprocessing, os, signal, subprocess, sys, time
    from dtrain.training import leave_stop_to_parent

    def work(ready):
        leave_stop_to_parent()
        ready.set()
        time.sleep(120)

    if __name__ == "__main__":
        multiprocessing.set_start_method("fork")
        ready = multiprocessing.Event()
        worker = multiprocessing.Process(target=work, args=(ready,), daemon=True)
        worker.start()
        ready.wait(60)
        for sig in ("TERM", "INT"):  # as torchrun, the local backend or a terminal sends them to all
            subprocess.run(["kill", f"-{sig}", str(worker.pid)], check=True)
        worker.join(1.0)
        alive = worker.is_alive()
        worker.terminate()  # the loader's own stop (and multiprocessing's at exit)
        worker.join(60)
        print(alive, worker.exitcode, flush=True)
''')


@pytest.mark.slow
def test_a_loader_worker_ignores_stop_signals_of_others_but_not_its_training_process(tmp_path):
    """torchrun signals a rank's whole process group: a worker that died of it made the rank fail
    mid-step without a checkpoint. Yet the loader's own terminate() must still end a worker, else
    every interpreter exit (multiprocessing joins its daemonic children) hangs."""
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "0"]
