"""The reference causal language model: a small GPT-style decoder built from the data's dims.

``OrderedCausalLM`` takes ``vocab_size`` (the tokenizer's size), ``padded_vocab_size`` (the
embedding rows: the tokenizer size rounded up to a recorded multiple) and ``block_size`` from
:attr:`OrderedLMDataModule.dims <lightning_order.OrderedLMDataModule.dims>`, never from the data
itself, so it can only be built once the data is known. Pre-norm transformer blocks written with
``torch.nn`` (attention through :func:`torch.nn.functional.scaled_dot_product_attention`, causal),
learned position embeddings, and by default an output head *tied* to the token embedding (one
table of ``padded_vocab_size`` rows; ``tie_weights=False`` gives the head its own). The logits of
the padding rows (ids ``>= vocab_size``) are masked out, so perplexity is over the real tokens and
sampling never returns a padding id. ``val_loss`` and ``test_loss`` are means per token, reduced
across ranks as a sum and a count (:mod:`lightning_order.models.token_loss`): the 1-rank value
whatever the world size and however unevenly the validation blocks are shared out; ``val_ppl`` and
``test_ppl`` are ``exp`` of them. A batch
with ``position_ids`` (``OrderedLMDataModule(document_attention=True)``) keeps packed documents
apart: positions from it, and a block-diagonal causal mask (:mod:`lightning_order.models.attention`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from lightning_order import compat as pl
from lightning_order.errors import NotFiniteError
from lightning_order.models.attention import document_mask
from lightning_order.models.sharding import shard_decoder
from lightning_order.models.token_loss import TokenMeanLoss, token_loss

__all__ = ["OrderedCausalLM"]

Batch = dict[str, torch.Tensor]


class _Block(nn.Module):
    """One pre-norm decoder block: causal self-attention, then an MLP, each with a residual."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        p = self.dropout if self.training else 0.0
        if mask is None:
            attended = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:  # causal within each document only (the mask holds the causality)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        x = x + self.drop(self.proj(attended.transpose(1, 2).reshape(batch, length, width)))
        return x + self.drop(self.mlp(self.norm2(x)))


class OrderedCausalLM(pl.LightningModule):
    """A GPT-style decoder for ``{"input_ids", "labels"}`` batches (long, B × T) of ``OrderedLMDataModule``.

    Examples:
        >>> model = OrderedCausalLM(vocab_size=300, padded_vocab_size=320, block_size=16, n_layer=1)
        >>> model({"input_ids": torch.randint(0, 300, (2, 16))}).shape
        torch.Size([2, 16, 320])

    Args:
        vocab_size: the tokenizer's size (the data's ``vocab_size``); logits of ids at or above it
            are masked.
        padded_vocab_size: rows of the token embedding and the output head (the data's
            ``padded_vocab_size``, at least ``vocab_size``).
        block_size: the longest sequence (rows of the position embedding; the data's ``block_size``).
        n_layer: decoder blocks.
        n_head: attention heads (must divide ``n_embd``).
        n_embd: width.
        dropout: dropout in attention and after each residual branch.
        tie_weights: share one table between the token embedding and the output head (default).
        lr: peak AdamW learning rate (linear warm-up, then cosine decay to 10 %).
        weight_decay: AdamW weight decay of the matrices (not of biases, norms or embeddings).
        warmup_steps: steps of linear warm-up.
    """

    def __init__(
        self,
        vocab_size: int,
        padded_vocab_size: int,
        block_size: int,
        n_layer: int = 2,
        n_head: int = 4,
        n_embd: int = 128,
        dropout: float = 0.0,
        tie_weights: bool = True,
        lr: float = 3e-3,
        weight_decay: float = 0.1,
        warmup_steps: int = 50,
    ) -> None:
        super().__init__()
        if not 2 <= vocab_size <= padded_vocab_size:
            raise ValueError(
                f"expected 2 <= vocab_size <= padded_vocab_size, got vocab_size={vocab_size}, "
                f"padded_vocab_size={padded_vocab_size}: build the model from the data, OrderedCausalLM(**dm.dims)"
            )
        if block_size < 1 or n_layer < 1 or n_embd % n_head:
            raise ValueError(
                f"expected block_size >= 1, n_layer >= 1 and n_head dividing n_embd, got block_size={block_size}, "
                f"n_layer={n_layer}, n_head={n_head}, n_embd={n_embd}"
            )
        self.save_hyperparameters()
        self.token_embedding = nn.Embedding(padded_vocab_size, n_embd)
        self.position_embedding = nn.Embedding(block_size, n_embd)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.norm = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, padded_vocab_size, bias=False)
        self.apply(self._init_weights)
        if tie_weights:
            self.lm_head.weight = self.token_embedding.weight
        for name, param in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):  # GPT-2's scaled residual init
                nn.init.normal_(param, std=0.02 / math.sqrt(2 * n_layer))
        # Sums and counts of token losses (no parameters, no persistent state): exact across ranks.
        self.val_loss_metric, self.val_ppl = TokenMeanLoss(), TokenMeanLoss(exponentiate=True)
        self.test_loss_metric, self.test_ppl = TokenMeanLoss(), TokenMeanLoss(exponentiate=True)
        # Those of validation dataloaders 1, 2, ... (made when first seen): one pair per dataloader,
        # so that each dataloader's figures are its own.
        self.more_val_loss, self.more_val_ppl = nn.ModuleDict(), nn.ModuleDict()

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def get_input_embeddings(self) -> nn.Embedding:
        """The token embedding (``padded_vocab_size`` rows)."""
        return self.token_embedding

    def get_output_embeddings(self) -> nn.Linear:
        """The output head (``padded_vocab_size`` rows; tied to the embedding by default)."""
        return self.lm_head

    def configure_model(self) -> None:
        """Shards the model under ``ModelParallelStrategy`` (FSDP2 over ``data_parallel``, the MLPs
        split over ``tensor_parallel``: :mod:`lightning_order.models.sharding`); a no-op under any
        other strategy, and when applied already."""
        mesh = self.device_mesh
        if mesh is not None:
            shard_decoder(self, self.blocks, mesh)

    def forward(self, batch: Batch | torch.Tensor) -> torch.Tensor:
        """Logits (B × T × ``padded_vocab_size``), the padding ids' masked to ``-inf``.

        A batch holding ``position_ids`` (B × T, restarting at 0 at each document start) takes its
        positions from them, and each token attends only to earlier tokens of its own document.
        """
        ids = batch["input_ids"] if isinstance(batch, dict) else batch
        position_ids = batch.get("position_ids") if isinstance(batch, dict) else None
        length = ids.shape[1]
        if length > self.hparams.block_size:
            raise ValueError(
                f"sequence of {length} tokens is longer than block_size={self.hparams.block_size}"
            )
        positions = torch.arange(length, device=ids.device) if position_ids is None else position_ids
        mask = None if position_ids is None else document_mask(position_ids)
        x = self.drop(self.token_embedding(ids) + self.position_embedding(positions))
        for block in self.blocks:
            x = block(x, mask)
        logits = self.lm_head(self.norm(x))
        if self.hparams.padded_vocab_size > self.hparams.vocab_size:
            logits[..., self.hparams.vocab_size :] = float("-inf")
        return logits

    def _loss(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch)
        loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
        return loss, logits

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """Next-token cross-entropy; logs ``train_loss``."""
        loss, _ = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["input_ids"].shape[0])
        return loss

    def validation_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Logs ``val_loss`` (the mean loss per token) and ``val_ppl`` (``exp`` of it), exact across ranks.

        Both are sums and counts of token losses reduced over every rank at the epoch's end
        (:class:`~lightning_order.models.token_loss.TokenMeanLoss`), never a mean of rank means.
        With several validation dataloaders, each is logged apart under Lightning's names
        (``val_loss/dataloader_idx_1``, ...), from metrics of its own.
        """
        self._evaluate(batch, self._val_metrics(dataloader_idx), ("val_loss", "val_ppl"), prog_bar=True)

    def _val_metrics(self, dataloader_idx: int) -> tuple[str, str]:
        """The attribute names of dataloader ``dataloader_idx``'s loss and perplexity metrics (made when first needed).

        Named for Lightning, which finds a logged metric's attribute once, before later ones exist.
        """
        if dataloader_idx == 0:
            return "val_loss_metric", "val_ppl"
        key = str(dataloader_idx)
        if key not in self.more_val_ppl:
            self.more_val_loss[key] = TokenMeanLoss().to(self.device)
            self.more_val_ppl[key] = TokenMeanLoss(exponentiate=True).to(self.device)
        return f"more_val_loss.{key}", f"more_val_ppl.{key}"

    def _evaluate(
        self, batch: Batch, attributes: tuple[str, str], names: tuple[str, str], prog_bar: bool
    ) -> None:
        """Adds the batch's token losses to the two metrics named by ``attributes`` and logs them as ``names``."""
        total, tokens = token_loss(self(batch), batch["labels"])
        size = batch["input_ids"].shape[0]
        for attribute, name in zip(attributes, names):
            metric = self.get_submodule(attribute)
            assert isinstance(metric, TokenMeanLoss)  # made here; narrows the type for log()
            metric.update(total, tokens)
            self.log(name, metric, prog_bar=prog_bar, batch_size=size, metric_attribute=attribute)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        """Logs ``test_loss`` and ``test_ppl``, reduced exactly across ranks as ``val_loss`` and ``val_ppl`` are."""
        self._evaluate(batch, ("test_loss_metric", "test_ppl"), ("test_loss", "test_ppl"), prog_bar=False)

    @torch.no_grad()
    def generate(
        self,
        prompt: Sequence[int] | torch.Tensor,
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.8,
        top_k: int | None = 40,
        eos_token_id: int | None = None,
        seed: int | None = 0,
    ) -> list[int]:
        """Samples a continuation of ``prompt`` (token ids); stops after ``eos_token_id`` or ``max_new_tokens``.

        Args:
            prompt: the token ids to continue (at least one).
            max_new_tokens: the most tokens to add.
            temperature: divides the logits (lower: more conservative).
            top_k: sample among the ``top_k`` likeliest tokens only (``None``: all).
            eos_token_id: stop once this id is sampled (it is returned as the last id).
            seed: seeds the sampling (``None``: torch's global generator).

        Returns:
            The new token ids (not the prompt).

        Raises:
            NotFiniteError: the logits are NaN or infinite (the weights diverged).
        """
        ids = torch.as_tensor(list(prompt) if not torch.is_tensor(prompt) else prompt, dtype=torch.long)
        ids = ids.reshape(1, -1).to(self.device)
        if ids.shape[1] == 0:
            raise ValueError("generate needs a prompt of at least one token (e.g. the end-of-text id)")
        generator = None if seed is None else torch.Generator(device=self.device).manual_seed(seed)
        was_training = self.training
        self.eval()
        new: list[int] = []
        for _ in range(max_new_tokens):
            logits = self(ids[:, -self.hparams.block_size :])[0, -1] / max(temperature, 1e-6)
            if top_k is not None and top_k < logits.numel():
                threshold = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < threshold, float("-inf"))
            probabilities = torch.softmax(logits, dim=-1)
            if not torch.isfinite(probabilities).all():  # torch's own error names no cause
                raise NotFiniteError(
                    f"generate: the model's logits are not finite (NaN or inf) at new token {len(new) + 1}: "
                    "its weights diverged (the loss went to NaN or inf); sample from an earlier checkpoint, "
                    "and train on with a lower learning rate or gradient clipping"
                )
            token = torch.multinomial(probabilities, 1, generator=generator)
            ids = torch.cat([ids, token.view(1, 1)], dim=1)
            new.append(int(token))
            if eos_token_id is not None and new[-1] == eos_token_id:
                break
        self.train(was_training)
        return new

    def configure_optimizers(self) -> Any:
        """AdamW (decay on matrices only) with linear warm-up then cosine decay over the planned steps."""
        decay = [p for n, p in self.named_parameters() if p.dim() >= 2 and "embedding" not in n]
        other = [p for n, p in self.named_parameters() if not (p.dim() >= 2 and "embedding" not in n)]
        groups = [
            {"params": decay, "weight_decay": self.hparams.weight_decay},
            {"params": other, "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr, betas=(0.9, 0.95))
        trainer = getattr(self, "_trainer", None)
        total = int(trainer.estimated_stepping_batches) if trainer is not None else 1000
        total = max(total, 1) if math.isfinite(total) else 1000
        warmup = max(1, min(self.hparams.warmup_steps, total // 2))

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
