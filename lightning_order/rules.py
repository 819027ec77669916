"""The rule codes and :class:`Violation`: the vocabulary every check speaks.

A leaf module: it imports nothing from this package, so the engine (``order.py``), the errors,
the pure checks and the callbacks can all depend on it without an import cycle. The keys of
:data:`RULES` are a contract: tests and users match on them, so a code is added, never renamed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RULES", "Rule", "Violation"]


@dataclass(frozen=True)
class Rule:
    """What a rule code means to a user.

    Attributes:
        title: what went wrong, in one line.
        symptom: what a user would see if training went on.
        fix: what to do.
    """

    title: str
    symptom: str
    fix: str


#: The stable rule codes, with what a user sees and what to do. Tests and users match on the keys.
RULES: dict[str, Rule] = {
    "missing-step": Rule(
        "a step ran although a step it requires never ran",
        "the step consumed data nobody produced: results depend on whatever was lying around",
        "run the missing step first, or declare your own step with Pipeline.extend",
    ),
    "out-of-order": Rule(
        "a step ran before a step it requires",
        "the step worked on inputs that did not exist yet in their final form",
        "run the steps in the pipeline's order (OrderedDataModule does it by default)",
    ),
    "stale-input": Rule(
        "a step's input is not the latest output of the step that produces it",
        "artefacts no longer match their inputs: silently wrong tokens or statistics",
        "re-run every step downstream of the re-run step (prepare the data again)",
    ),
    "vocab-before-clean": Rule(
        "the vocabulary was built from text that was not cleaned",
        "markup and '##' pieces become tokens, many unknown tokens, semantic drift",
        "build the vocabulary from the cleaned train text: clean -> split -> build_vocab",
    ),
    "fit-before-split": Rule(
        "a fitted step learned from data that includes validation rows",
        "validation metrics inflated by leakage; they drop on truly unseen data",
        "split first, then fit statistics and the vocabulary on the train split only",
    ),
    "shard-before-normalize": Rule(
        "the data was sharded before its statistics were fitted: each rank normalised on its own",
        "loss oscillates early, ranks disagree, convergence slows",
        "fit statistics once on the whole train split in prepare_data, then shard in setup",
    ),
    "init-before-data": Rule(
        "the model was built before the data's dimensions were known",
        "dimension mismatch, or a silently wrong embedding table; retraining needed",
        "build the model from the datamodule's dims: Model(**dm.dims), or LightningCLI "
        "link_arguments(..., apply_on='instantiate')",
    ),
    "train-val-overlap": Rule(
        "the same examples are in the train and the validation split",
        "validation metrics inflated: the model is scored on examples it trained on",
        "split by a hash of the cleaned key (or a group column), after cleaning",
    ),
    "rank-mismatch": Rule(
        "the ranks do not hold the same prepared data",
        "ranks train on different data or vocabularies; loss disagrees; DDP may hang",
        "prepare once (rank 0, shared cache) and let every rank load that cache in setup",
    ),
    "resume-data-changed": Rule(
        "the checkpoint was trained on other prepared data than this run's",
        "token ids and features mean something else than the weights learned: metrics collapse",
        "resume with the original data config, or use lightning_order.recover() to remap",
    ),
    "resume-position": Rule(
        "the resumed run would not continue where the checkpoint stopped in its epoch",
        "part of the epoch is trained on twice (over-weighted: memorisation, a flattered validation score) "
        "and part never (data the budget paid for, wasted); nothing crashes",
        "resume with a resumable train loader (OrderedDataModule and OrderedLMDataModule's are) and the "
        "checkpoint's seed, shuffle and global batch (world_size × batch_size); or resume from a checkpoint "
        "saved at the end of an epoch",
    ),
    "cycle": Rule(
        "the pipeline's requirements form a cycle",
        "the pipeline cannot run in any order",
        "remove one requirement of the cycle",
    ),
    "duplicate-step": Rule(
        "the pipeline declares two steps with the same name",
        "the pipeline is ambiguous: records of one step would be judged against the other",
        "give every step its own name, or replace a step with Pipeline.extend",
    ),
    "dedup-after-split": Rule(
        "deduplication ran after the train/validation split, or near-duplicates straddle the split",
        "validation perplexity is flattered by documents the model trained on in near-identical form",
        "deduplicate the whole cleaned corpus before the split: clean -> dedup -> split "
        "(OrderedLMDataModule does it by default)",
    ),
    "vocab-changed-after-init": Rule(
        "the tokenizer gained or changed tokens after the model was built",
        "'index out of range in self' / device-side asserts, checkpoint size mismatches "
        "([32004, ...] vs [32000, ...]), or new tokens read from untrained embedding rows",
        "declare every special token in build_vocab (before the model is built), then build the model "
        "from dm.dims; or resize the embedding and output head and record the new tokenizer",
    ),
    "pack-without-eos": Rule(
        "documents were concatenated into blocks without an end-of-text token between them",
        "the model never learns where a document ends: generations run on and start mid-sentence",
        "end every document with exactly one end-of-text token in encode, before pack "
        "(OrderedLMDataModule does it by default), or open every one with the tokenizer's declared "
        "BOS token (Llama's add_bos_token); never use the end-of-text id as padding",
    ),
    "labels-shifted-twice": Rule(
        "labels already shifted by one were fed to a model that shifts them itself (a transformers causal LM)",
        "the model learns the token after next: the loss stays high, generations are garbled, every step runs",
        'OrderedLMDataModule(batch_format="hf") (or "auto", chosen from the model at setup); in a hand-written '
        "pipeline pass labels equal to input_ids (-100 where no loss is wanted) and let the model shift them",
    ),
    "labels-not-shifted": Rule(
        "labels equal to the inputs were fed to a model that does not shift them (OrderedCausalLM)",
        "the model learns to copy its input: the loss falls towards zero while it learns nothing to predict",
        'OrderedLMDataModule(batch_format="shifted") (or "auto") for OrderedCausalLM; in a hand-written '
        "pipeline pass labels = input_ids shifted by one (labels[:, :-1] == input_ids[:, 1:])",
    ),
    "attention-crosses-documents": Rule(
        "with document-aware packing on, attention still crosses a document boundary in a packed block",
        "each document is predicted from the unrelated one packed before it: training runs, and the model "
        "learns to lean on context it will not have at inference",
        "serve position_ids that restart at 0 after every end-of-text id (OrderedLMDataModule("
        "document_attention=True) does), and a model that honours them: OrderedCausalLM, or a transformers "
        "model fed no attention_mask and built with use_cache=False",
    ),
    "mixture-off-weight": Rule(
        "the train tokens drawn from a mixture's sources stray from their stated weights beyond the tolerance",
        "the model trains on another mixture than the one stated: a source is over- or under-represented, "
        "and the run's results cannot be compared with the weights it claims",
        "give every source enough train blocks for its weight (more documents, a smaller block_size, or "
        "weights the data can meet), or state a wider mixture_tolerance; in a hand-written pipeline draw "
        "train blocks so each source's token share matches its weight",
    ),
    "eos-label-masked": Rule(
        "the end-of-text token is masked out of the loss (label -100): the pad id is the end-of-text id",
        "the model never learns to stop: generations run on past the end of a document; every step runs",
        "give the tokenizer a distinct pad token (tokenizer.add_special_tokens({'pad_token': '<pad>'}) before the "
        "model is sized), or build labels with a collator that masks by attention_mask, not by the pad id",
    ),
    "bos-mismatch": Rule(
        "documents start differently in training than at inference: BOS twice, on one split only, or missing",
        "a start-of-document token the model never saw (or saw twice) at inference: worse first tokens, "
        "validation loss that does not measure training's task",
        "let the tokenizer add BOS exactly once, the same way for every split (no '<s>' in the text when its "
        "post-processor adds one; the same add_special_tokens for train and validation)",
    ),
    "documents-truncated": Rule(
        "documents were truncated by the tokenizer before packing: their ends are lost",
        "the model never sees the end of long documents (nor their end-of-text): generations stop short or run on",
        "tokenize without truncation (tokenizer.no_truncation(), or truncation=False) and let packing cut blocks; "
        "truncate only padded rows that must fit the context, and say so",
    ),
    "documents-without-eos": Rule(
        "padded (not packed) training rows never end with the end-of-text token",
        "the model never learns to stop: generations run on to the length limit",
        "end every row with the end-of-text token: a post-processor template '<s> $A </s>' (Llama tokenizers add "
        "'<s>' only: add_eos_token=True), or append tokenizer.eos_token_id before padding",
    ),
    "rows-without-target": Rule(
        "training rows reach the loss with every target ignored (-100): nothing in them is learnt",
        "a batch of such rows gives a NaN loss; a share of them trains on fewer rows than it reads, without "
        "an error: the answers a completion-only collator should keep were never matched, or were cut away",
        "make every row keep at least one target: a response template whose ids match the tokenized rows "
        "(tokenized in context, without a leading BOS), prompts shorter than max_length (truncate the prompt, "
        "not the answer), or drop the rows whose answer does not fit",
    ),
    "ranks-read-same-data": Rule(
        "data-parallel ranks read the same samples: the epoch is not split between them",
        "every step averages gradients of repeated samples: an N-rank run learns from a fraction of the "
        "data at N times the cost, and part of the data is never read; no error, the loss looks fine",
        "let Lightning build the DistributedSampler (use_distributed_sampler=True, the default), or give "
        "every rank the same sampler seed and its own rank (DistributedSampler(dataset, seed=SEED) with "
        "the strategy's num_replicas/rank); an iterable loader must draw by rank (seed + rank, or a "
        "share of the stream per rank)",
    ),
    "rows-served-twice": Rule(
        "the train loader's workers serve the same rows: each worker reads the whole stream",
        "every row is trained on once per worker each epoch: an epoch costs N times its data, the loss "
        "falls faster than it should (memorised repeats) and validation does not follow; no error",
        "split the stream between loader workers in the dataset's __iter__: read "
        "torch.utils.data.get_worker_info() and keep only this worker's share (shards[info.id::info.num_workers], "
        "or every num_workers-th row), on top of the share per rank",
    ),
}


@dataclass(frozen=True)
class Violation:
    """One thing wrong with the order, with a stable ``rule`` code.

    Attributes:
        rule: one of :data:`RULES` (``missing-step``, ``out-of-order``, ``stale-input``, ...).
        steps: the steps involved, the offending step first.
        message: what happened, in this run's terms.
        symptom: what a user would see if training went on (default: the rule's).
        fix: what to do (default: the rule's).
        details: plain data behind the message (changed fingerprints, shapes, ...); not part of
            equality. Keep it JSON-able: it travels through all-gathers and checkpoints.
    """

    rule: str
    steps: tuple[str, ...]
    message: str
    symptom: str = ""
    fix: str = ""
    details: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"unknown rule code {self.rule!r}; expected one of {', '.join(RULES)}")
        object.__setattr__(self, "steps", tuple(self.steps))
        if not self.symptom:
            object.__setattr__(self, "symptom", RULES[self.rule].symptom)
        if not self.fix:
            object.__setattr__(self, "fix", RULES[self.rule].fix)

    def describe(self) -> str:
        """The violation as a few readable lines."""
        return f"[{self.rule}] {self.message}\n     likely symptom: {self.symptom}\n     fix: {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for all-gathers, logs, JSON and checkpoints); :meth:`from_dict` reads it back."""
        return {
            "rule": self.rule,
            "steps": list(self.steps),
            "message": self.message,
            "symptom": self.symptom,
            "fix": self.fix,
            "details": dict(self.details),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Violation:
        """The violation :meth:`to_dict` described (``symptom``, ``fix``, ``details`` optional)."""
        return cls(
            data["rule"],
            tuple(data["steps"]),
            data["message"],
            data.get("symptom", ""),
            data.get("fix", ""),
            dict(data.get("details") or {}),
        )
