"""A trained :class:`~lightning_order.OrderedCausalLM` as a ``transformers`` model folder.

``OrderedCausalLM`` is GPT-2's architecture written with ``torch.nn``: pre-norm blocks (layer norm,
causal attention with one fused query-key-value projection, layer norm, a 4x MLP with exact GELU),
learned position embeddings, a final layer norm and a head tied to the token embedding by default.
:func:`export_causal_lm` maps its weights onto ``transformers``' ``GPT2LMHeadModel`` one tensor
each (GPT-2 keeps its projections as ``Conv1D``, the transpose of ``nn.Linear``'s weight) and writes
the folder with ``save_pretrained``, beside the run's tokenizer, so that
``AutoModelForCausalLM.from_pretrained(folder)`` and ``AutoTokenizer.from_pretrained(folder)``
load it and give the same logits for the same prompt.

The embedding's padding rows (ids from ``vocab_size`` to ``padded_vocab_size``, which the model
masks to ``-inf``) are left out: the exported model's vocabulary is the tokenizer's, so its logits
are the real tokens' logits of ``OrderedCausalLM``, with nothing to mask. Dropout is carried over
as GPT-2's three dropout rates. Only a single-file checkpoint is read; a distributed checkpoint
folder (``ModelParallelStrategy``) is consolidated first with Lightning's
``python -m lightning.pytorch.utilities.consolidate_checkpoint``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from lightning_order.checkpoint import load_checkpoint
from lightning_order.data.lm.hf_tokenizer import TOKENIZER_FOLDER
from lightning_order.errors import CheckpointError

__all__ = ["export_causal_lm", "gpt2_state_dict"]

#: The hyperparameters of ``OrderedCausalLM`` that shape its weights; a checkpoint must hold them.
_SHAPE = ("vocab_size", "padded_vocab_size", "block_size", "n_layer", "n_head", "n_embd")


def gpt2_state_dict(
    weights: Mapping[str, torch.Tensor], n_layer: int, vocab_size: int
) -> dict[str, torch.Tensor]:
    """``OrderedCausalLM``'s weights under ``GPT2LMHeadModel``'s names and layouts.

    Args:
        weights: the model's ``state_dict`` (a checkpoint's ``"state_dict"``).
        n_layer: the number of decoder blocks.
        vocab_size: the tokenizer's size: the embedding and head rows kept (the padding rows dropped).

    Returns:
        A ``state_dict`` that ``GPT2LMHeadModel.load_state_dict`` takes (its attention masks aside).
    """

    def linear(ours: str, theirs: str) -> dict[str, torch.Tensor]:
        # Conv1D computes x @ weight + bias, nn.Linear x @ weight.T + bias: the same map, transposed.
        return {
            f"{theirs}.weight": weights[f"{ours}.weight"].t().contiguous(),
            f"{theirs}.bias": weights[f"{ours}.bias"],
        }

    def norm(ours: str, theirs: str) -> dict[str, torch.Tensor]:
        return {f"{theirs}.weight": weights[f"{ours}.weight"], f"{theirs}.bias": weights[f"{ours}.bias"]}

    out = {
        "transformer.wte.weight": weights["token_embedding.weight"][:vocab_size].clone(),
        "transformer.wpe.weight": weights["position_embedding.weight"],
        **norm("norm", "transformer.ln_f"),
        "lm_head.weight": weights["lm_head.weight"][:vocab_size].clone(),
    }
    for i in range(n_layer):
        ours, theirs = f"blocks.{i}", f"transformer.h.{i}"
        out |= norm(f"{ours}.norm1", f"{theirs}.ln_1")
        out |= linear(f"{ours}.qkv", f"{theirs}.attn.c_attn")
        out |= linear(f"{ours}.proj", f"{theirs}.attn.c_proj")
        out |= norm(f"{ours}.norm2", f"{theirs}.ln_2")
        out |= linear(f"{ours}.mlp.0", f"{theirs}.mlp.c_fc")
        out |= linear(f"{ours}.mlp.2", f"{theirs}.mlp.c_proj")
    return out


def export_causal_lm(
    checkpoint: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    tokenizer: str | os.PathLike[str] | None = None,
) -> Path:
    """Writes a trained ``OrderedCausalLM`` and its tokenizer as a ``transformers`` model folder.

    Examples:
        >>> export_causal_lm("lightning_logs/version_0/checkpoints/epoch=3-step=716.ckpt", "my-model")  # doctest: +SKIP
        >>> AutoModelForCausalLM.from_pretrained("my-model")  # doctest: +SKIP

    Args:
        checkpoint: a Lightning checkpoint file of an ``OrderedCausalLM`` fit.
        out_dir: the folder to write (created; files of the same names in it are replaced).
        tokenizer: the run's tokenizer folder; default: ``tokenizer/`` beside the checkpoint, where
            ``OrderedLMDataModule`` writes it.

    Returns:
        ``out_dir``.

    Raises:
        CheckpointError: the checkpoint cannot be read, is not an ``OrderedCausalLM``'s, or its
            tokenizer folder is missing.
    """
    try:  # an optional dependency: imported for this command only
        from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    except ImportError as err:
        raise CheckpointError(f"export: needs transformers ({err}); pip install transformers") from err

    path = Path(checkpoint)
    tokenizer_dir = Path(tokenizer) if tokenizer is not None else path.parent / TOKENIZER_FOLDER
    if path.is_dir():
        raise CheckpointError(
            f"export: {path} is a folder (a distributed checkpoint); consolidate it into one file first: "
            f"python -m lightning.pytorch.utilities.consolidate_checkpoint {path}"
        )
    saved: Any = load_checkpoint(path)  # weights_only; an unreadable file is a one-line CheckpointError
    hparams = saved.get("hyper_parameters") if isinstance(saved, dict) else None
    weights = saved.get("state_dict") if isinstance(saved, dict) else None
    missing = [k for k in _SHAPE if not isinstance(hparams, Mapping) or k not in hparams]
    if missing or not isinstance(weights, Mapping) or "token_embedding.weight" not in weights:
        raise CheckpointError(
            f"export: {path} is not a checkpoint of lightning_order's OrderedCausalLM (missing "
            f"{', '.join(missing) or 'its weights'}); only that model maps onto a transformers architecture"
        )
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise CheckpointError(
            f"export: no tokenizer at {tokenizer_dir} (its tokenizer.json); give the run's tokenizer folder with "
            f"--tokenizer (OrderedLMDataModule writes it as {TOKENIZER_FOLDER}/ beside the checkpoints)"
        )
    hp = dict(hparams)
    tied = bool(hp.get("tie_weights", True))
    dropout = float(hp.get("dropout", 0.0))
    hf_tokenizer = PreTrainedTokenizerFast.from_pretrained(os.fspath(tokenizer_dir))
    config = GPT2Config(
        vocab_size=int(hp["vocab_size"]),
        n_positions=int(hp["block_size"]),
        n_embd=int(hp["n_embd"]),
        n_layer=int(hp["n_layer"]),
        n_head=int(hp["n_head"]),
        n_inner=4 * int(hp["n_embd"]),
        activation_function="gelu",  # torch.nn.GELU(): the exact GELU, not GPT-2's tanh approximation
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        layer_norm_epsilon=1e-5,  # torch.nn.LayerNorm's
        tie_word_embeddings=tied,
        bos_token_id=hf_tokenizer.bos_token_id,
        eos_token_id=hf_tokenizer.eos_token_id,
        pad_token_id=hf_tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    state = gpt2_state_dict(weights, int(hp["n_layer"]), int(hp["vocab_size"]))
    missing_keys, unexpected = model.load_state_dict(state, strict=False)
    # GPT-2 registers no weights beyond these; a key left over means the mapping is wrong.
    if unexpected or [k for k in missing_keys if not (tied and k == "lm_head.weight")]:
        raise CheckpointError(
            f"export: the weights of {path} do not map onto GPT-2 ({missing_keys}, {unexpected})"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in os.listdir(tokenizer_dir):  # the run's tokenizer files as written (config, chat template)
        if (tokenizer_dir / name).is_file() and not name.startswith("lightning_order"):
            shutil.copyfile(tokenizer_dir / name, out / name)
    return out
