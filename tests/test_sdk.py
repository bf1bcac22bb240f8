"""The Python SDK as a notebook or a script uses it: `import dtrain`, `dtrain.Client`, `dtrain.JobSpec`.
A mistake is a dtrain.errors class naming the fix, never an AttributeError or TypeError from inside."""

from __future__ import annotations

import pytest

import dtrain
from dtrain.errors import SpecError


@pytest.fixture
def client(home) -> dtrain.Client:
    return dtrain.Client(home=home)


@pytest.mark.parametrize("spec", [{"name": "train", "command": ["true"]}, None, "train"])
@pytest.mark.parametrize("verb", ["submit", "render"])
def test_submit_refuses_what_is_not_a_job_spec(client, verb, spec):
    with pytest.raises(SpecError, match=r"takes a JobSpec.*JobSpec\.from_dict"):
        getattr(client, verb)(spec)
    assert client.list() == []


def test_dir_lists_the_lazy_exports():
    """A notebook completes `dtrain.<Tab>` from dir(): the SDK's names must be there, though lazy."""
    assert set(dtrain.__all__) <= set(dir(dtrain))
    with pytest.raises(AttributeError, match="no attribute 'Clinet'"):
        dtrain.Clinet  # noqa: B018


def test_wait_timeout_is_in_dtrain_errors(client):
    """The error tree is dtrain.errors: wait's timeout is caught from there like every other error."""
    from dtrain.errors import DtrainError, TimeoutError_

    client.submit(dtrain.JobSpec(name="slow", command=["sleep", "30"]))
    try:
        with pytest.raises(TimeoutError_, match="still") as caught:
            client.wait("slow", timeout=0)
        assert isinstance(caught.value, DtrainError) and isinstance(caught.value, TimeoutError)
    finally:
        client.delete("slow")


@pytest.mark.parametrize("command", ["python train.py", b"python train.py"])
def test_a_command_given_as_one_string_is_named_as_such(command):
    """command='python train.py' was refused as 'has no command ... put it after --', a CLI hint."""
    with pytest.raises(SpecError, match=r"invalid command .*python train.py.*must be a list of strings.*"
                                        r"command=\['python', 'train.py'"):
        dtrain.JobSpec(name="train", command=command)
    with pytest.raises(SpecError, match="has no command"):
        dtrain.JobSpec(name="train", command="")


def test_parse_env_refuses_one_string():
    """parse_env('A=1') read each character as one -e and named the first: "invalid -e 'A'"."""
    with pytest.raises(SpecError, match=r"invalid -e list 'A=1': give a list of KEY=VALUE strings"):
        dtrain.parse_env("A=1")
    assert dtrain.parse_env(["A=1", "B=x=y"]) == {"A": "1", "B": "x=y"}


def test_submit_uses_the_configured_project_and_backend_as_the_cli_does(home):
    """A spec that names no project or backend goes where `dtrain submit` would send it: the configured
    default project, and this Client's backend or that project's configured one. It went to project
    'default' on the local backend, where `Client(backend='sagemaker').get(name)` then found nothing."""
    from dtrain.backends.local.backend import LocalBackend

    client = dtrain.Client(home=home)
    client.create_project("team-a")
    client.set_default_project("team-a")
    client = dtrain.Client(home=home)
    info = client.submit(dtrain.JobSpec(name="one", command=["true"]))
    assert (info.spec.project, info.backend) == ("team-a", "local")
    explicit = client.submit(dtrain.JobSpec(name="two", command=["true"], project="default"))
    assert explicit.spec.project == "default"  # one given is kept, 'default' too

    class Other(LocalBackend):  # the local backend under another name: where Client(backend=...) sends jobs
        name = "other"

    other = dtrain.Client(home=home, backend="other", backends={"other": Other(home)})
    spec = dtrain.JobSpec(name="three", command=["true"]).replace(gpu=0)  # replace keeps them unset
    assert other.render(spec)[0]["backend"] == "other"
    assert other.submit(spec).spec.backend == "other"
    assert other.get("three").spec.project == "team-a"
    kept = other.submit(dtrain.JobSpec(name="four", command=["true"], backend="local"))
    assert kept.spec.backend == "local"  # a backend the spec names wins, as --backend on the verb does
    for name in ("one", "two", "three", "four"):
        client.wait(name, timeout=60)


def test_a_spec_outside_a_client_reads_project_default_and_backend_local():
    spec = dtrain.JobSpec(name="train", command=["true"])
    assert (spec.project, spec.backend) == ("default", "local")
    assert dtrain.JobSpec.from_dict(spec.to_dict()) == spec
    for key in ("project", "backend"):
        with pytest.raises(SpecError, match=f"invalid {key} None"):
            dtrain.JobSpec.from_dict({"name": "train", "command": ["true"], key: None})


@pytest.mark.parametrize("verb", ["create_volume", "render_volume"])
def test_a_volume_size_is_a_quantity_string(client, verb):
    """create_volume('data', size=10) made a volume of 10 bytes (NewVolume refuses a number alike)."""
    with pytest.raises(SpecError, match=r"invalid volume size 10: must be a string such as '100Gi'"):
        getattr(client, verb)("data", size=10)
    assert client.list_volumes() == []
    with pytest.raises(SpecError, match=r"invalid volume size '10': a number without a unit is bytes .* e.g. 10Gi"):
        getattr(client, verb)("data", size="10")  # kubectl reads 10 bytes: never the volume meant
    assert client.create_volume("data", size="10Gi").size_bytes == 10 * 2**30


def test_list_and_page_of_a_project_that_does_not_exist_are_refused_as_the_cli_does(client):
    """client.list(project='nope') was [], read as a project without jobs where it is a typo."""
    from dtrain.errors import NotFoundError

    for verb in (client.list, client.page, client.list_notebooks):
        with pytest.raises(NotFoundError, match=r"no project named 'nope' \(projects: default\)"):
            verb(project="nope")
    assert client.list(project="default") == [] and client.page(project="default").total == 0


def test_deleting_a_deleted_job_is_not_found_unless_purged(client):
    """A second client.delete() returned the record quietly where `dtrain delete` and the HTTP
    DELETE say the job was already deleted."""
    from dtrain.errors import NotFoundError

    client.submit(dtrain.JobSpec(name="once", command=["true"]))
    assert client.delete("once").status == dtrain.JobStatus.DELETED
    with pytest.raises(NotFoundError, match=r"job 'once' was already deleted; .*purge=True"):
        client.delete("once")
    client.delete("once", purge=True)
    assert client.list() == []


@pytest.mark.parametrize("home", [3, ["/tmp"], b"/tmp"])
def test_a_home_that_is_no_path_is_named(home):
    with pytest.raises(SpecError, match=r"invalid home .*: give a folder's path as a string or a Path"):
        dtrain.Client(home=home)
