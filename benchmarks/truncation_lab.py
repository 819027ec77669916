"""Issue #43: documents truncated at a context longer than a row, then packed: seen with no record?

``tokenizer(..., truncation=True)`` at ``model_max_length`` before run_clm's ``group_texts`` cuts every
longer document to the context; when the context is longer than a block, no cut document is whole
inside one sampled row, so the length pile the validator reads within rows sees nothing. Joined in
index order, the first train rows give the documents back whole
(:func:`~lightning_order.checks.token_rows.joined_windows`, read as the validator reads them:
:data:`~lightning_order.callbacks.validator.lm.STREAM_LENGTH_TOKENS` tokens).

For two texts (tests/run_clm.py's made-up prose, the standard library's docstrings of
tests/corpus_shapes.py), each encoded by a BPE trained on it, blocks of 32 and 128 tokens and
contexts from half a block to 8 blocks, it prints the share of documents cut, whether the pile
within 512 rows finds it, and the pile of the joined rows (length, documents at it, documents seen
whole). Run: ``PYTHONPATH=$PWD:tests python benchmarks/truncation_lab.py`` (seconds, CPU).
"""

from __future__ import annotations

import numpy as np
from corpus_shapes import EOS, split_texts
from run_clm import prepared_text, train_bpe

from lightning_order.callbacks.validator.lm import STREAM_LENGTH_TOKENS
from lightning_order.checks.token_rows import document_lengths, joined_windows, stream_document_lengths
from lightning_order.checks.truncation import length_pile

#: Rows of the sample the within-row pile reads (the validator's default ``sample_rows``).
SAMPLE_ROWS = 512


def main() -> None:
    texts = {"run_clm prose": prepared_text()[0], "stdlib docstrings": split_texts()[0]}
    for name, train in texts.items():
        bpe = train_bpe(train, (EOS,))
        eos = bpe.token_to_id(EOS)
        encoded = [e.ids for e in bpe.encode_batch(train)]
        lengths = np.array([len(e) + 1 for e in encoded])
        print(f"{name}: {len(encoded)} documents, tokens (end-of-text included) median "
              f"{int(np.median(lengths))}, p90 {int(np.percentile(lengths, 90))}, max {lengths.max()}")  # fmt: skip
        for block in (32, 128):
            for context in (None, block // 2, block, 2 * block, 4 * block, 8 * block):
                ids = np.concatenate([np.append(e[:context] if context else e, eos) for e in encoded])
                rows = ids[: len(ids) // block * block].reshape(-1, block)[: STREAM_LENGTH_TOKENS // block]
                within = length_pile(document_lengths(rows[:SAMPLE_ROWS], None, eos))
                joined = length_pile(stream_document_lengths(joined_windows(rows), eos))
                cut = sum(len(e) > context for e in encoded) / len(encoded) if context else 0.0
                found = (joined.length, joined.count, joined.seen) if joined else None
                print(f"  block {block:4d} context {context!s:5s} cut {cut:4.0%}: within rows "
                      f"{within is not None!s:5s} joined {found}")  # fmt: skip


if __name__ == "__main__":
    main()
