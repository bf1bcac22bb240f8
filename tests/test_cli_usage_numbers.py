"""Numbers typed in another script's digits ('١٢', Arabic-Indic 12; '１', fullwidth 1): int(), float() and
Decimal() read them as numbers, so `--processes ١٢` ran 12 processes and `config kubernetes
--gpus-per-node ١٢` saved 12, while `--set gpus_per_node=١٢` and the same flag's '²' were refused. Every
number flag now refuses them in its own one line, naming the value as typed; nothing is stored."""

from __future__ import annotations

import pytest
from conftest import Cli

from dtrain.numbers import real_number, whole_number

RUN = ("--dry-run", "--", "true")


@pytest.fixture
def cli(tmp_path, monkeypatch, capsys) -> Cli:
    monkeypatch.setenv("DTRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return Cli(capsys)


@pytest.mark.parametrize("argv, flag", [
    (("submit", "j", "--max-restarts", "١٢", *RUN), "--max-restarts"),
    (("submit", "j", "--gpu", "١٢", *RUN), "--gpu"),
    (("submit", "j", "--cpu", "١٢", *RUN), "--cpu"),
    (("submit", "j", "--cpu", "１", *RUN), "--cpu"),
    (("submit-dist", "j", "--processes", "١٢", *RUN), "--processes"),
    (("notebook", "start", "nb", "--idle-timeout", "٣٦٠٠", "--dry-run"), "--idle-timeout"),
    (("notebook", "open", "nb", "--wait", "١٢"), "--wait"),
    (("wait", "j", "--timeout", "١٢"), "--timeout"),
    (("project", "create", "p", "--gpu-quota", "١"), "--gpu-quota"),
    (("server", "--port", "١٢"), "--port"),
    (("config", "kubernetes", "--gpus-per-node", "١٢"), "gpus_per_node"),
])
def test_another_scripts_digits_are_refused_as_typed(cli, tmp_path, argv, flag):
    typed = next(a for a in argv if not a.isascii())
    said = cli.refused(*argv)
    assert said.startswith(f"dtrain: error: invalid ") and f"{flag} '{typed}'" in said, said
    assert not (tmp_path / "home" / "config.yaml").exists() or "gpus_per_node" not in (
        tmp_path / "home" / "config.yaml").read_text()


def test_the_gpus_per_node_flag_reads_numbers_as_every_number_flag_does(cli, tmp_path):
    """It was argparse's plain int: 'nan' got "invalid int value", not the setting's own line."""
    assert cli.refused("config", "kubernetes", "--gpus-per-node", "nan") == (
        "dtrain: error: invalid Kubernetes gpus_per_node nan: use a whole number from 1 to 2147483647; "
        "nothing was changed")
    assert cli.ok("config", "kubernetes", "--gpus-per-node", "8") == "Kubernetes settings saved: gpus_per_node=8\n"
    # read as typed, as every number flag reads it, and saved as the plain number (YAML wrote no TypedInt:
    # a traceback, once the flag read 1e1 as every number flag does)
    assert cli.ok("config", "kubernetes", "--gpus-per-node", "1e1") == "Kubernetes settings saved: gpus_per_node=10\n"
    assert "  gpus_per_node: 10\n" in (tmp_path / "home" / "config.yaml").read_text()


def test_the_number_readers_keep_other_digits_as_text():
    """The CLI's flags and the HTTP API's parameters (?tail=, ?timeout=) read numbers with these two."""
    assert whole_number("١٢") == "١٢" and real_number("١٢") == "١٢" and real_number(" ٣.5") == " ٣.5"
    assert whole_number("12") == 12 and real_number("1.5") == 1.5


@pytest.mark.parametrize("argv", [("cifar10", "synth", "--out", "s", "--n-train", "١٢"),
                                  ("lanes", "synth", "--out", "s", "--train", "١٢"),
                                  ("bench", "scaling", "--workload", "cifar10", "--data-dir", ".", "--repeats", "١٢")])
def test_a_workloads_whole_number_flag_refuses_another_scripts_digits(cli, tmp_path, argv):
    """The workloads' own parsers (also run under torchrun, without dtrain) read int()'s '١٢' as 12:
    `cifar10 synth --n-train ١٢` wrote 12 images."""
    said = cli.refused(*argv)
    assert said.startswith(f"dtrain: error: {argv[-2]} ١٢ is not a whole number: give "), said
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("argv, flag", [(("logs", "j", "--since", "١s"), "--since"),
                                        (("volume", "list", "--older-than", "١d"), "--older-than"),
                                        (("snapshot", "list", "--older-than", "1h٣٠m"), "--older-than")])
def test_a_go_duration_in_another_scripts_digits_is_refused(cli, argv, flag):
    """`logs --since ١s` and `volume list --older-than ١d` were read as 1s and 1d (the duration's \\d)."""
    assert cli.refused(*argv).startswith(f"dtrain: error: invalid {flag} '{argv[-1]}': use a duration")
    assert cli("volume", "list", "--older-than", "1d")[0] == 0 and cli("logs", "x", "--since", "2µs")[2].startswith(
        "dtrain: error: no job named 'x'")  # ASCII digits, and Go's µs, are still durations


@pytest.mark.parametrize("flag, value", [("--region", "us-east-١"), ("--role", "arn:aws:iam::123456789012:role/Rölé"),
                                         ("--role", "arn:aws:iam::١٢٣٤٥٦٧٨٩٠١٢:role/R")])
def test_a_sagemaker_setting_in_other_scripts_letters_or_digits_is_refused(cli, tmp_path, flag, value):
    """The region's and role's patterns took \\d and \\w of any script: 'us-east-١' was saved."""
    said = cli.refused("config", "sagemaker", flag, value)
    assert said.startswith(f"dtrain: error: invalid SageMaker {flag} '{value}': use a value like "), said
    assert not (tmp_path / "home" / "config.yaml").exists()


def test_a_deleted_job_ttl_in_another_scripts_digits_is_refused(cli, tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.yaml").write_text("deleted_job_ttl: ١d\n")
    assert cli.refused("list") == (f"dtrain: error: {tmp_path}/home/config.yaml: invalid deleted_job_ttl '١d'; "
                                   f"use a duration such as 30m, 12h or 7d")


def test_cifar10s_device_in_another_scripts_digits_is_refused(cli):
    assert cli.refused("cifar10", "train", "--device", "cuda:١", "--data-dir", ".").startswith(
        "dtrain: error: --device 'cuda:١' is not a device: give cpu or cuda")


@pytest.mark.parametrize("argv, said", [
    (("bench", "scaling", "--workload", "cifar10", "--data-dir", ".", "--cpu-per-process", "١"),
     "--cpu-per-process ١ is out of range: give 0.01 to 1024"),  # float() read it as 1: a run of 1 CPU each
    (("bench", "scaling", "--workload", "cifar10", "--data-dir", ".", "--batch", ""),
     "--batch '' is not a whole number: give 1 to 65536"),  # it said '--batch nan', a value nobody typed
    (("cifar10", "synth", "--out", "s", "--n-train", " "), "--n-train ' ' is not a whole number: give 5 to"),
])
def test_a_workloads_number_flag_names_what_was_typed(cli, tmp_path, argv, said):
    assert cli.refused(*argv).startswith(f"dtrain: error: {said}")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("steps, warmup", [("3", "5"), ("5", "5"), ("6", "5")])
def test_bench_scaling_steps_not_past_the_warmup_is_one_line_before_any_run(cli, tmp_path, steps, warmup):
    """Pinned (already so): both values and the fix named, exit 2, no job submitted."""
    said = cli.refused("bench", "scaling", "--workload", "cifar10", "--data-dir", ".", "--steps", steps,
                       "--warmup", warmup)
    assert said == (f"dtrain: error: --steps {steps} leaves no steps to time after --warmup {warmup}: give --steps "
                    f"{int(warmup) + 2} or more (or a smaller --warmup), e.g. --steps 20 --warmup 5")
    assert cli.ok("list", "-A").startswith("No jobs")


@pytest.mark.parametrize("typed", ["1_000", "017", "1e3", "0x10", "1:30", "0", "2147483648", "nan", "x"])
def test_config_set_reads_a_number_setting_as_its_flag_does(cli, tmp_path, typed):
    """`--set gpus_per_node=1_000` was YAML 1.1's refusal ('numbers are taken in decimal digits only') of
    what --gpus-per-node 1_000 saves; 0x10 and 1:30 were YAML's words too. Now the same number, bounds
    and refusal line as the flag's."""
    flag = cli("config", "kubernetes", "--gpus-per-node", typed)
    by_set = cli("config", "kubernetes", "--set", f"gpus_per_node={typed}")
    assert by_set == flag, (typed, by_set, flag)
