"""``lightning-order export``: a trained ``OrderedCausalLM`` loads in ``transformers`` and gives the same logits."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from lightning_order import OrderedCausalLM
from lightning_order.cli import main
from lightning_order.data.lm.hf_tokenizer import save_tokenizer
from lightning_order.data.lm.tokenizer import train_byte_bpe

transformers = pytest.importorskip("transformers")

SPECIAL = {"eos_token": "<|endoftext|>", "bos_token": "<|bos|>"}


def _stdlib_docs() -> list[str]:
    """Real text: the docstrings of a few standard-library modules' members."""
    import collections
    import json as json_module
    import pathlib

    docs = []
    for module in (collections, json_module, pathlib):
        for _, member in inspect.getmembers(module):
            doc = inspect.getdoc(member)
            if doc:
                docs.append(doc)
    return docs


def _tokenizer_folder(folder: Path, docs: list[str]) -> int:
    tokenizer = train_byte_bpe(docs, 300, eos_token=SPECIAL["eos_token"], bos_token=SPECIAL["bos_token"])
    save_tokenizer(folder, tokenizer, SPECIAL)
    return tokenizer.get_vocab_size()


def _non_trivial(model: OrderedCausalLM) -> OrderedCausalLM:
    """Every weight random, biases and norms included: a tensor mapped to the wrong place shows."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.2 + (1.0 if param.ndim == 1 else 0.0))
    return model.eval()


def _prompt_ids(out: Path, text: str) -> torch.Tensor:
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    return torch.tensor([tokenizer(text)["input_ids"]])


@pytest.mark.parametrize("tie_weights", [True, False])
def test_export_round_trip_gives_the_same_logits(tmp_path: Path, tie_weights: bool) -> None:
    docs = _stdlib_docs()
    vocab = _tokenizer_folder(tmp_path / "checkpoints" / "tokenizer", docs)
    model = _non_trivial(
        OrderedCausalLM(
            vocab_size=vocab, padded_vocab_size=vocab + 13, block_size=64, n_layer=2, n_head=4, n_embd=32,
            tie_weights=tie_weights,
        )
    )
    checkpoint = tmp_path / "checkpoints" / "last.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, checkpoint)

    assert main(["export", str(checkpoint), str(tmp_path / "hf")]) == 0

    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = _prompt_ids(tmp_path / "hf", docs[3][:200])[:, :64]
    assert ids.shape[1] > 8
    with torch.no_grad():
        ours = model(ids)[..., :vocab]
        theirs = hf(ids).logits
    assert theirs.shape == ours.shape  # the padding rows are not part of the exported vocabulary
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-4)
    assert hf.config.tie_word_embeddings is tie_weights
    assert hf.config.eos_token_id == transformers.AutoTokenizer.from_pretrained(tmp_path / "hf").eos_token_id
    assert not (tmp_path / "hf" / "lightning_order_files.json").exists()  # our record stays with the run


def test_export_of_a_real_fit_checkpoint(tmp_path: Path) -> None:
    """A checkpoint Lightning wrote (hyperparameters as Lightning saves them, optimizer state beside)."""
    from helpers import quiet_trainer

    vocab = _tokenizer_folder(tmp_path / "tokenizer", _stdlib_docs())
    model = OrderedCausalLM(vocab_size=vocab, padded_vocab_size=vocab + 4, block_size=16, n_layer=1, n_embd=32)
    blocks = torch.randint(0, vocab, (8, 17), generator=torch.Generator().manual_seed(1))
    rows = [{"input_ids": b[:-1], "labels": b[1:]} for b in blocks]
    trainer = quiet_trainer(max_steps=2, default_root_dir=tmp_path)
    trainer.fit(model, DataLoader(rows, batch_size=4))
    checkpoint = tmp_path / "fit.ckpt"
    trainer.save_checkpoint(checkpoint)

    assert main(["export", str(checkpoint), str(tmp_path / "hf"), "--tokenizer", str(tmp_path / "tokenizer")]) == 0

    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(blocks[:2, :-1]).logits, model.eval()(blocks[:2, :-1])[..., :vocab], rtol=1e-4, atol=1e-4)


def test_export_refuses_what_it_cannot_map_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_ours = tmp_path / "other.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(1)}, "hyper_parameters": {"lr": 0.1}}, not_ours)
    assert main(["export", str(not_ours), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "not a checkpoint of lightning_order's OrderedCausalLM" in err and "Traceback" not in err

    model = OrderedCausalLM(vocab_size=10, padded_vocab_size=16, block_size=4, n_layer=1, n_embd=8, n_head=2)
    no_tokenizer = tmp_path / "alone" / "m.ckpt"
    no_tokenizer.parent.mkdir()
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams)}, no_tokenizer)
    assert main(["export", str(no_tokenizer), str(tmp_path / "out")]) == 1
    assert "no tokenizer at" in capsys.readouterr().err and not (tmp_path / "out").exists()

    garbage = tmp_path / "garbage.ckpt"
    garbage.write_bytes(b"not a checkpoint")
    assert main(["export", str(garbage), str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "garbage.ckpt" in err and "Traceback" not in err


def test_export_is_listed_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "export" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    assert "--tokenizer" in capsys.readouterr().out
