"""Every YAML under configs/ parses and instantiates; the Kubernetes Job runs real subcommands on real configs."""

from __future__ import annotations

import csv
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from lightning_order import OrderedDataModule, OrderedTextClassifier, OrderValidator
from lightning_order.cli import OrderCLI, main
from lightning_order.cli.tools import TOOLS

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
# The language-modelling configs (lm-*.yaml) build OrderedCausalLM: tests/test_lm_configs.py covers them.
TRAINING_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("lm-"))
K8S_CONFIGS = sorted((CONFIGS / "k8s").glob("*.yaml"))
SUBCOMMANDS = {"fit", "validate", "test", "predict", *TOOLS}
# The image of configs/k8s holds this repository at /app.
IMAGE_ROOT = "/app/"


def _small_data(tmp_path: Path) -> list[str]:
    return [
        "--data.demo_size=200",
        "--data.vocab_size=200",
        "--data.max_length=32",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--trainer.default_root_dir",
        str(tmp_path),
    ]


def _write_csv(path: Path, rows: int = 200) -> Path:
    rng = random.Random(0)
    words = {0: "good great fine nice happy".split(), 1: "bad awful poor sad angry".split()}
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        for i in range(rows):
            label = i % 2
            text = " ".join(rng.choices(words[label], k=rng.randint(3, 12))) + rng.choice([".", "!", ""])
            writer.writerow([f"{text} row{i}", label])
    return path


def test_every_config_is_covered() -> None:
    assert {p.name for p in TRAINING_CONFIGS} >= {"demo.yaml", "ddp.yaml", "csv.yaml"}
    assert [p.name for p in K8S_CONFIGS] == ["train-job.yaml"]


@pytest.mark.parametrize(
    "config", [*TRAINING_CONFIGS, *K8S_CONFIGS], ids=lambda p: p.relative_to(CONFIGS).as_posix()
)
def test_config_opens_with_a_comment(config: Path) -> None:
    lines = config.read_text().splitlines()
    name = config.relative_to(CONFIGS).as_posix()
    assert lines[0].startswith(f"# {name}:"), "first line: '# <name>: what it is for'"
    header = "\n".join(line for line in lines if line.startswith("#"))
    assert "Run" in header and ("lightning-order" in header or "kubectl" in header)
    assert "verride" in header  # how to override it


@pytest.mark.parametrize("config", TRAINING_CONFIGS, ids=lambda p: p.name)
def test_config_parses_and_instantiates(config: Path, tmp_path: Path) -> None:
    args = ["--config", str(config), *_small_data(tmp_path)]
    if yaml.safe_load(config.read_text())["data"].get("dataset") == "csv":
        args += ["--data.data_files", str(_write_csv(tmp_path / "train.csv"))]
    cli = OrderCLI(args=args, run=False)
    assert isinstance(cli.datamodule, OrderedDataModule)
    assert isinstance(cli.model, OrderedTextClassifier)
    assert cli.model.hparams.vocab_size == cli.datamodule.vocab_size
    assert cli.model.hparams.num_classes == cli.datamodule.num_classes
    assert any(isinstance(cb, OrderValidator) for cb in cli.trainer.callbacks)
    trainer_config = yaml.safe_load(config.read_text())["trainer"]
    if trainer_config.get("strategy") == "ddp":
        assert cli.trainer.num_devices == trainer_config["devices"] == 2


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
        with pytest.raises(SystemExit) as exit_info:
            main([*_local(command[1:]), "--print_config"])
        assert exit_info.value.code in (0, None)

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
