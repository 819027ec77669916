"""lightning_order/callbacks/validator/lm.py: what the validator gathers on a language-modelling run.

What marks a run as language modelling with no glue, and where the eos id comes from.

The tokenizer facts read for the document start / end checks.

The zero-glue gathering of ``vocab-before-clean``.

tests/nanogpt.py's hand-written datamodule (``train.bin`` / ``val.bin`` windows, a
``PreTrainedTokenizerFast``) over raw pages cleaned before encoding (tests/markup.py): the BPE
trained on the raw pages is caught; trained on the cleaned train text, or elsewhere on other
pages (a supplied tokenizer), it is not. Through a Trainer: tests/integration/test_tokenizer_fit_zero_glue.py.

With document-aware packing on, the sampled batch's
positions and a probe forward on the model; ``attention-crosses-documents`` when attention crosses a boundary.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from helpers import lm_violations
from llama_style import llama_tokenizer
from markup import prepare_fits
from nanogpt import EOS, BinData, corpus, split, train_tokenizer
from run_clm import train_bpe

from lightning_order import OrderedCausalLM
from lightning_order.callbacks.validator.lm import (
    answers_kept,
    document_attention_on,
    document_violations,
    is_lm,
    label_shift_violations,
    lm_evidence,
    probe_leak,
    sampled_token_ids,
    token_evidence,
    tokenizer_facts,
    tokenizer_fit_violations,
    tokenizer_vocabulary,
)
from lightning_order.checks.truncation import AnswersKept, check_answers_cut_away
from lightning_order.ledger import StepLedger
from lightning_order.models.attention import document_positions


class _Data:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(split(corpus(100))[0], 300)


def _shifted(rows: int = 4, width: int = 9) -> torch.Tensor:
    return torch.arange(rows * width).reshape(rows, width) % 300


@pytest.mark.parametrize(
    ("batch", "lm"),
    [
        ((_shifted()[:, :-1], _shifted()[:, 1:]), True),  # nanoGPT's (x, y)
        ({"input_ids": _shifted(), "labels": _shifted()}, True),  # transformers shifts inside
        ({"input_ids": _shifted(), "labels": _shifted().masked_fill(_shifted() > 30, -100)}, True),
        ({"input_ids": _shifted(), "labels": torch.zeros(4, dtype=torch.long)}, False),  # classification
        ((_shifted(), _shifted().flip(1)), False),
    ],
    ids=["tuple-shifted", "dict-equal", "dict-masked", "classifier", "unrelated"],
)
def test_next_token_batches_mark_an_lm_run_with_no_glue(tokenizer, batch, lm):
    assert is_lm(_Data(tokenizer), batch) is lm
    assert is_lm(_Data(None), batch) is False  # no tokenizer: nothing to check against


def test_the_eos_id_comes_from_the_tokenizers_declared_special_token(tokenizer):
    from transformers import PreTrainedTokenizerFast

    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    assert wrapped.eos_token_id is None
    x = torch.full((2, 8), 5)
    for tok in (tokenizer, wrapped):
        evidence = lm_evidence(_Data(tok), torch.nn.Embedding(300, 4), (x, x))
        assert evidence["eos_id"] == tokenizer.token_to_id(EOS) and evidence["tokenizer_size"] == 300
        assert evidence["rows_with_eos"] == 0 and evidence["block_tokens"] == 9


class _Windows(_Data):
    """Windows of ``width`` tokens over a stream that holds no end-of-text id."""

    def __init__(self, tokenizer, width: int):
        super().__init__(tokenizer)
        stream = torch.arange(5000) % 250 + 1  # id 0 (<|endoftext|>) never occurs
        self.rows = [(stream[i : i + width], stream[i + 1 : i + width + 1]) for i in range(0, 4900, 7)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=8)


@pytest.mark.parametrize(("width", "rules"), [(32, ["pack-without-eos"]), (8, [])])
def test_no_end_of_text_is_a_violation_or_said_to_be_too_little_evidence(tokenizer, width, rules, caplog):
    from helpers import lm_violations

    with caplog.at_level("INFO", logger="lightning_order.callbacks.validator.lm"):
        found = lm_violations(_Windows(tokenizer, width), torch.nn.Embedding(300, 4), sample_rows=512)
    assert [v.rule for v in found] == rules
    assert ("not enough evidence" in caplog.text) is (not rules)


class _BosFirst(_Data):
    """Llama's ``add_bos_token`` packing: every document opens with ``<s>``, none ends with end-of-text.

    ``bos_id=None``: the same documents with neither boundary (still ``pack-without-eos``)."""

    def __init__(self, tokenizer, bos_id: int | None, width: int = 32):
        super().__init__(tokenizer)
        start = [bos_id] if bos_id is not None else []
        docs = [start + [int(t) for t in torch.arange(40 + i % 30) % 250 + 1] for i in range(120)]
        stream = torch.tensor([t for doc in docs for t in doc])  # id 0 (<|endoftext|>) never occurs
        self.rows = [(stream[i : i + width], stream[i + 1 : i + width + 1]) for i in range(0, 4900, 7)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=8)


@pytest.fixture(scope="module")
def bos_tokenizer():
    tokenizer = train_tokenizer(split(corpus(100))[0], 300)
    tokenizer.add_special_tokens(["<s>"])  # declared, as Llama's tokenizer declares it
    return tokenizer


@pytest.mark.parametrize("wrapped", [False, True], ids=["tokenizers", "transformers"])
@pytest.mark.parametrize(
    ("bos", "rules"), [(True, []), (False, ["pack-without-eos"])], ids=["bos-first", "neither"]
)
def test_a_bos_first_packing_is_a_packing_with_boundaries(bos_tokenizer, wrapped, bos, rules):
    from helpers import lm_violations
    from transformers import PreTrainedTokenizerFast

    bos_id = bos_tokenizer.token_to_id("<s>")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bos_tokenizer) if wrapped else bos_tokenizer
    data = _BosFirst(tokenizer, bos_id if bos else None)
    found = lm_violations(data, torch.nn.Embedding(301, 4), sample_rows=512)
    assert [v.rule for v in found] == rules
    if rules:  # the message names both boundaries it looked for
        assert f"no end-of-text id (0) nor start-of-document id ({bos_id})" in found[0].message


class _Blocks:
    """A hand-written datamodule with no tokenizer (``run_clm.py``'s): blocks served in one label convention."""

    def __init__(self, shifted: bool) -> None:
        blocks = torch.arange(16 * 9).reshape(16, 9) % 64
        inputs = blocks[:, :-1]
        labels = blocks[:, 1:] if shifted else inputs.clone()
        self.rows = [{"input_ids": i, "labels": lab} for i, lab in zip(inputs, labels)]

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.rows, batch_size=4)


def _gpt2_wrapped():
    transformers = pytest.importorskip("transformers")
    import pytorch_lightning as pl

    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=8)
    wrapper = pl.LightningModule()
    wrapper.model = transformers.GPT2LMHeadModel(config)
    return wrapper


def test_shifted_labels_into_a_transformers_causal_lm_are_caught_with_no_tokenizer():
    [violation] = lm_violations(_Blocks(shifted=True), _gpt2_wrapped(), sample_rows=16)
    assert violation.rule == "labels-shifted-twice"
    assert "GPT2LMHeadModel" in violation.message and "16 of 16 sampled train rows" in violation.message


def test_labels_in_the_models_own_convention_are_silent():
    from lightning_order import OrderedCausalLM

    assert label_shift_violations(_Blocks(shifted=False), _gpt2_wrapped(), 16) == []  # transformers shifts
    reference = OrderedCausalLM(vocab_size=64, padded_vocab_size=64, block_size=8, n_layer=1, n_embd=16)
    assert label_shift_violations(_Blocks(shifted=True), reference, 16) == []  # OrderedCausalLM does not


def test_tuple_batches_are_the_modules_own_targets_and_silent():
    """nanoGPT's ``(x, y)`` feeds the module's own cross-entropy on the HF model's logits: shifted is right."""

    class Tuples(_Blocks):
        def train_dataloader(self):
            rows = [(row["input_ids"], row["labels"]) for row in self.rows]
            return torch.utils.data.DataLoader(rows, batch_size=4)

    assert label_shift_violations(Tuples(shifted=True), _gpt2_wrapped(), 16) == []


TEXTS = ["ka lo mi ne ru ta vi zo", "pe sa do fu gi ha je ku"] * 20


def test_a_transformers_tokenizer_s_template_pad_and_bos():
    tokenizer = llama_tokenizer(TEXTS)
    facts = tokenizer_facts(tokenizer)
    assert facts.template == "<s> $A </s>" and facts.pad_id == tokenizer.eos_token_id
    assert facts.adds(tokenizer.bos_token_id) is True and facts.max_length is None
    assert tokenizer_facts(llama_tokenizer(TEXTS, "<s> $A")).template == "<s> $A"


def test_truncation_is_read_off_the_transformers_backend_before_the_probe_resets_nothing():
    tokenizer = llama_tokenizer(TEXTS)
    tokenizer(TEXTS, truncation=True, max_length=6)  # the last call leaves the backend truncating
    assert tokenizer_facts(tokenizer).max_length == 6
    assert tokenizer_facts(tokenizer).max_length == 6  # reading (and probing) changed nothing


def test_a_tokenizers_tokenizer_with_truncation_and_padding_on():
    tokenizer = train_bpe(TEXTS, ("<|endoftext|>", "<pad>"))
    assert tokenizer_facts(tokenizer).max_length is None and tokenizer_facts(tokenizer).adds(0) is False
    tokenizer.enable_truncation(24)
    tokenizer.enable_padding(pad_id=1, pad_token="<pad>")
    facts = tokenizer_facts(tokenizer)
    assert (facts.max_length, facts.pad_id, facts.template) == (24, 1, "$A")


def test_an_object_that_is_no_tokenizer_leaves_every_fact_unknown():
    facts = tokenizer_facts(object())
    assert (facts.pad_id, facts.max_length, facts.template, facts.adds(1)) == (None, None, None, None)


def test_truncation_to_model_max_length_is_read_with_that_length():
    tokenizer = llama_tokenizer(TEXTS)
    tokenizer.model_max_length = 16
    tokenizer(TEXTS, truncation=True)  # no max_length: transformers cuts at model_max_length
    assert tokenizer_facts(tokenizer).max_length == 16


def test_rows_padded_in_their_labels_only_are_read_as_padded_rows():
    # litgpt's SFT collate (#48): input_ids padded with 0, which is this BPE's end-of-text id too, and
    # no attention_mask; the padding shows only as trailing -100 labels. Read as packed rows, the
    # pads made "documents" of 1 token piling up: a false documents-truncated on correct SFT.
    tokenizer = train_bpe(TEXTS, ("<|endoftext|>", "<pad>"))
    rng = np.random.default_rng(0)
    ids = np.zeros((32, 40), dtype=np.int64)
    labels = np.full(ids.shape, -100)
    for row, length in enumerate(rng.integers(12, 40, size=32)):
        ids[row, : length - 1] = rng.integers(2, 60, size=length - 1)  # 0 after: the EOS, then pads
        labels[row, :length] = ids[row, :length]
    batch = {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels)}
    found = token_evidence(None, tokenizer, batch, eos_id=0, bos_id=None, sample_rows=8).violations
    assert found == []
    # The same rows with no end-of-text before their padding (a prompt style that adds none): named.
    no_end = {"input_ids": batch["input_ids"], "labels": torch.tensor(np.where(ids == 0, -100, labels))}
    rules = [
        v.rule
        for v in token_evidence(None, tokenizer, no_end, eos_id=0, bos_id=None, sample_rows=8).violations
    ]
    assert rules == ["documents-without-eos"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return prepare_fits(tmp_path_factory.mktemp("tokenizer_fit"))


def _data(folder: Path) -> BinData:
    dm = BinData(folder)
    dm.setup("fit")
    return dm


def test_a_tokenizer_trained_on_raw_pages_is_caught(folders: dict[str, Path]) -> None:
    (violation,) = tokenizer_fit_violations(_data(folders["raw"]), None, None, 512)
    assert violation.rule == "vocab-before-clean"
    assert (
        "markup-like merged entries" in violation.message
        and "clean -> split -> build_vocab" in violation.message
    )


@pytest.mark.parametrize("fit_on", ["clean", "elsewhere"])
def test_correct_tokenizers_are_silent(folders: dict[str, Path], fit_on: str) -> None:
    assert tokenizer_fit_violations(_data(folders[fit_on]), None, None, 512) == []


def test_the_raw_tokenizer_object_and_the_fast_one_read_alike(folders: dict[str, Path]) -> None:
    dm = _data(folders["raw"])
    fast = tokenizer_vocabulary(dm.tokenizer)
    raw = tokenizer_vocabulary(dm.tokenizer.backend_tokenizer)
    assert fast == raw and fast is not None
    vocab, special = fast
    assert len(vocab) == len(dm.tokenizer) and vocab[next(iter(special))] == "<|endoftext|>"


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        ((torch.tensor([[1, 2], [3, 4]]), torch.tensor([[2, 5], [4, 6]])), [1, 2, 5, 3, 4, 6]),
        ({"input_ids": torch.tensor([[7, 8]]), "labels": torch.tensor([[8, -100]])}, [7, 8]),
        ({"features": torch.zeros(2, 3)}, None),
        ((torch.zeros(2, 3), torch.zeros(2)), None),  # floating features: no token ids
    ],
)
def test_sampled_token_ids(batch: object, expected: list[int] | None) -> None:
    ids = sampled_token_ids(batch)
    assert (ids is None) if expected is None else (ids is not None and ids.tolist() == expected)


def test_no_tokenizer_no_evidence() -> None:
    assert tokenizer_fit_violations(object(), None, None, 8) == []
    assert tokenizer_vocabulary(object()) is None


EOS_ID = 1
VOCAB = {"vocab_size": 60, "padded_vocab_size": 64, "block_size": 16}


def _dm(on: bool = True, recorded: bool | None = None) -> Any:
    ledger = StepLedger()
    if recorded is not None:
        ledger.info["document_attention"] = recorded
    return SimpleNamespace(config=SimpleNamespace(document_attention=on), ledger=ledger)


def _batch(positions: bool = True) -> dict[str, torch.Tensor]:
    ids = torch.randint(2, 60, (4, 16), generator=torch.Generator().manual_seed(0))
    ids[:, 5] = EOS_ID
    ids[2, 11] = EOS_ID
    batch = {"input_ids": ids, "labels": ids.roll(-1, 1)}
    if positions:
        batch["position_ids"] = document_positions(ids, EOS_ID)
    return batch


class IgnoresPositions(OrderedCausalLM):
    """A model that drops ``position_ids``: plain causal attention over the whole block."""

    def forward(self, batch: Any) -> torch.Tensor:
        return super().forward(batch["input_ids"] if isinstance(batch, dict) else batch)


def _model(cls: type = OrderedCausalLM) -> OrderedCausalLM:
    torch.manual_seed(0)
    return cls(**VOCAB, n_layer=1, n_embd=32)


def test_the_option_is_read_from_the_ledger_first_then_the_config() -> None:
    assert document_attention_on(_dm(on=True)) and not document_attention_on(_dm(on=False))
    assert document_attention_on(_dm(on=False, recorded=True))
    assert not document_attention_on(_dm(on=True, recorded=False))
    assert not document_attention_on(SimpleNamespace())  # a hand-written datamodule: off


def test_a_correct_run_is_silent() -> None:
    assert document_violations(_dm(), _model(), _batch(), EOS_ID) == []


def test_off_nothing_is_judged() -> None:
    assert (
        document_violations(_dm(on=False), IgnoresPositions(**VOCAB, n_layer=1), _batch(False), EOS_ID) == []
    )


def test_batches_without_positions_cross_documents() -> None:
    [violation] = document_violations(_dm(), _model(), _batch(positions=False), EOS_ID)
    assert violation.rule == "attention-crosses-documents" and "hold no position_ids" in violation.message


def test_positions_that_do_not_restart_after_end_of_text_cross_documents() -> None:
    batch = _batch()
    batch["position_ids"] = torch.arange(16).expand(4, 16).clone()  # today's positions, never restarting
    [violation] = document_violations(_dm(), _model(), batch, EOS_ID)
    assert violation.rule == "attention-crosses-documents"
    assert "4 of 4 sampled train rows hold position_ids that do not restart" in violation.message


def test_a_model_that_ignores_the_positions_is_caught_by_the_probe() -> None:
    [violation] = document_violations(_dm(), _model(IgnoresPositions), _batch(), EOS_ID)
    assert violation.rule == "attention-crosses-documents"
    assert "IgnoresPositions ignores the document boundaries" in violation.message
    assert violation.details["leak"] > 1e-3


def test_the_probe_leaves_the_model_as_it_was() -> None:
    model = _model()
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert probe_leak(model, _batch(), EOS_ID) == 0.0
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_no_probe_without_a_boundary_or_for_an_unknown_model() -> None:
    batch = _batch()
    batch["input_ids"][:, 5] = 7
    batch["input_ids"][2, 11] = 7
    assert probe_leak(_model(), batch, EOS_ID) is None  # no end-of-text: nothing to perturb
    assert probe_leak(torch.nn.Linear(2, 2), _batch(), EOS_ID) is None


def _llama(use_cache: bool | None) -> Any:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=16,
    )
    if use_cache is not None:
        config.use_cache = use_cache
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def _hf_batch(mask: bool = False) -> dict[str, torch.Tensor]:
    batch = _batch()
    batch["labels"] = batch["input_ids"].clone()
    if mask:
        batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    return batch


def test_a_llama_without_cache_and_mask_keeps_documents_apart() -> None:
    assert document_violations(_dm(), _llama(use_cache=False), _hf_batch(), EOS_ID) == []


@pytest.mark.parametrize(("use_cache", "mask"), [(None, False), (False, True)], ids=["cache-on", "mask"])
def test_a_llama_that_falls_back_to_causal_attention_is_caught(use_cache: bool | None, mask: bool) -> None:
    """transformers reads packed position_ids only without an attention_mask and without a cache."""
    [violation] = document_violations(_dm(), _llama(use_cache), _hf_batch(mask), EOS_ID)
    assert violation.rule == "attention-crosses-documents"
    assert "LlamaForCausalLM ignores the document boundaries" in violation.message
    assert "use_cache = False" in violation.message


# -- instruction rows that keep none of their answer (rows-without-target) -------------------------
ANSWER_IGNORE = -100


class Instructions(torch.utils.data.Dataset):
    """litgpt's ``SFTDataset`` in miniature: prompt + answer ids, cut at ``max_seq_length``."""

    def __init__(self, prompt_lengths: list[int], answer: int, max_seq_length: int, mask_prompt: bool = False):
        self.prompt_lengths, self.answer = prompt_lengths, answer
        self.max_seq_length, self.mask_prompt, self.ignore_index = max_seq_length, mask_prompt, ANSWER_IGNORE

    def __len__(self) -> int:
        return len(self.prompt_lengths)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        prompt = self.prompt_lengths[index]
        ids = torch.arange(prompt + self.answer)[: self.max_seq_length]
        labels = ids.clone()
        if self.mask_prompt:
            labels[:prompt] = self.ignore_index
        return {"input_ids": ids, "labels": labels}


def test_rows_cut_inside_their_prompt_are_counted_and_the_run_s_dataset_is_left_as_it_was():
    dataset = Instructions([30, 90, 100, 40], answer=20, max_seq_length=80)
    kept = answers_kept(dataset)
    assert kept == AnswersKept(rows=4, without_answer=2, max_seq_length=80)
    assert dataset.mask_prompt is False and dataset[1]["labels"].min() >= 0
    (violation,) = check_answers_cut_away(kept)
    assert violation.rule == "rows-without-target" and "2 of the first 4" in violation.message
    assert "max_seq_length=80" in violation.message


def test_answers_cut_short_but_kept_are_silent():
    # Long answers cut by max_seq_length are still answers: a correct run, no violation.
    kept = answers_kept(Instructions([30, 40, 50], answer=500, max_seq_length=64))
    assert kept is not None and kept.without_answer == 0 and check_answers_cut_away(kept) == []


def test_only_datasets_that_train_on_their_prompt_are_read():
    assert answers_kept(Instructions([90], answer=5, max_seq_length=64, mask_prompt=True)) is None
    assert answers_kept(torch.utils.data.TensorDataset(torch.zeros(4, 3))) is None

    class Stream(torch.utils.data.IterableDataset):
        mask_prompt = False

        def __iter__(self):
            yield {"labels": torch.zeros(3)}

    assert answers_kept(Stream()) is None
    assert check_answers_cut_away(None) == []


def test_a_dataset_that_cannot_be_read_is_no_evidence():
    class Broken(Instructions):
        def __getitem__(self, index):
            raise OSError("gone")

    assert answers_kept(Broken([90], answer=5, max_seq_length=64)) is None
