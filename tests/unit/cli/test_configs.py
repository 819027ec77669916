"""configs/: every YAML documented, each command line names its pipeline, and the Kubernetes Job runs
real subcommands on real configs.

Every training config instantiated through ``OrderCLI`` (both pipelines):
tests/unit/data/engine/test_datamodule_contract.py; the main jobs end to end:
tests/integration/test_command_line.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import CONFIGS, ROOT

from lightning_order.cli import main, spec_of_command
from lightning_order.cli.tools import TOOLS

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")

K8S_CONFIGS = sorted((ROOT / "configs" / "k8s").glob("*.yaml"))
SUBCOMMANDS = {"fit", "validate", "test", "predict", *TOOLS}
# The image of configs/k8s holds this repository at /app.
IMAGE_ROOT = "/app/"


def _name(config: Path) -> str:
    return config.relative_to(ROOT / "configs").as_posix()


def test_every_config_is_covered() -> None:
    names = [p.name for p in CONFIGS]
    assert set(names) >= {"demo.yaml", "ddp.yaml", "csv.yaml"}
    assert [n for n in names if n.startswith("lm-")] == ["lm-ddp.yaml", "lm-demo.yaml", "lm-sharded.yaml"]
    assert [p.name for p in K8S_CONFIGS] == [
        "lm-ray-prepare-1tb.yaml",
        "lm-ray-prepare.yaml",
        "train-job.yaml",
    ]


@pytest.mark.parametrize("config", [*CONFIGS, *K8S_CONFIGS], ids=_name)
def test_config_opens_with_a_comment(config: Path) -> None:
    lines = config.read_text().splitlines()
    name = _name(config)
    assert lines[0].startswith(f"# {name}:"), "first line: '# <name>: what it is for'"
    header = "\n".join(line for line in lines if line.startswith("#"))
    run = "kubectl" if config in K8S_CONFIGS else f"lightning-order fit --config configs/{name}"
    assert "Run" in header and run in header
    assert "verride" in header  # how to override it


def test_the_command_line_names_its_pipeline() -> None:
    assert spec_of_command(["--config", str(ROOT / "configs" / "demo.yaml")]).name == "standard"
    for config in CONFIGS:
        expected = "lm" if config.name.startswith("lm-") else "standard"
        assert spec_of_command(["--config", str(config)]).name == expected, config.name
    assert spec_of_command(["--model", "lightning_order.OrderedCausalLM"]).name == "lm"
    assert (
        spec_of_command(["--model.class_path=lightning_order.models.causal_lm.OrderedCausalLM"]).name
        == "lm"
    )
    assert spec_of_command([]).name == "standard"


def test_a_linked_dim_set_in_the_config_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["fit", "--config", str(ROOT / "configs" / "lm-demo.yaml"), "--data.max_documents=200"]
    args += ["--data.vocab_size=300", "--data.block_size=16", "--data.cache_dir", str(tmp_path / "cache")]
    args += ["--trainer.default_root_dir", str(tmp_path), "--model.init_args.block_size=8"]
    assert main(args) == 2
    assert "model.init_args.block_size=8" in capsys.readouterr().err


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def _k8s_docs() -> list[dict[str, Any]]:
    return [doc for path in K8S_CONFIGS for doc in yaml.safe_load_all(path.read_text()) if doc]


def _local(argv: list[str]) -> list[str]:
    """The container's arguments with the image's /app paths mapped onto this checkout."""
    out = []
    for arg in argv:
        if arg.startswith(IMAGE_ROOT):
            local = ROOT / arg[len(IMAGE_ROOT) :]
            assert local.is_file(), f"{arg} names {local}, which is not in the repository"
            arg = str(local)
        out.append(arg)
    return out


def test_k8s_job_commands_name_real_subcommands_and_configs(tmp_path: Path) -> None:
    jobs = [doc for doc in _k8s_docs() if doc["kind"] == "Job"]
    assert len(jobs) == 1
    job = jobs[0]
    spec = job["spec"]["template"]["spec"]
    init, main_container = spec["initContainers"][0], spec["containers"][0]
    commands = {}
    for container in _containers(job):
        command = [str(c) for c in container["command"] + container.get("args", [])]
        assert command[0] == "lightning-order"
        assert command[1] in SUBCOMMANDS, f"{command[1]} is no lightning-order subcommand"
        assert "--config" in command
        commands[container["name"]] = command
    assert commands[init["name"]][1] == "prepare"
    assert commands[main_container["name"]][1] == "fit"

    # Both commands parse with this checkout's CLI (--print_config stops before any work).
    for command in commands.values():
        assert _print_config(command) in (0, None)

    # Prepare and fit share the config and the cache: fit finds what the init container made.
    def option(command: list[str], name: str) -> str:
        return command[command.index(name) + 1]

    prepare_cmd, fit_cmd = commands[init["name"]], commands[main_container["name"]]
    assert option(prepare_cmd, "--config") == option(fit_cmd, "--config")
    assert option(prepare_cmd, "--data.cache_dir") == option(fit_cmd, "--data.cache_dir")
    mounts = {m["mountPath"] for m in init["volumeMounts"]} & {
        m["mountPath"] for m in main_container["volumeMounts"]
    }
    assert option(fit_cmd, "--data.cache_dir") in mounts

    # Lightning's multi-node environment, consistent with the Job's size.
    env = {e["name"]: e for e in main_container["env"]}
    assert {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE"} <= set(env)
    nodes = int(option(fit_cmd, "--trainer.num_nodes"))
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == nodes
    assert job["spec"]["completionMode"] == "Indexed"
    config = yaml.safe_load((ROOT / option(fit_cmd, "--config")[len(IMAGE_ROOT) :]).read_text())
    assert int(env["WORLD_SIZE"]["value"]) == nodes * config["trainer"]["devices"]
    assert "job-completion-index" in env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
    service = next(doc for doc in _k8s_docs() if doc["kind"] == "Service")
    assert env["MASTER_ADDR"]["value"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert spec["subdomain"] == service["metadata"]["name"]


def _print_config(command: list[str]) -> int | str | None:
    """The exit code of ``command`` with ``--print_config``: returned (``prepare``'s own parser) or
    raised by LightningCLI (``fit``)."""
    try:
        return main([*_local(command[1:]), "--print_config"])
    except SystemExit as exit_info:
        return exit_info.code


@pytest.mark.parametrize("name", ["lightning-order-lm-prepare", "lightning-order-lm-prepare-1tb"])
def test_the_ray_prepare_job_runs_the_ray_engine_into_the_training_volume(name: str) -> None:
    import shlex

    rayjob = next(doc for doc in _k8s_docs() if doc["kind"] == "RayJob" and doc["metadata"]["name"] == name)
    command = shlex.split(rayjob["spec"]["entrypoint"])
    assert command[:2] == ["lightning-order", "prepare"]

    def option(name: str) -> str:
        return command[command.index(name) + 1]

    assert option("--data.engine") == "ray" and option("--data.ray_address") == "auto"
    assert _print_config(command) in (0, None)  # parses with this checkout's CLI
    # Head and every worker mount the training Job's volume where the cache is written.
    cluster = rayjob["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [
        group["template"]["spec"] for group in cluster["workerGroupSpecs"]
    ]
    claim = next(doc for doc in _k8s_docs() if doc["kind"] == "PersistentVolumeClaim")["metadata"]["name"]
    for pod in pods:
        volumes = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for c in pod["containers"] for m in c["volumeMounts"]}
        assert volumes[mounts[option("--data.cache_dir")]] == claim
