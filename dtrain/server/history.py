"""GPU utilisation and memory over the last minutes: `client.nodes()` sampled in one thread.

NVML gives only the present value, so the server keeps a short history itself; it lives in
memory and starts empty when the server starts (Prometheus is the long-term record).
"""

from __future__ import annotations

import threading
import time
from collections import deque

KEEP_S = 600.0  # ten minutes of samples


class GpuHistory:
    def __init__(self, clients, *, every: float = 5.0):
        self._clients = clients
        self.every = every
        self._samples: deque[dict] = deque()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dtrain-gpu-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # noqa: BLE001  a failed sample leaves a gap in the chart, never a dead thread
                pass
            self._stop.wait(self.every)

    def sample(self) -> None:
        now = time.time()
        # held: by a dtrain job or another workload; None where that cannot be told (Kubernetes RBAC)
        client = self._clients.get()
        backend = client.backend().name  # the default backend: Client.nodes() gives its nodes
        rows = [{"time": now, "node": n.name, "gpu": g.index, "backend": backend, "job": g.job, "project": g.project,
                 "held": bool(g.job or g.held_by) or (None if g.unknown else False), "utilization": g.utilization,
                 "memory_used": g.memory_used, "memory_total": g.memory_total}
                for n in client.nodes() for g in n.gpus]
        with self._lock:
            self._samples.extend(rows)
            while self._samples and self._samples[0]["time"] < now - KEEP_S:
                self._samples.popleft()

    def samples(self, since: float = 0.0) -> list[dict]:
        with self._lock:
            return [s for s in self._samples if s["time"] > since]
