"""This machine as a node: its labels, as a Kubernetes node's, and whether a job's node selector
can match them (pure but for the host's name and architecture).

Kubernetes leaves a pod whose nodeSelector no node satisfies Pending for ever; here the one node
is known at submit, so such a job is refused at once, naming the labels the machine has."""

from __future__ import annotations

import platform
import socket
from collections.abc import Mapping

from dtrain.errors import SpecError
from dtrain.spec import LABEL_VALUE_RE, JobSpec

# Go's names for an architecture (GOARCH), which the kubelet sets as kubernetes.io/arch
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
         "s390x": "s390x", "riscv64": "riscv64", "i686": "386", "i386": "386", "armv7l": "arm"}


def node_labels(configured: Mapping[str, str]) -> dict[str, str]:
    """The kubelet's well-known labels of this machine, then config.yaml's `node_labels` (which may
    not replace them: the machine's name, system and architecture are what they are)."""
    machine = platform.machine().lower()
    own = {"kubernetes.io/arch": _ARCH.get(machine, machine), "kubernetes.io/os": platform.system().lower()}
    host = socket.gethostname().lower()
    if LABEL_VALUE_RE.match(host):  # a name longer than a label value takes is left out, as no pod could name it
        own["kubernetes.io/hostname"] = host
    return {**configured, **own}


def check_selector(spec: JobSpec, labels: Mapping[str, str], config_file: str) -> None:
    """Refuse a job whose node selector this machine's labels do not satisfy: one line naming the
    labels asked for, the ones the machine has, and how to give it one of its own. A SpecError (the
    HTTP API's 422): a request this backend can never meet as it stands, not a quota that frees up."""
    missing = {k: v for k, v in spec.node_selector.items() if labels.get(k) != v}
    if not missing:
        return
    asked = ", ".join(f"{k}={v}" for k, v in missing.items())
    has = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
    fixed = [k for k in missing if k in WELL_KNOWN]
    if fixed:  # what the kubelet reports cannot be set by hand
        fix = (f"{', '.join(fixed)} {'is' if len(fixed) == 1 else 'are'} the machine's own: drop --node-selector "
               f"{fixed[0]}={missing[fixed[0]]}, or submit it where such a node is (--backend kubernetes)")
    else:
        sets = " ".join(f"--set {k}={v}" for k, v in missing.items())
        fix = (f"drop --node-selector/--node-type, or give this machine the label{'s' * (len(missing) > 1)}: "
               f"dtrain config node-labels {sets} (saved in {config_file}'s node_labels:)")
    raise SpecError(f"job {spec.name!r} asks for a node with {asked}, but this machine (the local backend's one "
                    f"node) has {has}: {fix}")


WELL_KNOWN = ("kubernetes.io/arch", "kubernetes.io/os", "kubernetes.io/hostname")
