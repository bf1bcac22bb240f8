"""A notebook as a job (pure): the JupyterLab server's command, its working folder and HOME."""

from __future__ import annotations

from typing import Any, Mapping

from dtrain.errors import Worded
from dtrain.names import check_name
from dtrain.spec.job import JobSpec
from dtrain.spec.volumes import _volumes


# JupyterLab (its server, jupyter-server, with the Lab front end; Python kernels from ipykernel), as
# Kubeflow's jupyter notebook images run it: `pip install 'dtrain[notebook]'`.
NOTEBOOK_SERVER = ("jupyter-lab", "--ServerApp.ip=127.0.0.1", "--ServerApp.open_browser=False",
                   "--ServerApp.allow_root=True",  # port and token come from the launcher, per run
                   # saves replace files, never write through a link (dtrain/backends/local/notebook.py)
                   "--ServerApp.contents_manager_class=dtrain.backends.local.notebook.VolumeContentsManager")


def notebook_spec(name: str, *, volumes=(), door: str = "sdk", **fields: Any) -> JobSpec:
    """`dtrain notebook NAME --pvc VOLUME:/home/jovyan`: a one-process job running Jupyter, rooted
    at the first volume's mount path (Kubeflow mounts a notebook's workspace volume at its image's
    home, /home/jovyan). `door`: whose words a refusal told apart by door uses (errors.Worded)."""
    check_name(name, "notebook")  # its own word in the message; the job's rule
    volumes = _volumes(volumes)  # a list; 'data:/mnt' alone would be read a character at a time
    root = (f"--ServerApp.root_dir={volumes[0].mount_path}",) if volumes else ()
    if volumes:  # the server and its terminals work in the workspace volume, as a Kubeflow notebook's
        fields.setdefault("working_dir", volumes[0].mount_path)
    try:
        return JobSpec(name=name, command=NOTEBOOK_SERVER + root, volumes=volumes, notebook=True, **fields)
    except Worded as err:  # said in the SDK's words: in the door's
        raise err.in_words(door) from None


# The HOME a notebook's own HOME (its workspace) replaced: what the jobs started from its terminal get back.
OUTER_HOME = "DTRAIN_OUTER_HOME"
# The notebook's own HOME, as its terminal starts: a HOME other than it there was the user's doing
# (`HOME=/x dtrain submit`, `export HOME=/x`) and is kept, as it is outside a notebook.
NOTEBOOK_HOME = "DTRAIN_NOTEBOOK_HOME"


def outer_home(environ: Mapping[str, str]) -> str | None:
    """Pure: the HOME a job submitted with `environ` gets: the submitter's, or, in a notebook's terminal
    whose HOME is still the notebook's own (its workspace), the HOME of whoever started the notebook."""
    home = environ.get("HOME")
    if environ.get(OUTER_HOME) and home == environ.get(NOTEBOOK_HOME, home):  # no NOTEBOOK_HOME: an older notebook
        return environ[OUTER_HOME]
    return home


def notebook_home(spec: JobSpec) -> str | None:
    """A notebook's HOME: its workspace, the first volume's mount path, as a Kubeflow notebook's home
    (/home/jovyan) is its workspace volume: what Jupyter, pip --user, IPython and the user keep in
    ~/ is on the volume, there again after a suspend or a restart, and seen by the jobs that mount
    it. None without a volume (the local backend's notebook then works in a folder of its own)."""
    return spec.volumes[0].mount_path if spec.notebook and spec.volumes else None


# JupyterLab keeps its layout (open tabs, panels) in ~/.jupyter/lab/workspaces: two notebooks whose
# home is one shared volume (teammates, each with a notebook on the team's volume) overwrote each
# other's layout there. Each notebook keeps its own in a folder named after it, still on the volume
# (there again after a restart, as Kubeflow keeps it); ~/.jupyter's settings stay shared, as they were.
WORKSPACES_ENV = "JUPYTERLAB_WORKSPACES_DIR"


def workspaces_dir(name: str, home: str) -> str:
    """Pure: notebook `name`'s JupyterLab workspaces folder under its HOME `home`."""
    return f"{home.rstrip('/')}/.jupyter/lab/workspaces/{name}"
