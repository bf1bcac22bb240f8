"""GPU discovery for the local backend: NVML, then nvidia-smi, or an injected inventory.

Tests and dry runs inject an inventory with `DTRAIN_GPUS` (a count such as `2`, or ids such as
`0,1`); the scheduler only ever sees the resulting list of ids and cannot tell the difference.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from dtrain.backends.base import GpuInfo
from dtrain.errors import SpecError


def inventory(env=None) -> list[GpuInfo]:
    """Every GPU on this machine (or injected), in index order."""
    env = os.environ if env is None else env
    injected = env.get("DTRAIN_GPUS")
    if injected is not None:
        return _injected(injected)
    return _nvml() or _nvidia_smi() or []


MAX_INJECTED = 1024  # an injected inventory is a test stand-in: keep it to a size a machine has


def _injected(text: str) -> list[GpuInfo]:
    text = text.strip()
    if text.isdigit() and int(text) > MAX_INJECTED or len(text) > 8 * MAX_INJECTED:
        raise SpecError(f"invalid DTRAIN_GPUS={text[:20]!r}: at most {MAX_INJECTED} injected GPUs")
    if text.isdigit():
        return [GpuInfo(index=str(i), name="injected") for i in range(int(text))]
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not all(i.isdigit() for i in ids) or len(set(ids)) != len(ids):
        raise SpecError(f"invalid DTRAIN_GPUS={text!r}: use a count (e.g. 2) or distinct ids (e.g. 0,1)")
    return [GpuInfo(index=i, name="injected") for i in ids]


def _nvml() -> list[GpuInfo]:
    try:
        import pynvml  # from nvidia-ml-py
        pynvml.nvmlInit()
    except Exception:  # no library or no driver: not an NVIDIA machine
        return []

    def ask(query, handle):
        """One value, None when NVML cannot give it: a MIG-enabled GPU has no utilisation
        (NVMLError_NotSupported, nvidia-smi's "N/A"), a GPU fallen off the bus answers nothing.
        The GPU is still listed, as nvidia-smi lists it: one value it lacks made every command that
        reads the inventory (submit, nodes, the dashboard) end in a traceback."""
        try:
            return query(handle)
        except pynvml.NVMLError:
            return None

    try:
        count = ask(lambda _: pynvml.nvmlDeviceGetCount(), None) or 0  # unanswered: nvidia-smi is asked next
        out = []
        for i in range(count):
            h = ask(pynvml.nvmlDeviceGetHandleByIndex, i)
            mem = None if h is None else ask(pynvml.nvmlDeviceGetMemoryInfo, h)
            util = None if h is None else ask(pynvml.nvmlDeviceGetUtilizationRates, h)
            name = None if h is None else ask(pynvml.nvmlDeviceGetName, h)
            out.append(GpuInfo(index=str(i), name=(name.decode() if isinstance(name, bytes) else name) or "",
                               memory_total=None if mem is None else int(mem.total),
                               memory_used=None if mem is None else int(mem.used),
                               utilization=None if util is None else float(util.gpu)))
        return out
    finally:
        pynvml.nvmlShutdown()


def _nvidia_smi() -> list[GpuInfo]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,utilization.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    gpus = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 5 and parts[0].isdigit():
            num = lambda s: float(s) if s.replace(".", "", 1).isdigit() else None  # noqa: E731
            total, used = num(parts[2]), num(parts[3])
            gpus.append(GpuInfo(index=parts[0], name=parts[1],
                                memory_total=None if total is None else int(total * 2**20),
                                memory_used=None if used is None else int(used * 2**20),
                                utilization=num(parts[4])))
    return gpus
