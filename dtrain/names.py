"""Names and sizes, checked the same way by every part of dtrain (Kubernetes rules): kept
apart from the job spec so that the storage layer imports only this.

Each naming rule is written here once: object names, storage-class names, quantities, and
the names dtrain gives to what it makes for a job (`pvc-<job>-<i>`).
"""

from __future__ import annotations

import re

from dtrain.errors import SpecError

NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|K|M|G|T|P|k)?$")
CLASS_RE = re.compile(r"^[a-z0-9][-a-z0-9.]*$")  # a StorageClass name (DNS-1123 subdomain)
_UNITS = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def check_name(name: str, what: str = "job") -> str:
    """Names follow Kubernetes DNS-1123 labels so every backend accepts them unchanged."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SpecError(
            f"invalid {what} name {name!r}: use 1-53 lower-case letters, digits or '-', "
            f"starting and ending with a letter or digit (e.g. 'train-lanes-1')")
    return name


def check_storage_class(name: str) -> str:
    """A storage class: 'local' on the local backend, a StorageClass name on Kubernetes."""
    if not isinstance(name, str) or not CLASS_RE.match(name):
        raise SpecError(f"invalid storage class {name!r}: use lower-case letters, digits, "
                        f"'-' or '.', e.g. 'local'")
    return name


MAX_SIZE = 2**60  # 1 EiB: above any disk or memory; keeps float parsing finite


def parse_size(text: str, what: str = "size", *, minimum: int = 0) -> int:
    """'100Gi' -> bytes. Kubernetes quantity suffixes (Ki, Mi, Gi, Ti; k, M, G, T); at most 1 EiB."""
    m = SIZE_RE.match(str(text).strip()) if isinstance(text, (str, int)) and not isinstance(text, bool) else None
    if not m:
        raise SpecError(f"invalid {what} {text!r}: use a Kubernetes quantity such as 512Mi, 100Gi or 2G")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if not minimum <= value <= MAX_SIZE:
        raise SpecError(f"invalid {what} {text!r}: use a quantity between {minimum} bytes and 1Ei, e.g. 100Gi")
    return int(value)


def parse_volume_size(text: str) -> int:
    """A volume's size: a quantity of at least one byte (`--size 0` is refused)."""
    return parse_size(text, "volume size", minimum=1)


def job_volume_name(job: str, index: int) -> str:
    """Run:AI's naming: the i-th new volume (`--pvc CLASS:SIZE:MOUNT`) of job J is pvc-J-i."""
    return f"pvc-{job}-{index}"

