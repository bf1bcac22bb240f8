"""Audit 6 of the Kubernetes backend: what the rendered objects mean once the API server, the
kubelet and the operators have read them, compared with the local backend."""

from __future__ import annotations

from string import Template

import pytest

from dtrain.backends.kubernetes import KubernetesConfig
from dtrain.backends.kubernetes.render import render_workload
from dtrain.spec import JobSpec


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion of a command argument or env value (third_party/forked/golang/
    expansion): $$ is $, $(VAR) is VAR's value where VAR is defined (else kept), any other $ stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env.get(name, f"$({name})"))
                    i = end + 1
                    continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def torchrun_substitute(args: list[str], local_rank: str) -> list[str]:
    """What torchrun's agent does to the arguments of the command it starts (its own Macros where
    torch is installed, else the string.Template call it makes)."""
    try:
        from torch.distributed.elastic.utils.api import macros
    except ImportError:
        return [Template(a).safe_substitute(local_rank=local_rank) for a in args]
    return macros.substitute(list(args), local_rank)


OPERATOR_ENV = {"RANK": "1", "MASTER_ADDR": "train-master-0", "MASTER_PORT": "23456", "HOME": "/root"}
USER_ARGS = ("sh", "-c", "kill -0 $$; echo ${local_rank} $(hostname) $HOME $$(x) a$", "$$$")


def _after_torchrun(command: list[str]) -> list[str]:
    """The argv the user's program gets in a pod that runs torchrun --no-python <command>."""
    expanded = [kubelet_expand(a, OPERATOR_ENV) for a in command]
    start = expanded.index("--no-python") + 1
    return torchrun_substitute(expanded[start:], "0")


@pytest.mark.parametrize("config", [KubernetesConfig(gpus_per_node=2),  # packed PyTorchJob
                                    KubernetesConfig(elastic_min_replicas=1, elastic_max_replicas=4),
                                    KubernetesConfig(trainer="v2", gpus_per_node=2)],
                         ids=["packed", "elastic", "trainjob"])
def test_a_command_under_torchrun_gets_its_dollars_as_given(config):
    """torchrun reads its command's arguments as string.Template: `kill $$` became `kill $` and
    ${local_rank} a number in a packed, elastic or Trainer v2 pod, unlike an unpacked pod, mpirun,
    or the local backend (which escapes $ for torchrun)."""
    spec = JobSpec(name="train", command=USER_ARGS, launcher="torchrun", processes=4, gpu=1,
                   image="r/x:1", project="p")
    job = render_workload(spec, config)
    if job["kind"] == "TrainJob":
        command = job["spec"]["trainer"]["command"]
    else:
        replicas = job["spec"]["pytorchReplicaSpecs"]
        command = next(iter(replicas.values()))["template"]["spec"]["containers"][0]["command"]
    assert _after_torchrun(command) == list(USER_ARGS)


def test_an_unpacked_pod_gets_its_dollars_as_given():
    spec = JobSpec(name="train", command=USER_ARGS, launcher="torchrun", processes=2, image="r/x:1", project="p")
    job = render_workload(spec, KubernetesConfig())
    command = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert [kubelet_expand(a, OPERATOR_ENV) for a in command] == list(USER_ARGS)


@pytest.mark.parametrize("launcher,config", [("mpi", KubernetesConfig()),
                                             ("torchrun", KubernetesConfig(trainer="v2"))])
def test_a_working_dir_put_in_a_command_stays_literal(launcher, config):
    """A pod's workingDir is not expanded by the kubelet; where dtrain passes --working-dir in the
    command instead (mpirun -wdir, a TrainJob's sh -c cd), $(VAR) in it was expanded."""
    spec = JobSpec(name="train", command=("python", "x.py"), launcher=launcher, processes=2,
                   working_dir="/data/$(HOME)/run", image="r/x:1", project="p")
    job = render_workload(spec, config)
    if job["kind"] == "TrainJob":
        command = job["spec"]["trainer"]["command"]
    else:
        command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    assert "/data/$(HOME)/run" in [kubelet_expand(a, OPERATOR_ENV) for a in command]


JOBSET_POD = __import__("re").compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")  # IsDNS1035Label, at most 63


@pytest.mark.parametrize("processes", [1, 4, 16])
def test_a_trainjob_name_leaves_room_for_its_jobset_pods(processes):
    """Trainer v2's JobSet webhook checks `<job>-node-0-<last>-abcde` against a 63-character label:
    a 53-character name (which dtrain took) made a TrainJob whose JobSet was refused, so it never ran."""
    config = KubernetesConfig(trainer="v2")
    refused = []
    for length in range(40, 54):
        spec = JobSpec(name="t" * length, command=("python", "x.py"), launcher="torchrun", processes=processes,
                       image="r/x:1", project="p")
        try:
            job = render_workload(spec, config)
        except Exception as err:  # noqa: BLE001 - the message is what is checked
            refused.append(length)
            assert "shorten the name to at most" in str(err) and "\n" not in str(err)
            continue
        nodes = job["spec"]["trainer"]["numNodes"]
        longest = f"{spec.name}-{config.trainer_node}-0-{nodes - 1}-abcde"
        assert len(longest) <= 63 and JOBSET_POD.match(longest), longest
    assert refused, "a name too long for the JobSet's pods was accepted"
    assert refused == list(range(refused[0], 54))  # every name up to the bound is taken


def _containers(job: dict) -> list[tuple[dict, dict]]:
    """(container, its pod's GPU limit or {}) for every pod template of a job object."""
    spec = job["spec"]
    if job["kind"] == "TrainJob":
        trainer = spec["trainer"]
        return [(trainer, (trainer.get("resourcesPerNode") or {}).get("limits") or {})]
    if job["kind"] in ("Job", "Notebook"):
        templates = [spec["template"]]
    else:
        templates = [r["template"] for r in (spec.get("pytorchReplicaSpecs") or spec["mpiReplicaSpecs"]).values()]
    return [(c, (c.get("resources") or {}).get("limits") or {}) for t in templates for c in t["spec"]["containers"]]


@pytest.mark.parametrize("launcher,config", [("none", KubernetesConfig()), ("torchrun", KubernetesConfig()),
                                             ("mpi", KubernetesConfig()), ("torchrun", KubernetesConfig(trainer="v2"))])
@pytest.mark.parametrize("gpu", [0, 1])
def test_a_container_without_gpus_is_shown_none(launcher, config, gpu):
    """A pod that requests no nvidia.com/gpu on a node whose default runtime is NVIDIA's sees every
    GPU when its image sets NVIDIA_VISIBLE_DEVICES=all (NVIDIA/k8s-device-plugin#61, #87): a CPU job
    would use GPUs given to other jobs, where the local backend hides them from it."""
    spec = JobSpec(name="train", command=("python", "x.py"), launcher=launcher, processes=1 if launcher == "none" else 2,
                   gpu=gpu, image="r/x:1", project="p")
    job = render_workload(spec, config)
    launcher = ((job["spec"].get("mpiReplicaSpecs") or {}).get("Launcher") or {}).get("template")
    for container, limits in _containers(job):
        env = {e["name"]: e["value"] for e in container.get("env") or []}
        if launcher and container is launcher["spec"]["containers"][0]:
            assert "NVIDIA_VISIBLE_DEVICES" not in env  # the MPI operator sets it to '' on a launcher
        elif "nvidia.com/gpu" in limits:
            assert "NVIDIA_VISIBLE_DEVICES" not in env  # the device plugin sets it
        else:
            assert env["NVIDIA_VISIBLE_DEVICES"] == "void"
    user = JobSpec(name="train", command=("python", "x.py"), env={"NVIDIA_VISIBLE_DEVICES": "all"}, image="r/x:1",
                   project="p")
    container, _ = _containers(render_workload(user, KubernetesConfig()))[0]
    assert {e["name"]: e["value"] for e in container["env"]}["NVIDIA_VISIBLE_DEVICES"] == "all"  # -e wins
