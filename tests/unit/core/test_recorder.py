"""lightning_order.recorder: the decorator and context manager that write a hand-written ledger."""

from __future__ import annotations

import pytest
import torch
from handwritten import DocsData
from torch.utils.data import Subset

from lightning_order import (
    LM_PIPELINE,
    STANDARD_PIPELINE,
    Step,
    StepNameError,
    data_fingerprint,
    record_step,
    recording,
    require_steps,
)
from lightning_order.checks import check_ledger, judged_pipeline, project_pipeline
from lightning_order.recorder import declared_steps

ROWS = [{"text": f"<b>row {i}</b>", "x": float(i)} for i in range(10)]


class Prep:
    @record_step("load")
    def load(self):
        return [dict(r) for r in ROWS]

    @record_step("clean")
    def clean(self, rows):
        return [{**r, "text": r["text"].replace("<b>", "").replace("</b>", "")} for r in rows]

    @record_step("split")
    def split(self, rows):
        return rows[:8], rows[8:]

    @record_step("fit_features")
    def fit_features(self, rows):
        return {"mean": sum(r["x"] for r in rows) / len(rows)}

    @record_step("build_vocab")
    def build_vocab(self, rows):
        return sorted({w for r in rows for w in r["text"].split()})


def test_data_fingerprint_is_of_content():
    assert data_fingerprint({"a": torch.ones(3), "b": [1, "x"]}) == data_fingerprint(
        {"b": [1, "x"], "a": torch.ones(3)}
    )
    assert data_fingerprint(torch.ones(3)) != data_fingerprint(torch.ones(3, dtype=torch.float64))
    assert data_fingerprint(Subset(ROWS, [1, 2])) == data_fingerprint([ROWS[1], ROWS[2]])
    with pytest.raises(TypeError, match="memory address"):
        data_fingerprint(object())


def test_unknown_names_raise_at_decoration_with_the_valid_names():
    with pytest.raises(StepNameError) as caught:
        record_step("train_tokenizer")
    text = str(caught.value)
    assert "'train_tokenizer'" in text and "build_vocab" in text and "Pipeline.extend" in text
    with pytest.raises(StepNameError, match="did you mean 'clean'"):
        recording(object(), "claen").__enter__()
    with pytest.raises(StepNameError):
        require_steps("clean", "tokenise")
    custom = STANDARD_PIPELINE.extend(Step("dedupe", ("clean",), "rowwise"), before="split")
    assert callable(record_step("dedupe", pipeline=custom))


def test_the_correct_order_records_parts_inputs_and_what_fitted_steps_learned_from():
    prep = Prep()
    train, _ = prep.split(prep.clean(prep.load()))
    prep.fit_features(train)
    prep.build_vocab(train)
    ledger = prep.ledger
    split = ledger.latest("split")
    assert set(split.parts) == {"train", "val"} and split.inputs == {"clean": ledger.latest("clean").output}
    assert ledger.latest("fit_features").fitted_on == split.parts["train"]
    assert ledger.latest("build_vocab").inputs == {"split": split.parts["train"]}
    assert ledger.info["declared_steps"] == ["load", "clean", "split", "fit_features", "build_vocab"]
    assert check_ledger(ledger, judged_pipeline(STANDARD_PIPELINE, ledger)) == []


def test_statistics_on_all_rows_are_fit_before_split():
    prep = Prep()
    rows = prep.clean(prep.load())
    prep.fit_features(rows)
    prep.split(rows)
    rules = {v.rule for v in check_ledger(prep.ledger, judged_pipeline(STANDARD_PIPELINE, prep.ledger))}
    assert "fit-before-split" in rules


def test_a_vocabulary_on_text_clean_never_saw_is_vocab_before_clean():
    prep = Prep()
    raw = prep.load()
    prep.clean(raw)  # cleaning ran, but the split and the vocabulary read the raw rows
    prep.split(raw)
    prep.build_vocab(raw)
    rules = {v.rule for v in check_ledger(prep.ledger, judged_pipeline(STANDARD_PIPELINE, prep.ledger))}
    assert "vocab-before-clean" in rules


def test_context_manager_records_only_when_the_block_succeeds():
    prep = Prep()
    train, _ = prep.split(prep.clean(prep.load()))
    with pytest.raises(ZeroDivisionError), recording(prep, "fit_features", reads=[train]):
        raise ZeroDivisionError
    assert not prep.ledger.has("fit_features")
    with recording(prep, "fit_features", reads=[train]) as entry:
        entry.output = {"mean": 3.5}
    assert entry.record.fitted_on == prep.ledger.latest("split").parts["train"]


def test_setup_run_again_starts_a_new_run_but_parts_of_one_step_do_not():
    prep = Prep()
    rows = prep.load()
    train, val = prep.split(rows)
    prep.clean(train)
    prep.clean(val)  # one step on two parts: the same run
    assert prep.ledger.steps() == ["load", "split", "clean", "clean"]
    first = prep.ledger
    prep.load()  # Lightning called setup again
    assert prep.ledger is not first and prep.ledger.steps() == ["load"]


class PerSplitLM:
    """The docs' LM glue, encoding then packing each split in turn (#37: got missing-step)."""

    @record_step("load", pipeline=LM_PIPELINE)
    def load(self):
        return ["one document", "another one", "a third", "and a fourth", "the fifth"]

    @record_step("split", pipeline=LM_PIPELINE)
    def split(self, docs):
        return docs[:4], docs[4:]

    @record_step("build_vocab", pipeline=LM_PIPELINE)
    def build_vocab(self, train):
        return sorted({c for d in train for c in d})

    @record_step("encode", pipeline=LM_PIPELINE, params={"eos": True})
    def encode(self, vocab, docs):
        return [[vocab.index(c) + 1 if c in vocab else 1 for c in d] + [0] for d in docs]

    @record_step("pack", pipeline=LM_PIPELINE)
    def pack(self, ids):
        flat = [t for d in ids for t in d]
        return [flat[i : i + 5] for i in range(0, len(flat) - 4, 5)]


def test_encoding_then_packing_each_split_in_turn_is_one_run_and_no_missing_step():
    prep = PerSplitLM()
    train, val = prep.split(prep.load())
    vocab = prep.build_vocab(train)
    for docs in (train, val):
        prep.pack(prep.encode(vocab, docs))
    assert prep.ledger.steps() == ["load", "split", "build_vocab", "encode", "pack", "encode", "pack"]
    assert check_ledger(prep.ledger, judged_pipeline(LM_PIPELINE, prep.ledger)) == []
    first = prep.ledger
    prep.encode(vocab, train)  # the same data again: Lightning called setup again, a new run
    assert prep.ledger is not first and prep.ledger.steps() == ["encode"]


def test_only_declared_steps_are_judged():
    class OnlySplit:
        split = record_step("split")(Prep.split)

    assert declared_steps(OnlySplit) == ["split"]
    prep = OnlySplit()
    prep.split(list(ROWS))
    # 'split' requires 'clean' in the standard pipeline; this datamodule never declared it.
    assert check_ledger(prep.ledger, judged_pipeline(STANDARD_PIPELINE, prep.ledger)) == []
    assert "missing-step" in {v.rule for v in check_ledger(prep.ledger, STANDARD_PIPELINE)}


def test_projection_keeps_the_implied_order_and_kinds():
    projected = project_pipeline(STANDARD_PIPELINE, ["load", "split", "build_vocab", "train"])
    assert projected["split"].requires == ("load",) and projected["build_vocab"].kind == "fitted"
    assert projected.order() == ["load", "split", "build_vocab", "train"]


def test_what_a_step_read_is_fingerprinted_before_it_runs():
    class InPlace:
        @record_step("load")
        def load(self):
            return [{"text": "<b>a</b>"}, {"text": "<b>b</b>"}]

        @record_step("clean")
        def clean(self, rows):
            for row in rows:  # cleans in place and returns the same list
                row["text"] = row["text"].strip("<b>/")
            return rows

    prep = InPlace()
    prep.clean(prep.load())
    assert prep.ledger.latest("clean").inputs == {"load": prep.ledger.latest("load").output}


def test_a_misspelled_step_raises_at_decoration_with_the_valid_names():
    with pytest.raises(StepNameError) as caught:

        class Typo(DocsData):
            build_vocab = record_step("train_tokenizer")(DocsData.build_vocab)

    assert "'train_tokenizer'" in str(caught.value) and "build_vocab" in str(caught.value)
    with pytest.raises(StepNameError, match="did you mean 'build_vocab'"):
        require_steps("clean", step="biuld_vocab")


# -- #26: the recording API for hand-written LM pipelines ------------------------------------------
class HandLM:
    """A hand-written LM preparation recorded under the standard pipeline's names, as users write it."""

    def __init__(self, wrap: bool) -> None:
        self.wrap = wrap

    @record_step("load")
    def load(self):
        from nanogpt import corpus

        return list(corpus(120))

    @record_step("clean")
    def clean(self, docs):
        return [d.strip() for d in docs]

    @record_step("split")
    def split(self, docs):
        from nanogpt import split

        return split(tuple(docs))

    @record_step("build_vocab")
    def build_vocab(self, train):
        from nanogpt import EOS, train_tokenizer

        tokenizer = train_tokenizer(train, 400)
        self.eos_token_id = tokenizer.token_to_id(EOS)  # the one glue line of the issue
        if self.wrap:  # the object in use is transformers' wrapper of the tokenizer it trained
            from transformers import PreTrainedTokenizerFast

            self.tokenizer = PreTrainedTokenizerFast(tokenizer_object=tokenizer)
        else:
            self.tokenizer = tokenizer
        return tokenizer


class _TinyLM(torch.nn.Module):
    def __init__(self, rows: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(rows, 8)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.embed


@pytest.mark.parametrize("wrap", [False, True], ids=["tokenizers", "transformers"])
def test_a_correct_hand_written_run_that_records_build_vocab_is_no_vocab_change(wrap):
    from helpers import lm_violations

    from lightning_order.callbacks.validator.lm import is_lm

    dm = HandLM(wrap)
    train, _ = dm.split(dm.clean(dm.load()))
    dm.build_vocab(train)
    assert is_lm(dm)
    assert check_ledger(dm.ledger, judged_pipeline(STANDARD_PIPELINE, dm.ledger)) == []
    assert lm_violations(dm, _TinyLM(400), sample_rows=16) == []
    dm.tokenizer.add_special_tokens({"pad_token": "<pad>"}) if wrap else dm.tokenizer.add_tokens(["<pad>"])
    assert {v.rule for v in lm_violations(dm, _TinyLM(401), sample_rows=16)} == {"vocab-changed-after-init"}


def test_an_lm_step_under_the_standard_pipeline_says_to_pass_lm_pipeline():
    with pytest.raises(StepNameError) as caught:
        record_step("dedup")
    text = str(caught.value)
    assert "'dedup' is a step of LM_PIPELINE" in text and "pass pipeline=LM_PIPELINE" in text
    assert "Pipeline.extend" not in text
    assert callable(record_step("dedup", pipeline=LM_PIPELINE))


class PackNoEos:
    """``encode`` with its ``eos`` parameter recorded (``params=``), ``pack`` with its rate (``stats=``)."""

    eos = False

    @record_step("encode", pipeline=LM_PIPELINE, params=lambda self: {"eos": self.eos})
    def encode(self, docs):
        return [[ord(c) for c in d] + ([0] if self.eos else []) for d in docs]

    @record_step(
        "pack",
        pipeline=LM_PIPELINE,
        params={"block_size": 4},
        stats=lambda self, blocks: {"eos_rate": sum(b.count(0) for b in blocks) / (5 * len(blocks))},
    )
    def pack(self, ids):
        flat = [t for d in ids for t in d]
        return [flat[i : i + 5] for i in range(0, len(flat) - 4, 5)]


@pytest.mark.parametrize("eos", [False, True])
def test_record_step_records_params_and_stats_that_rules_read(eos):
    from lightning_order.checks.lm import check_lm_records

    prep = PackNoEos()
    prep.eos = eos
    prep.pack(prep.encode(["one document", "another one"]))
    encode, pack = prep.ledger.latest("encode"), prep.ledger.latest("pack")
    assert encode.params == {"eos": eos} and pack.params == {"block_size": 4}
    assert (pack.stats["eos_rate"] > 0) is eos
    assert prep.ledger.info["pipeline"] == "lm"
    rules = [v.rule for v in check_lm_records(prep.ledger)]
    assert rules == ([] if eos else ["pack-without-eos"])
    with recording(prep, "encode", pipeline=LM_PIPELINE, params={"eos": False}) as step:
        step.output, step.stats = [[1, 2]], {"documents": 1, "eos_tokens": 0}
    assert step.record.params == {"eos": False} and step.record.stats["eos_tokens"] == 0


def test_params_and_stats_must_be_mappings():
    class Bad:
        @record_step("load", params=lambda self: ["not", "a", "mapping"])
        def load(self):
            return [1]

    with pytest.raises(TypeError, match="params must give a mapping, got list"):
        Bad().load()


class _LMPrep:
    """A hand-written LM preparation with the glue docs/lm.md names for a tokenizer fitted on the wrong text."""

    @record_step("load", pipeline=LM_PIPELINE)
    def load(self) -> list[str]:
        return [f"<p>document {i} about {'tokens ' * (i % 5)}</p>" for i in range(60)]

    @record_step("clean", pipeline=LM_PIPELINE)
    def clean(self, docs: list[str]) -> list[str]:
        return [d.removeprefix("<p>").removesuffix("</p>") for d in docs]

    @record_step("dedup", pipeline=LM_PIPELINE)
    def dedup(self, docs: list[str]) -> list[str]:
        return list(dict.fromkeys(docs))

    @record_step("split", pipeline=LM_PIPELINE)
    def split(self, docs: list[str]) -> tuple[list[str], list[str]]:
        return docs[::5][1:] + docs[1::5] + docs[2::5] + docs[3::5], docs[4::5]

    @record_step("build_vocab", pipeline=LM_PIPELINE)
    def build_vocab(self, texts: list[str]) -> dict[str, int]:
        return {w: i for i, w in enumerate(sorted({w for t in texts for w in t.split()}))}


@pytest.mark.parametrize(
    ("case", "rules"),
    [
        ("correct", []),
        ("before-split", ["fit-before-split"]),
        ("raw", ["vocab-before-clean", "fit-before-split"]),
        # A concatenation is data no step produced: judged by its items against the split's val part.
        ("train+val", ["fit-before-split"]),
    ],
)
def test_a_vocabulary_fitted_on_the_wrong_text_with_record_step(case: str, rules: list[str]) -> None:
    prep = _LMPrep()
    raw = prep.load()
    if case == "raw":
        prep.build_vocab(raw)
    docs = prep.dedup(prep.clean(raw))
    if case == "before-split":
        prep.build_vocab(docs)
    train, val = prep.split(docs)
    if case in ("correct", "train+val"):
        prep.build_vocab(train if case == "correct" else train + val)
    judged = judged_pipeline(LM_PIPELINE, prep.ledger)  # type: ignore[attr-defined]
    assert [v.rule for v in check_ledger(prep.ledger, judged)] == rules  # type: ignore[attr-defined]


class _TwoLinesOfGlue:
    """Only ``split`` and ``build_vocab`` recorded: the glue docs/lm.md shows."""

    @record_step("split", pipeline=LM_PIPELINE)
    def split(self, docs: list[str]) -> tuple[list[str], list[str]]:
        return docs[:48], docs[48:]

    @record_step("build_vocab", pipeline=LM_PIPELINE)
    def build_vocab(self, texts: list[str]) -> list[str]:
        return sorted({w for t in texts for w in t.split()})


@pytest.mark.parametrize(("before_split", "rules"), [(False, []), (True, ["fit-before-split"])])
def test_two_decorators_catch_a_tokenizer_trained_before_the_split(
    before_split: bool, rules: list[str]
) -> None:
    prep, docs = _TwoLinesOfGlue(), [f"document {i} about {'tokens ' * (i % 5)}" for i in range(60)]
    if before_split:
        prep.build_vocab(docs)
    train, _ = prep.split(docs)
    if not before_split:
        prep.build_vocab(train)
    judged = judged_pipeline(LM_PIPELINE, prep.ledger)  # type: ignore[attr-defined]
    assert [v.rule for v in check_ledger(prep.ledger, judged)] == rules  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fed", "rules"),
    [("train+val", ["fit-before-split"]), ("train", []), ("half-train", []), ("train+empty-lines", [])],
)
def test_two_lines_of_glue_judge_a_vocabulary_fitted_on_train_plus_val(fed: str, rules: list[str]) -> None:
    prep = _TwoLinesOfGlue()
    docs = [f"document {i} about tokens" for i in range(55)] + [""] * 5
    train, val = prep.split(docs)
    texts = {
        "train+val": train + val,
        "train": train,
        "half-train": train[::2],
        # Items equal across splits by chance (empty lines in both) stay under the threshold.
        "train+empty-lines": [*train, "", ""],
    }[fed]
    prep.build_vocab(texts)
    judged = judged_pipeline(LM_PIPELINE, prep.ledger)  # type: ignore[attr-defined]
    found = check_ledger(prep.ledger, judged)  # type: ignore[attr-defined]
    assert [v.rule for v in found] == rules
    if rules:
        assert "build_vocab learned from 12 of the 12 val items" in found[0].message
        assert "train split only" in found[0].message
