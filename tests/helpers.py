"""Helpers shared by the test files (one copy of each)."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from launching import launch_env

from lightning_order.ledger import StepLedger

#: The tests folder (shared support lives here) and the repository root above it.
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: Every training config (``configs/*.yaml``: both pipelines'), and the demo's path as a string.
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
DEMO = str(ROOT / "configs" / "demo.yaml")
#: A tiny demo configuration for CLI tests: seconds, not minutes.
TINY = ["--data.demo_size=300", "--data.vocab_size=200", "--data.max_length=32"]


def quiet_trainer(
    tmp_path: Path | str | None = None, callbacks: list | None = None, *, ns: Any = pl, **kwargs: Any
) -> pl.Trainer:
    """A CPU ``Trainer`` that prints and writes nothing it is not asked to.

    No logger, checkpointing, progress bar, model summary or sanity validation; ``kwargs``
    override any of it (``enable_checkpointing=True``, ``max_steps=...``). ``ns`` is the
    Lightning namespace whose ``Trainer`` is built (``pytorch_lightning`` or ``lightning.pytorch``).
    """
    options: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "default_root_dir": str(tmp_path) if tmp_path is not None else None,
    }
    return ns.Trainer(callbacks=list(callbacks or []), **{**options, **kwargs})


def fit_command(
    tmp_path: Path, config: Path | str, *extra: str, cwd: Path | str
) -> subprocess.CompletedProcess:
    """Runs ``python -m lightning_order fit`` on ``config`` in its own process (as a user would).

    One epoch, the cache in ``tmp_path / "cache"``, the run's files in ``tmp_path``; fails the test
    with the end of both streams if the command fails.
    """
    env = launch_env()  # without the rank variables Lightning's launcher sets for the rank it starts
    command = [sys.executable, "-m", "lightning_order", "fit", "--config", str(config), *extra]
    command += ["--trainer.max_epochs=1", "--data.cache_dir", str(tmp_path / "cache")]
    command += ["--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar=false"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc


def clean_ledger() -> StepLedger:
    """The data steps of the standard pipeline in order, each consuming what the step before made."""
    ledger = StepLedger(info={"dims": {"vocab_size": 10}})
    load = ledger.record("load", stats={"rows": 10})
    clean = ledger.record("clean", inputs={"load": load.output}, stats={"rows": 10})
    feats = ledger.record("engineer_features", inputs={"clean": clean.output})
    split = ledger.record(
        "split",
        inputs={"clean": clean.output, "engineer_features": feats.output},
        parts={"train": "t" * 32, "val": "v" * 32},
        stats={"train_rows": 9, "val_rows": 1},
    )
    stats = ledger.record(
        "fit_features", inputs={"split": split.parts["train"]}, fitted_on=split.parts["train"]
    )
    vocab = ledger.record(
        "build_vocab",
        inputs={"clean": clean.output, "split": split.parts["train"]},
        fitted_on=split.parts["train"],
    )
    ledger.record("encode", inputs={"fit_features": stats.output, "build_vocab": vocab.output})
    return ledger


def leaky_ledger() -> StepLedger:
    """Statistics fitted on the validation part: fit-before-split."""
    ledger = StepLedger()
    load = ledger.record("load")
    clean = ledger.record("clean", inputs={"load": load.output})
    feats = ledger.record("engineer_features", inputs={"clean": clean.output})
    split = ledger.record(
        "split",
        inputs={"clean": clean.output, "engineer_features": feats.output},
        parts={"train": "t" * 32, "val": "v" * 32},
    )
    ledger.record("fit_features", inputs={"split": split.parts["train"]}, fitted_on=split.parts["val"])
    return ledger


def readme_training_example(tmp_path: Path, monkeypatch: Any, namespace_module: str | None = None) -> dict:
    """Run the README's ``trainer.fit`` example verbatim on a small ``reviews.csv`` in ``tmp_path``.

    Args:
        tmp_path: the folder the example runs in (it writes ``reviews.csv`` and its cache there).
        monkeypatch: pytest's fixture, to change directory and the cache root.
        namespace_module: ``"lightning.pytorch"`` to run the example under that namespace instead
            of the ``pytorch_lightning`` it imports.

    Returns:
        The example's globals (``trainer``, ``dm``, ``model``).
    """
    import csv
    import re

    from lightning_order.data.text.demo import demo_rows

    with open(tmp_path / "reviews.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label", "price", "stars"])
        writer.writeheader()
        for row in demo_rows(400, seed=1):
            writer.writerow(
                {"text": row["text"], "label": row["label"], "price": row["amount"], "stars": row["score"]}
            )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LIGHTNING_ORDER_CACHE", str(tmp_path / "cache"))
    readme = (ROOT / "README.md").read_text()
    example = next(b for b in re.findall(r"```python\n(.*?)```", readme, flags=re.S) if "trainer.fit" in b)
    assert "import pytorch_lightning as pl" in example
    if namespace_module is not None:
        example = example.replace("import pytorch_lightning as pl", f"import {namespace_module} as pl")
    namespace: dict = {"__name__": "readme_example"}
    exec(compile(example, "README.md", "exec"), namespace)
    return namespace


def in_fresh_process(code: str) -> Any:
    """Runs ``code`` in a fresh Python and returns the JSON it prints last (what that process imported, say)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        timeout=300,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


#: What :func:`in_preloaded_process`'s interpreter imports once, before it forks a process per code.
PRELOADED = ("torch", "pytorch_lightning")
#: One forking interpreter per set of preloaded modules.
_PRELOADED_SERVERS: dict[tuple[str, ...], subprocess.Popen] = {}
_SERVER_CODE = """
import json, os, sys, traceback
for name in sys.argv[1:]:
    __import__(name)
for line in sys.stdin:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the code, as ``python -c`` runs it, its stdout and stderr into the pipe
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write, 2)
        sys.argv = ["-c"]
        status = 0
        try:
            exec(compile(json.loads(line), "<string>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else 1
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    os.close(write)
    with os.fdopen(read, errors="replace") as pipe:
        out = pipe.read()
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    print(json.dumps({"out": out, "status": status}), flush=True)
"""


def start_preloaded(modules: tuple[str, ...] = PRELOADED) -> subprocess.Popen:
    """Starts (once per pytest process and ``modules``) the fresh interpreter :func:`in_preloaded_process`
    forks from, after importing ``modules``.

    A test module calls it when imported, so the server's imports overlap collection and other tests.
    """
    if modules not in _PRELOADED_SERVERS:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        server = subprocess.Popen(
            [sys.executable, "-c", _SERVER_CODE, *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        _PRELOADED_SERVERS[modules] = server
        atexit.register(_stop_preloaded, server)
    return _PRELOADED_SERVERS[modules]


def _stop_preloaded(server: subprocess.Popen) -> None:
    server.stdin.close()  # its loop ends
    server.wait(300)  # it may still be importing on a loaded machine
    server.stdout.close()


def in_preloaded_process(code: str, modules: tuple[str, ...] = PRELOADED) -> Any:
    """:func:`in_fresh_process` for code that imports Lightning anyway: a new process forked from one fresh
    interpreter that imported ``modules`` (by default :data:`PRELOADED`, nothing of ``lightning_order``),
    shared by the tests.

    Its ``sys.modules`` holds what those imports load, as the code's own imports would; the JSON it prints last.
    """
    server = start_preloaded(modules)
    server.stdin.write(json.dumps(code) + "\n")
    server.stdin.flush()
    answer = json.loads(server.stdout.readline())
    if answer["status"] != 0:
        raise AssertionError(f"the code exited {answer['status']}:\n{answer['out'][-6000:]}")
    return json.loads(answer["out"].strip().splitlines()[-1])


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module: the benchmarks are scripts, not a package.

    Registered in ``sys.modules`` under ``name`` first (its dataclasses and pickled functions
    resolve their module by name), and loaded once: test files that share a benchmark share it.
    """
    path = ROOT / "benchmarks" / f"{name}.py"
    if str(path.parent) not in sys.path:  # a benchmark imports another as it does run as a script
        sys.path.append(str(path.parent))
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__file__", None) == str(path):
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def mounted_tmpfs(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"64k"``, ``"16m"``) mounted at ``folder``: a disk that fills up.

    Root only: the test is skipped, with the reason, where the mount is refused.
    """
    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def word_grams(text: str, n: int = 5) -> frozenset[tuple[str, ...]]:
    """The word ``n``-grams of ``text`` (lower-cased, whitespace-split), computed independently of the package."""
    words = text.lower().split()
    return frozenset(zip(*(words[k:] for k in range(n))))


def exact_jaccard(a: str, b: str) -> float:
    """The exact Jaccard similarity of two texts' word 5-grams (what MinHash estimates); 0.0 when both have none."""
    x, y = word_grams(a), word_grams(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def private_names(*classes: type) -> set[str]:
    """The private names of ``classes`` and their bases: class attributes and the ``self._x`` they assign."""
    import inspect
    import re

    names: set[str] = set()
    for cls in classes:
        for base in cls.__mro__:
            names |= {n for n in vars(base) if n.startswith("_") and not n.startswith("__")}
            try:
                names |= set(re.findall(r"self\.(_[a-z]\w*)\s*[:=]", inspect.getsource(base)))
            except (OSError, TypeError):
                continue
    return names


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file, read from its IHDR chunk after checking its signature."""
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


class HFWrapper(pl.LightningModule):
    """The minimal LightningModule a team writes around a ``transformers`` model: ``model(**batch)``,
    no data glue (the HF-model tests of #34 and #37)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self.model(**batch).loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def tiny_llama(dm: Any, **config: Any) -> torch.nn.Module:
    """A ``LlamaForCausalLM`` built offline for ``dm``'s data (its padded vocabulary and block size):
    width 32, one layer, two heads; ``config`` overrides any of it."""
    transformers = pytest.importorskip("transformers")
    settings: dict[str, Any] = {
        "vocab_size": dm.padded_vocab_size,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "max_position_embeddings": dm.block_size,
    }
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**{**settings, **config}))


def lm_violations(dm: Any, module: Any, sample_rows: int, setup_fp: str | None = None) -> list[Any]:
    """Every LM finding on sampled rows, proof and guesses alike (what the validator's ``lm-batches``
    check reads before step 1 decides the guesses)."""
    from lightning_order.callbacks.validator.lm import lm_findings

    findings = lm_findings(dm, module, sample_rows, setup_fp)
    return [*findings.proof, *findings.sampled]
