"""The reference model: a small text classifier that takes the data's dims as constructor arguments.

``OrderedTextClassifier`` is what ``lightning-order fit`` trains by default. It is deliberately
small so that the demo trains in minutes on two CPU cores: a token embedding averaged over the
real (non-padding) tokens, an MLP over the numeric ``features``, and a linear head over both. It
takes ``vocab_size``, ``num_features`` and ``num_classes`` as arguments (never reads them from
data itself), so the model can only be built once the data is known: the CLI links them from
``OrderedDataModule.dims`` at instantiation, and ``save_hyperparameters`` keeps them in every
checkpoint, where the order checks read them.

A mean of embeddings ignores word order; that is the trade-off for speed, and enough to show
whether the data pipeline is right (a wrong order shows as chance accuracy or a dims mismatch).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn
from torchmetrics.classification import MulticlassAccuracy, MulticlassF1Score

from lightning_order import compat as pl

__all__ = ["OrderedTextClassifier"]

Batch = dict[str, torch.Tensor]


class OrderedTextClassifier(pl.LightningModule):
    """Masked mean of token embeddings plus an MLP over numeric features, then a linear head.

    Batches are dicts with ``input_ids`` (B × L, long, padded with 0), ``attention_mask``
    (B × L), ``features`` (B × F, float) and ``labels`` (B, long), as ``OrderedDataModule`` yields.

    Examples:
        >>> model = OrderedTextClassifier(vocab_size=100, num_features=3, num_classes=2)
        >>> batch = {
        ...     "input_ids": torch.randint(1, 100, (4, 8)),
        ...     "attention_mask": torch.ones(4, 8, dtype=torch.long),
        ...     "features": torch.randn(4, 3),
        ... }
        >>> model(batch).shape
        torch.Size([4, 2])

    Args:
        vocab_size: number of token ids (the data's ``vocab_size``; id 0 is padding).
        num_features: width of ``batch["features"]`` (the data's ``num_features``; may be 0).
        num_classes: number of labels (the data's ``num_classes``; at least 2).
        max_length: token sequence length the data was encoded to (kept in ``hparams`` for the
            dims checks; the model itself accepts any length).
        embed_dim: width of the token embedding.
        hidden_dim: width of the hidden layer of the classifier.
        dropout: dropout before the classifier head.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
    """

    def __init__(
        self,
        vocab_size: int,
        num_features: int,
        num_classes: int,
        max_length: int = 128,
        embed_dim: int = 64,
        hidden_dim: int = 128,
        dropout: float = 0.1,
        lr: float = 3e-3,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__()
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be at least 2 (padding plus one token), got {vocab_size}")
        if num_features < 0:
            raise ValueError(f"num_features must be 0 or more, got {num_features}")
        if num_classes < 2:
            raise ValueError(
                f"num_classes must be at least 2, got {num_classes}: does the label column hold one value only?"
            )
        self.save_hyperparameters()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=0)
        with warnings.catch_warnings():
            # A zero-width Linear is legal (a dataset without numeric columns adds a constant);
            # torch only warns that initialising its empty weight does nothing.
            warnings.filterwarnings("ignore", message="Initializing zero-element tensors")
            self.feature_proj = nn.Linear(num_features, hidden_dim)
        self.feature_mlp = nn.Sequential(nn.ReLU(), nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.head = nn.Sequential(
            nn.Linear(embed_dim + hidden_dim, hidden_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(hidden_dim, num_classes),
        )
        self.loss_fn = nn.CrossEntropyLoss()
        self.val_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")
        self.val_f1 = MulticlassF1Score(num_classes=num_classes, average="macro")
        self.test_acc = MulticlassAccuracy(num_classes=num_classes, average="micro")
        self.test_f1 = MulticlassF1Score(num_classes=num_classes, average="macro")

    def forward(self, batch: Batch) -> torch.Tensor:
        """Class logits (B × num_classes) for a batch dict."""
        input_ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        if mask is None:
            mask = (input_ids != 0).long()
        weights = mask.unsqueeze(-1).to(self.embedding.weight.dtype)
        summed = (self.embedding(input_ids) * weights).sum(dim=1)
        pooled = summed / weights.sum(dim=1).clamp(min=1.0)
        features = batch.get("features")
        if features is None:
            features = pooled.new_zeros(input_ids.shape[0], self.hparams.num_features)
        hidden = self.feature_mlp(self.feature_proj(features.to(pooled.dtype)))
        return self.head(torch.cat([pooled, hidden], dim=-1))

    def _shared_step(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        logits = self(batch)
        labels = batch["labels"]
        return self.loss_fn(logits, labels), logits.argmax(dim=-1), labels

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        """Cross-entropy loss; logs ``train_loss`` and ``train_acc``."""
        loss, preds, labels = self._shared_step(batch)
        size = labels.shape[0]
        self.log("train_loss", loss, prog_bar=True, batch_size=size)
        accuracy = (preds == labels).float().mean()
        self.log("train_acc", accuracy, on_step=False, on_epoch=True, sync_dist=True, batch_size=size)
        return loss

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        """Logs ``val_loss``, ``val_acc`` and ``val_f1`` (macro)."""
        loss, preds, labels = self._shared_step(batch)
        self.val_acc(preds, labels)
        self.val_f1(preds, labels)
        size = labels.shape[0]
        self.log("val_loss", loss, prog_bar=True, sync_dist=True, batch_size=size)
        self.log("val_acc", self.val_acc, prog_bar=True, batch_size=size)
        self.log("val_f1", self.val_f1, batch_size=size)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        """Logs ``test_loss``, ``test_acc`` and ``test_f1`` (macro)."""
        loss, preds, labels = self._shared_step(batch)
        self.test_acc(preds, labels)
        self.test_f1(preds, labels)
        size = labels.shape[0]
        self.log("test_loss", loss, sync_dist=True, batch_size=size)
        self.log("test_acc", self.test_acc, batch_size=size)
        self.log("test_f1", self.test_f1, batch_size=size)

    def predict_step(self, batch: Batch, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        """Predicted class ids (B)."""
        return self(batch).argmax(dim=-1)

    def configure_optimizers(self) -> Any:
        """AdamW over all parameters, with ``lr`` and ``weight_decay`` from the constructor."""
        return torch.optim.AdamW(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )
