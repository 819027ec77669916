"""The ``lightning-order`` command end to end: ``fit`` of the demo and the LM main job, ``audit``'s
exit code and a refused order from the installed command, each as a user runs it.

The command's parsing, its refusals and its subcommands in process: tests/unit/cli/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DEMO, ROOT, TINY, clean_ledger, fit_command, leaky_ledger, png_size
from launching import launch_env

from lightning_order import StepLedger
from lightning_order.cli import find_manifests, main
from lightning_order.cli.auditing import AUDIT_VIOLATIONS
from lightning_order.cli.dispatch import EXIT_BROKEN_PIPE
from lightning_order.order import STANDARD_PIPELINE

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")


@pytest.mark.slow
def test_fit_demo_end_to_end(tmp_path: Path) -> None:
    proc = fit_command(tmp_path, DEMO, "--data.demo_size=300", cwd=ROOT)
    out = proc.stdout
    assert "the order is correct" in out
    assert "val_acc" in out and "best checkpoint" in out
    assert list(tmp_path.glob("lightning_logs/version_0/checkpoints/*.ckpt"))
    assert (tmp_path / "lightning_logs" / "version_0" / "config.yaml").is_file()
    # The run's ledger recorded the model and loop steps after the data steps, in order.
    assert STANDARD_PIPELINE.check(StepLedger.load(find_manifests(tmp_path / "cache")[0])) == []


def test_the_installed_command_prints_no_traceback(tmp_path: Path) -> None:
    # enforce=false runs any executable order; this one is not executable (a bare ValueError once).
    order = ["--data.order=[load,encode]", "--data.enforce=false"]
    command = [sys.executable, "-m", "lightning_order", "fit", "--config", DEMO, *TINY, *order]
    proc = subprocess.run(
        command, capture_output=True, text=True, env=launch_env(), cwd=tmp_path, timeout=300
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    ours = [line for line in proc.stderr.splitlines() if line.startswith("lightning-order")]
    assert len(ours) == 1 and "order" in ours[0], proc.stderr


def test_audit_via_subprocess_exit_code(tmp_path: Path) -> None:
    path = leaky_ledger().save(tmp_path / "leaky")
    proc = subprocess.run(
        [sys.executable, "-m", "lightning_order", "audit", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == AUDIT_VIOLATIONS, proc.stderr
    assert "fit-before-split" in proc.stdout


@pytest.mark.parametrize("violations", [True, False], ids=["violations", "clean"])
def test_audit_into_a_reader_that_stops_early_exits_141_quietly(tmp_path: Path, violations: bool) -> None:
    """Issue #42: ``audit ... | head`` exited 1 (which means "violations") with a BrokenPipeError."""
    path = (leaky_ledger() if violations else clean_ledger()).save(tmp_path / "ledger")
    command = [sys.executable, "-m", "lightning_order", "audit", str(path)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first line: every write meets a closed pipe
    errors = proc.stderr.read()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE, errors
    assert "BrokenPipeError" not in errors and "Traceback" not in errors, errors


def _small_lm_args(tmp_path: Path) -> list[str]:
    """The LM demo cut small (200 documents, a BPE of 300, blocks of 16), its cache and logs in ``tmp_path``."""
    return [
        "--data.max_documents=200",
        "--data.vocab_size=300",
        "--data.block_size=16",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--trainer.default_root_dir",
        str(tmp_path),
    ]


@pytest.mark.slow
def test_lm_main_job_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The main job on a small corpus: the ledger, no violation, the perplexity and a continuation."""
    config = str(ROOT / "configs" / "lm-demo.yaml")
    args = _small_lm_args(tmp_path)
    args += ["--trainer.max_epochs=1", "--trainer.check_val_every_n_epoch=1"]
    assert main(["prepare", "--config", config, *args]) == 0
    assert "✓ the order is correct" in capsys.readouterr().out
    assert main(["fit", "--config", config, *args]) == 0
    out = capsys.readouterr().out
    for expected in (
        "the ledger",
        "✓ the order is correct",
        "validation perplexity:",
        "sampled continuation",
    ):
        assert expected in out
    for step in ("dedup", "pack", "shard", "init_model", "train", "evaluate"):
        assert f"│ {step}" in out


def test_an_lm_fit_cut_short_prints_its_perplexity(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """lm-demo.yaml validates every 4 epochs; stopped after 5 steps, the run validates once at its end
    (#26), and names no checkpoint folder, as none was written."""
    config = str(ROOT / "configs" / "lm-demo.yaml")
    args = _small_lm_args(tmp_path)
    assert main(["fit", "--config", config, *args, "--trainer.max_steps=5"]) == 0
    out = capsys.readouterr().out
    assert "validation perplexity:" in out and "val_ppl" in out and "train_loss" in out
    assert "checkpoint" not in out and not list(tmp_path.rglob("*.ckpt"))


@pytest.mark.slow
def test_an_lm_fit_whose_loss_went_to_nan_ends_with_its_summary_and_exit_code_0(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """#42 item 9: the run trained to its last step; its summary says why there is no continuation."""
    config = str(ROOT / "configs" / "lm-demo.yaml")
    args = _small_lm_args(tmp_path)
    args += ["--trainer.max_steps=6", "--model.init_args.lr=1e12", "--order.symptoms=false"]
    assert main(["fit", "--config", config, *args]) == 0
    out = capsys.readouterr().out
    assert "validation perplexity: nan" in out
    assert "no sampled continuation: the model's logits are not finite" in out
    assert _summary_line(out, "loss curve") == str(
        tmp_path / "lightning_logs" / "version_0" / "loss_curve.png"
    )


def _summary_line(out: str, label: str) -> str | None:
    """The text after ``label: `` on the summary's line that starts with it."""
    lines = [line for line in out.splitlines() if line.startswith(f"{label}: ")]
    return lines[-1].split(": ", 1)[1] if lines else None


@pytest.mark.slow
def test_an_lm_fit_summary_has_its_throughput_and_loss_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """#34 item 6: train tokens per second, and the loss curve written beside the logs and named."""
    config = str(ROOT / "configs" / "lm-demo.yaml")
    args = _small_lm_args(tmp_path)
    assert main(["fit", "--config", config, *args, "--trainer.max_steps=5"]) == 0
    out = capsys.readouterr().out
    rate = _summary_line(out, "train tokens per second")
    assert rate is not None and float(rate.split()[0].replace(",", "")) > 0, out
    assert "tokens in" in rate and "validation passes excluded" in rate
    curve = tmp_path / "lightning_logs" / "version_0" / "loss_curve.png"
    assert _summary_line(out, "loss curve") == str(curve)
    assert png_size(curve) == (640, 400) and curve.stat().st_size > 10_000


def test_a_classification_fit_summary_has_a_loss_curve_and_no_token_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Tokens per second is an LM figure: the classifier's summary works as before, with its curve."""
    args = ["--data.cache_dir", str(tmp_path / "cache"), "--trainer.default_root_dir", str(tmp_path)]
    assert main(["fit", "--config", DEMO, *TINY, *args, "--trainer.max_epochs=1"]) == 0
    out = capsys.readouterr().out
    assert "the order is correct" in out and "val_acc" in out
    assert _summary_line(out, "train tokens per second") is None
    curve = tmp_path / "lightning_logs" / "version_0" / "loss_curve.png"
    assert _summary_line(out, "loss curve") == str(curve)
    assert png_size(curve) == (640, 400)
