"""Sharded models on 2 CPU ranks (gloo): OrderedCausalLM under FSDP2 and tensor parallelism (issue #36).

Usage: python sharded_ddp.py OUT_DIR CACHE_DIR [4]
With ``4`` (four ranks), only the 2-D mesh: ``2d`` (dp 2 × tp 2, FSDP2 and tensor parallelism
together) correct, and ``2d-block-size`` planted.
One launch, its cases one after another in the same process group (each Trainer builds its own
device mesh), on one prepared cache. ``fsdp2`` is dp 2 × tp 1 (``fully_shard`` over the data-parallel
dimension), ``tp`` is dp 1 × tp 2 (the MLPs split by ``ColwiseParallel`` / ``RowwiseParallel``):

- ``<mesh>``: the correct run, 3 steps: the validator must be silent; records what the parameters are
  (a DTensor's global and local rows);
- ``tp-vocab-parallel``: a model whose token embedding is split by rows across the tensor-parallel
  group (a vocab-parallel embedding, untied head): each rank holds half the rows, the check must read
  the global table and stay silent;
- ``<mesh>-token-added``: a token added to the tokenizer after the model was built;
- ``<mesh>-block-size``: a model of 16 positions on blocks of 32;
- ``<mesh>-short-table``: a model of 256 rows for a 300-token tokenizer (token ids beyond the table);
- ``fsdp2-resume``: 2 steps, saved with ``trainer.save_checkpoint`` (a folder: Lightning's distributed
  checkpoint), resumed to 4; ``fsdp2-straight``: the same 4 steps in one run;
- ``fsdp2-resume-changed``: the same checkpoint resumed on other data (fewer documents);
- folders mixing two checkpoints (issue #42), each resumed and refused before a step:
  ``mixed-meta`` (run A's shards, run C's ``meta.pt``, resumed on C's data), ``mixed-vocab`` (the
  shards of a run on another vocabulary, A's ``meta.pt``), ``mixed-vocab-untied`` (the same with a
  ``meta.pt`` written before the tie existed: torch's own load fails), ``truncated-meta`` and
  ``foreign-meta`` (another tool's file in its place).

Writes OUT_DIR/rank<r>.json, a key per case, after every case.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for helpers.py

import pytorch_lightning as pl
from helpers import quiet_trainer
from mesh_ddp import BatchHashes
from pytorch_lightning.strategies import ModelParallelStrategy

from lightning_order import CheckpointError, OrderedCausalLM, OrderedLMDataModule, OrderError, OrderValidator
from lightning_order.checkpoint import SHARDED_META, shards_digest
from lightning_order.distributed import release_process_group
from lightning_order.ledger import CHECKPOINT_KEY

MESHES = {"fsdp2": (2, 1), "tp": (1, 2), "2d": (2, 2)}
MODEL = {"n_layer": 1, "n_head": 2, "n_embd": 16}


class VocabParallelLM(OrderedCausalLM):
    """The token embedding split by rows over the tensor-parallel group (a vocab-parallel embedding)."""

    def configure_model(self) -> None:
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor.parallel import RowwiseParallel, parallelize_module

        if self.device_mesh is not None and not getattr(self, "_vocab_split", False):
            style = RowwiseParallel(input_layouts=Replicate())
            parallelize_module(self, self.device_mesh["tensor_parallel"], {"token_embedding": style})
            self._vocab_split = True


def _rows(weight) -> dict:
    local = weight.to_local() if hasattr(weight, "to_local") else weight
    return {"type": type(weight).__name__, "global": list(weight.shape), "local": list(local.shape)}


def _trainer(mesh: str, callbacks: list, max_steps: int) -> pl.Trainer:
    dp, tp = MESHES[mesh]
    strategy = ModelParallelStrategy(data_parallel_size=dp, tensor_parallel_size=tp)
    return quiet_trainer(
        None, callbacks, devices=dp * tp, strategy=strategy, max_steps=max_steps, limit_val_batches=0
    )


def _data(cache: str, **overrides) -> OrderedLMDataModule:
    settings = {
        "max_documents": 200,
        "vocab_size": 300,
        "block_size": 32,
        "batch_size": 4,
        "cache_dir": cache,
    }
    return OrderedLMDataModule(**{**settings, **overrides})


def _model(case: str, dm: OrderedLMDataModule) -> OrderedCausalLM:
    dims = dict(dm.dims)
    if case.endswith("block-size"):
        dims["block_size"] = 16
    if case.endswith("short-table"):
        dims.update(vocab_size=256, padded_vocab_size=256)
    if case == "tp-vocab-parallel":
        return VocabParallelLM(**dims, **MODEL, tie_weights=False)
    return OrderedCausalLM(**dims, **MODEL)


def _fit(trainer: pl.Trainer, model, dm, validator: OrderValidator, ckpt_path: str | None = None) -> dict:
    result: dict = {}
    try:
        trainer.fit(model, dm, ckpt_path=ckpt_path)
    except OrderError as err:
        result.update(error="OrderError", rules=err.rules, message=str(err))
    except CheckpointError as err:
        result.update(error="CheckpointError", message=str(err))
    result.update(
        rank=trainer.global_rank,
        global_step=trainer.global_step,
        violations=[
            {"rule": v.rule, "message": v.message, "dimension": (v.details or {}).get("dimension")}
            for v in (validator.violations or [])
        ],
    )
    return result


def run(cache: str, case: str) -> dict:
    mesh = case.split("-")[0]
    dm = _data(cache)
    model = _model(case, dm)
    if case.endswith("token-added"):
        dm.tokenizer.add_special_tokens(["<pad>"])  # after the model was built: the classic mistake
    validator, batches = OrderValidator(), BatchHashes()
    result = _fit(_trainer(mesh, [validator, batches], 3), model, dm, validator)
    result.update(
        batch_hashes=batches.hashes,
        embedding=_rows(model.token_embedding.weight),
        mlp=_rows(model.blocks[0].mlp[0].weight),
    )
    return result


def run_resume(cache: str, folder: Path) -> dict[str, dict]:
    """Straight 4 steps; 2 steps saved to a distributed checkpoint, resumed to 4; and on other data."""
    out: dict[str, dict] = {}
    straight = BatchHashes()
    dm = _data(cache)
    validator = OrderValidator()
    out["fsdp2-straight"] = _fit(_trainer("fsdp2", [validator, straight], 4), _model("", dm), dm, validator)
    out["fsdp2-straight"]["batch_hashes"] = straight.hashes

    dm = _data(cache)
    first = _trainer("fsdp2", [OrderValidator()], 2)
    first.fit(_model("", dm), dm)
    first.save_checkpoint(folder)
    out["fsdp2-saved"] = {"is_dir": folder.is_dir(), "files": sorted(p.name for p in folder.iterdir())}

    dm, resumed, validator = _data(cache), BatchHashes(), OrderValidator()
    result = _fit(_trainer("fsdp2", [validator, resumed], 4), _model("", dm), dm, validator, str(folder))
    out["fsdp2-resume"] = {**result, "batch_hashes": resumed.hashes}

    dm, validator = _data(cache + "-other", max_documents=150), OrderValidator()
    counter = BatchHashes()
    result = _fit(_trainer("fsdp2", [validator, counter], 4), _model("", dm), dm, validator, str(folder))
    out["fsdp2-resume-changed"] = {**result, "batch_hashes": counter.hashes}
    meta = torch.load(folder / SHARDED_META, weights_only=True)
    out["fsdp2-saved"]["tied"] = meta[CHECKPOINT_KEY].get("shards") == shards_digest(folder)
    out.update(run_mixed(cache, folder))
    return out


def _save(cache: str, folder: Path, **data) -> None:
    """Run C (other documents) or a run on another vocabulary: 2 steps, saved to ``folder``."""
    dm = _data(cache, **data)
    trainer = _trainer("fsdp2", [OrderValidator()], 2)
    trainer.fit(_model("", dm), dm)
    trainer.save_checkpoint(folder)


def _mix(shards: Path, meta: Path, into: Path, damage: str = "") -> Path:
    """``shards``' folder with ``meta`` as its meta.pt (rank 0 writes, every rank waits)."""
    if torch.distributed.get_rank() == 0:
        shutil.copytree(shards, into)
        shutil.copy(meta, into / SHARDED_META)
        target = into / SHARDED_META
        if damage == "truncated":
            target.write_bytes(target.read_bytes()[:200])
        elif damage == "foreign":
            torch.save({"step": 2, "model_args": {"dim": 16}}, target)
        elif damage == "untied":
            state = torch.load(target, weights_only=True)
            del state[CHECKPOINT_KEY]["shards"]
            torch.save(state, target)
    torch.distributed.barrier()
    return into


def run_mixed(cache: str, a: Path) -> dict[str, dict]:
    """Folders mixing two checkpoints, each resumed (4 steps) on the data its meta.pt names."""
    root = a.parent
    other, vocab = root / "checkpoint-c", root / "checkpoint-vocab"
    _save(cache + "-other", other, max_documents=150)
    _save(cache + "-vocab", vocab, vocab_size=400)
    cases = {
        "mixed-meta": (_mix(a, other / SHARDED_META, root / "checkpoint-mixed-meta"), {"max_documents": 150}, "-other"),
        "mixed-vocab": (_mix(vocab, a / SHARDED_META, root / "checkpoint-mixed-vocab"), {}, ""),
        "mixed-vocab-untied": (_mix(vocab, a / SHARDED_META, root / "checkpoint-mixed-untied", "untied"), {}, ""),
        "truncated-meta": (_mix(a, a / SHARDED_META, root / "checkpoint-truncated", "truncated"), {}, ""),
        "foreign-meta": (_mix(a, a / SHARDED_META, root / "checkpoint-foreign", "foreign"), {}, ""),
    }
    out: dict[str, dict] = {}
    for case, (folder, data, suffix) in cases.items():
        dm, validator, counter = _data(cache + suffix, **data), OrderValidator(), BatchHashes()
        result = _fit(_trainer("fsdp2", [validator, counter], 4), _model("", dm), dm, validator, str(folder))
        out[case] = {**result, "batch_hashes": counter.hashes}
    return out


CASES = (
    "fsdp2",
    "tp",
    "tp-vocab-parallel",
    "fsdp2-token-added",
    "tp-token-added",
    "fsdp2-block-size",
    "tp-block-size",
    "fsdp2-short-table",
    "tp-short-table",
)


def main() -> None:
    out, cache = Path(sys.argv[1]), sys.argv[2]
    results: dict = {}
    if sys.argv[3:] == ["4"]:
        for case in ("2d", "2d-block-size"):
            results[case] = run(cache, case)
            (out / f"rank{results[case]['rank']}.json").write_text(json.dumps(results))
        return
    for case in CASES:
        results[case] = run(cache, case)
        (out / f"rank{results[case]['rank']}.json").write_text(json.dumps(results))
    folder = out / "checkpoint"
    results.update(run_resume(cache, folder))
    rank = results["fsdp2"]["rank"]
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    if rank == 0:
        for made in folder.parent.glob("checkpoint*"):
            shutil.rmtree(made, ignore_errors=True)


if __name__ == "__main__":
    main()
    release_process_group()  # else gloo may abort the process at exit (SIGABRT)
