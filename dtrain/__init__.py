"""dtrain: distributed deep-learning training on one machine or a cluster, with versioned volumes.

The public SDK: ``Client``, ``JobSpec``, ``VolumeMount``, ``NewVolume``, ``Toleration``, ``JobStatus`` and the
exception tree in ``dtrain.errors``. Training code imports only ``dtrain.training``.
"""

from dtrain.errors import DtrainError

__all__ = ["Client", "DtrainError", "JobSpec", "JobStatus", "NewVolume", "Toleration", "VolumeMount", "parse_env",
           "parse_pvc"]
__version__ = "0.1.0"


def __getattr__(name):
    # Lazy: `import dtrain.training` inside a job must not pull in backends or SQLite, and
    # `import dtrain.storage` (a snapshot from the CLI) not the job spec.
    if name in ("JobSpec", "NewVolume", "Toleration", "VolumeMount", "parse_env", "parse_pvc"):
        from dtrain import spec
        return getattr(spec, name)
    if name == "Client":
        from dtrain.client import Client
        return Client
    if name == "JobStatus":
        from dtrain.backends.base import JobStatus
        return JobStatus
    raise AttributeError(f"module 'dtrain' has no attribute {name!r}")


def __dir__():
    # The lazy names too: a notebook's completion (dtrain.<Tab>) and help() list what dir() gives.
    return sorted({*globals(), *__all__})
