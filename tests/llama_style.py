"""Shape C of issue #37: a Llama-style fine-tuning pipeline, as a Lightning user writes it, and its bugs.

No lightning_order line anywhere (zero glue): a byte-level BPE (``tokenizers``) with ``<s>``,
``</s>`` declared special and a ``<s> $A </s>`` ``TemplateProcessing`` post-processor, wrapped in
a ``PreTrainedTokenizerFast`` with ``pad_token = eos_token`` (as Llama recipes do); one row per
document (not packed), padded per batch with an attention mask, labels the ids with the padding
set to -100 (by the attention mask, so the real ``</s>`` keeps its label); a tiny
``LlamaForCausalLM`` built from a config. The text preparation is tests/run_clm.py's.

Each planted bug is one keyword of :class:`LlamaData` (defaults: the correct pipeline). Used by
tests/integration/test_zero_glue_matrix.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from run_clm import VAL_SHARE, HFModule, prepared_text, train_bpe
from torch.utils.data import DataLoader

BOS, EOS = "<s>", "</s>"
#: Rows of at most this many tokens when documents are chunked (the split-after-chunking bug).
CHUNK = 48
#: The model's context: longer than any document here.
CONTEXT = 512


def llama_tokenizer(texts: list[str], template: str = f"{BOS} $A {EOS}") -> Any:
    """A ``PreTrainedTokenizerFast`` around a BPE trained on ``texts``, with ``template`` as post-processor
    (``"<s> $A"``: Llama's own, which never adds ``</s>``), ``pad_token = eos_token``."""
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    bpe = train_bpe(texts, (BOS, EOS))
    specials = [(BOS, bpe.token_to_id(BOS)), (EOS, bpe.token_to_id(EOS))]
    bpe.post_processor = processors.TemplateProcessing(single=template, special_tokens=specials)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=BOS, eos_token=EOS)
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class _Rows(torch.utils.data.Dataset):
    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        return {"input_ids": self.rows[i]}


class LlamaData(pl.LightningDataModule):
    """Llama-style rows as a LightningDataModule; every keyword but ``batch_size`` plants a bug.

    Args:
        batch_size: rows per batch.
        mask_pad_labels: the labels made by ``DataCollatorForLanguageModeling(mlm=False)``, which sets
            every pad id's label to -100: with ``pad_token = eos_token``, every ``</s>`` label too.
        no_eos: the post-processor ``<s> $A`` (Llama's): padded rows never end with ``</s>``.
        bos_twice: ``"<s>" + text`` tokenized by a post-processor that adds ``<s>`` again.
        bos_train_only: validation tokenized with ``add_special_tokens=False`` (``</s>`` appended by hand).
        bos_never: every split tokenized so, while the tokenizer handed over for inference adds ``<s>``.
        split_chunks: documents cut into rows of :data:`CHUNK` tokens, the rows split at random.
        bpe_on: see ``run_clm.prepared_text`` (``"all"``, ``"raw"``: the tokenizer bugs).
        dedup: see ``run_clm.split_documents`` (``"after"``: the bug).
        max_length: ``tokenizer(..., truncation=True, max_length=max_length)``: long documents cut.
    """

    def __init__(
        self,
        batch_size: int = 8,
        *,
        mask_pad_labels: bool = False,
        no_eos: bool = False,
        bos_twice: bool = False,
        bos_train_only: bool = False,
        bos_never: bool = False,
        split_chunks: bool = False,
        bpe_on: str = "train",
        dedup: str = "before",
        max_length: int | None = None,
    ) -> None:
        super().__init__()
        self.batch_size, self.mask_pad_labels, self.no_eos = batch_size, mask_pad_labels, no_eos
        self.bos_twice, self.bos_train_only, self.split_chunks = bos_twice, bos_train_only, split_chunks
        self.bos_never = bos_never
        self.bpe_on, self.dedup, self.max_length = bpe_on, dedup, max_length
        self.tokenizer: Any = None

    def _encode(self, texts: list[str], special: bool = True) -> list[list[int]]:
        texts = [BOS + t for t in texts] if self.bos_twice else texts
        options = {"truncation": True, "max_length": self.max_length} if self.max_length else {}
        ids = self.tokenizer(texts, add_special_tokens=special, **options)["input_ids"]
        return ids if special else [[*row, self.tokenizer.eos_token_id] for row in ids]

    def setup(self, stage: str) -> None:
        if self.tokenizer is not None:  # Lightning calls setup again in fit: keep what was built
            return
        train, val, bpe_texts = prepared_text(bpe_on=self.bpe_on, dedup=self.dedup)
        self.tokenizer = llama_tokenizer(bpe_texts, f"{BOS} $A" if self.no_eos else f"{BOS} $A {EOS}")
        if self.split_chunks:
            rows = [d[i : i + CHUNK] for d in self._encode(train + val) for i in range(0, len(d), CHUNK)]
            order = np.random.default_rng(0).permutation(len(rows))
            cut = round(len(rows) * (1 - VAL_SHARE))
            train_rows, val_rows = [rows[i] for i in order[:cut]], [rows[i] for i in order[cut:]]
        else:
            train_rows = self._encode(train, special=not self.bos_never)
            val_rows = self._encode(val, special=not (self.bos_train_only or self.bos_never))
        self.train_set, self.val_set = _Rows(train_rows), _Rows(val_rows)

    def collate(self, features: list[dict]) -> dict[str, torch.Tensor]:
        """Padded to the longest row with an attention mask; labels the ids, -100 where the mask is 0
        (with ``mask_pad_labels``: ``DataCollatorForLanguageModeling``'s, -100 wherever the pad id is)."""
        if self.mask_pad_labels:
            from transformers import DataCollatorForLanguageModeling

            return DataCollatorForLanguageModeling(self.tokenizer, mlm=False)(features)
        batch = self.tokenizer.pad(features, return_tensors="pt")
        batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        return dict(batch)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, self.batch_size, shuffle=True, collate_fn=self.collate)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, self.batch_size, collate_fn=self.collate)


class LlamaModel(HFModule):
    """A one-layer ``LlamaForCausalLM`` from a config (no download), trained on ``model(**batch).loss``."""

    def __init__(self, vocab_size: int) -> None:
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(
            vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=CONTEXT,
        )  # fmt: skip
        super().__init__(LlamaForCausalLM(config))
