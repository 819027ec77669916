"""Instruction rows trained on their prompt that keep none of their answer (``rows-without-target``)."""

from __future__ import annotations

import torch

from lightning_order.callbacks.validator.answers import answers_kept
from lightning_order.checks.truncation import AnswersKept, check_answers_cut_away

IGNORE = -100


class Instructions(torch.utils.data.Dataset):
    """litgpt's ``SFTDataset`` in miniature: prompt + answer ids, cut at ``max_seq_length``."""

    def __init__(self, prompt_lengths: list[int], answer: int, max_seq_length: int, mask_prompt: bool = False):
        self.prompt_lengths, self.answer = prompt_lengths, answer
        self.max_seq_length, self.mask_prompt, self.ignore_index = max_seq_length, mask_prompt, IGNORE

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
