"""Every ```python and ```bash block of the user guide (docs/guide/*.md) and of README.md runs as written.

A page's blocks run in order, in one temporary folder per page that holds a copy of ``configs/`` (as a
clone of the repository does) and is the user's home (``~/.cache/lightning_order`` lands there). Each
block runs in a process forked from one interpreter that imported torch and Lightning once
(``helpers.in_preloaded_process``), so a command costs its own work, not Python's start-up.

A block may be preceded by an HTML comment, invisible on the page, that says how the suite runs it:

- ``<!-- snippet: setup=NAME -->``: the folder gets what :data:`SETUPS` says (a tiny corpus, a trained
  checkpoint...), and ``lightning-order`` commands get that setup's bounding options appended (fewer
  documents, two steps); Python blocks run after its prelude (a ``Trainer`` held to two steps). The user
  reads the real command; only the suite's run is bounded.
- ``<!-- snippet: file=NAME -->``: the block is a file the user writes (``my_model.py``, ``hf.yaml``),
  saved under that name for the blocks after it (also for ```yaml blocks).
- ``<!-- snippet: expect=N -->``: the commands of a ```bash block exit with ``N`` (a refused run, say);
  ``raises=OrderError``: a Python block ends by raising that error.
- ``<!-- snippet: skip REASON -->``: not runnable here (GPUs, a cluster), with the reason.

In a ```bash block, the ``lightning-order ...`` and ``python ...`` commands run (``\\`` continuations
joined, a ``| dot ...`` or ``> file`` tail and ``# comments`` dropped); other programs (``pip``,
``pytest``, ``dot``, ``kubectl``) are the user's to run and are listed, not run. Pages whose setup
trains are ``slow`` (the whole guide otherwise runs in a few seconds).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
from helpers import ROOT, in_preloaded_process

GUIDE = ROOT / "docs" / "guide"
#: The pages whose blocks run: the guide, then the README (the front page).
PAGES = [*sorted(GUIDE.glob("*.md")), ROOT / "README.md"]
RUN_LANGUAGES = ("python", "bash")
_FENCE = re.compile(r"^```(\w*)\s*$")
_DIRECTIVE = re.compile(r"^<!--\s*snippet:\s*(.*?)\s*-->\s*$")
#: Programs a bash block may name that the suite leaves to the user (listed, not run).
USER_PROGRAMS = {"pip", "pytest", "dot", "kubectl", "ray", "git", "cd", "export", "sudo", "apt-get", "brew", "srun"}




@dataclass(frozen=True)
class Setup:
    """What a page's folder gets before a block runs, and how its commands are bounded.

    Attributes:
        files: makes ``name -> text`` to write into the folder (called when a block needs them).
        data: options appended to ``lightning-order fit/validate/prepare`` (the data section).
        trainer: options appended to ``lightning-order fit`` (the trainer section).
        prelude: Python run before a Python block (in its process).
        slow: the block trains a model (the page's test is marked ``slow``).
    """

    files: Callable[[], dict[str, str]] = dict
    data: tuple[str, ...] = ()
    trainer: tuple[str, ...] = ()
    prelude: str = ""
    slow: bool = False


_TWO_STEPS = ("--trainer.max_steps", "2", "--trainer.limit_val_batches", "2", "--trainer.enable_progress_bar", "false")
#: A ``Trainer`` held to two steps (and two validation batches), whatever the block asks for.
_TINY_TRAINER = textwrap.dedent(
    """
    import lightning.pytorch, pytorch_lightning

    def _bounded(init):
        def __init__(self, *args, **kwargs):
            kwargs.update(max_steps=2, max_epochs=1, limit_val_batches=2, num_sanity_val_steps=0,
                          enable_progress_bar=False, accelerator="cpu", devices=1)
            kwargs.pop("strategy", None)
            init(self, *args, **kwargs)
        return __init__

    for _namespace in (lightning.pytorch, pytorch_lightning):
        _namespace.Trainer.__init__ = _bounded(_namespace.Trainer.__init__)
    """
)


@cache
def _text_corpus(count: int = 300) -> dict[str, str]:
    """``corpus/*.txt``: one small document per file, varied enough for a byte-level BPE."""
    from lightning_order.data.lm.corpus import stdlib_corpus

    documents = stdlib_corpus(max_documents=count)
    return {f"corpus/doc{i:03d}.txt": text for i, text in enumerate(documents)}


@cache
def _reviews_csv() -> dict[str, str]:
    """``reviews.csv`` (text, label, price, stars) from the demo rows, as the README's example reads it."""
    from lightning_order.data.text.demo import demo_rows

    lines = ["text,label,price,stars"]
    for row in demo_rows(400, seed=1):
        text = row["text"].replace('"', '""')
        lines.append(f'"{text}",{row["label"]},{row["amount"]},{row["score"]}')
    return {"reviews.csv": "\n".join(lines) + "\n"}


@cache
def _llama_tokenizer() -> dict[str, str]:
    """``llama-tokenizer/``: a Llama-style folder (``<s>``, ``</s>``, ``<s> $A </s>``) beside ``corpus/``."""
    import tempfile

    from lm_tokenizers import llama_style_folder

    with tempfile.TemporaryDirectory() as folder:
        saved = llama_style_folder(Path(folder) / "tok", list(_text_corpus().values()))
        files = {f"llama-tokenizer/{p.name}": p.read_text() for p in saved.iterdir()}
    return {**_text_corpus(), **files}


@cache
def _mixture_sources() -> dict[str, str]:
    """``corpus/web/*.txt`` and ``corpus/code/*.txt``: two sources of 150 documents each."""
    documents = list(_text_corpus().values())
    return {f"corpus/{'web' if i % 2 else 'code'}/doc{i:03d}.txt": text for i, text in enumerate(documents)}


@cache
def _manifest() -> dict[str, str]:
    """``path/to/prepared/manifest.json``: a clean ledger of the classification pipeline's data steps."""
    import tempfile

    from helpers import clean_ledger

    with tempfile.TemporaryDirectory() as folder:
        saved = clean_ledger().save(Path(folder) / "manifest.json")
        return {"path/to/prepared/manifest.json": saved.read_text()}


_LM_DATA = ("--data.max_documents", "120", "--data.vocab_size", "300", "--data.block_size", "32")
_DEMO_DATA = ("--data.demo_size", "2000")


def _setups() -> dict[str, Setup]:
    return {
        # The classification demo: 2 000 rows, two steps.
        "demo": Setup(data=_DEMO_DATA, trainer=_TWO_STEPS, prelude=_TINY_TRAINER, slow=True),
        # The LM demo: 120 documents of the standard library's documentation, a 300-token BPE, two steps.
        "lm": Setup(data=_LM_DATA, trainer=_TWO_STEPS, prelude=_TINY_TRAINER, slow=True),
        # A folder of text files, corpus/*.txt.
        "corpus": Setup(files=_text_corpus, data=("--data.vocab_size", "300", "--data.block_size", "32"),
                        trainer=_TWO_STEPS, prelude=_TINY_TRAINER, slow=True),
        # corpus/*.txt and llama-tokenizer/, a supplied tokenizer folder.
        "tokenizer": Setup(files=_llama_tokenizer, prelude=_TINY_TRAINER, slow=True),
        # corpus/web/ and corpus/code/, the two sources of a mixture.
        "mixture": Setup(files=_mixture_sources, trainer=_TWO_STEPS, prelude=_TINY_TRAINER, slow=True),
        # reviews.csv for the classification examples.
        "reviews": Setup(files=_reviews_csv, trainer=_TWO_STEPS, prelude=_TINY_TRAINER, slow=True),
        # The LM demo prepared by a local Ray (started and stopped by the preparation).
        "ray": Setup(data=_LM_DATA, slow=True),
        # A prepared pipeline's manifest where the README's example reads it.
        "manifest": Setup(files=_manifest),
        # Commands that read or print and train nothing (help, graph, rules).
        "light": Setup(),
    }


@dataclass
class Block:
    """One fenced block of a page, with the directive before it."""

    page: Path
    line: int
    language: str
    text: str
    setup: str | None = None
    file: str | None = None
    skip: str | None = None
    expect: int = 0
    raises: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.skip is None and self.file is None and self.language in RUN_LANGUAGES


def parse_directive(text: str) -> dict[str, str]:
    """``setup=lm file=x.yaml expect=1`` or ``skip REASON`` as a dict (``skip`` holds the reason)."""
    text = text.strip()
    if text == "skip" or text.startswith("skip "):
        return {"skip": text[4:].strip()}
    found: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if not sep or key not in ("setup", "file", "expect", "raises"):
            raise ValueError(f"unknown snippet directive {token!r} in {text!r}")
        found[key] = value
    return found


def blocks_of(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` (code only: ```text output blocks and directives aside)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    directive: dict[str, str] = {}
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        comment = _DIRECTIVE.match(lines[i])
        if comment:
            directive = parse_directive(comment.group(1))
        elif match:
            language, start = match.group(1), i
            i += 1
            body = []
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if language in RUN_LANGUAGES or "file" in directive:
                found.append(
                    Block(page, start + 1, language, "\n".join(body) + "\n", directive.get("setup"),
                          directive.get("file"), directive.get("skip"), int(directive.get("expect", 0)),
                          directive.get("raises"))
                )
            directive = {}
        elif lines[i].strip():
            directive = {}  # a directive binds the block right after it only
        i += 1
    return found


def commands_of(script: str) -> list[list[str]]:
    """The commands of a bash block the suite runs: ``lightning-order ...`` and ``python ...``."""
    joined = re.sub(r"\\\n\s*", " ", script)
    commands = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for part in re.split(r"\s*(?:&&|;)\s*", line):
            part = re.split(r"\s+[|>]\s*", part, maxsplit=1)[0]  # `| dot ...`, `> out.svg`: the user's tail
            words = shlex.split(part)
            if words and words[0] in ("lightning-order", "python"):
                commands.append(words)
            elif words and words[0] not in USER_PROGRAMS:
                raise ValueError(f"a bash block runs {words[0]!r}, which the suite neither runs nor lists")
    return commands


def _bounded(words: list[str], setup: Setup) -> list[str]:
    """``words`` with the setup's options appended where the command takes them."""
    if words[:1] == ["python"] and words[1:3] == ["-m", "lightning_order"]:
        words = ["lightning-order", *words[3:]]
    # `python train.py fit ...`: a script of the user's that runs OrderCLI takes the same options.
    command = words[1:] if words[0] == "lightning-order" else words[2:] if words[1:2] and words[1].endswith(".py") else []
    if not command or "--help" in words:
        return words
    extra = [*setup.data, *setup.trainer] if command[0] in ("fit", "validate") else list(setup.data)
    extra = extra if command[0] in ("fit", "validate", "prepare") else []
    # An option the user's command sets itself is theirs (a file name may depend on it: step=20.ckpt).
    pairs = [(extra[i], extra[i + 1]) for i in range(0, len(extra), 2)]
    return [*words, *(word for key, value in pairs if key not in words for word in (key, value))]


#: What the blocks' processes are forked from: what a guide's command or example imports anyway.
GUIDE_PRELOADED = (
    "torch",
    "pytorch_lightning",
    "lightning.pytorch",
    "datasets",
    "transformers",
    "lightning_order",
    "lightning_order.cli.lightning",
    "lightning_order.data.text.datamodule",
    "lightning_order.data.lm.datamodule",
)


def _run(code: str, folder: Path) -> dict:
    """Runs ``code`` in a forked, preloaded process whose working folder and home are ``folder``."""
    head = textwrap.dedent(
        f"""
        import json, os, runpy, sys
        os.chdir({str(folder)!r})
        os.environ["HOME"] = {str(folder)!r}
        os.environ.pop("LIGHTNING_ORDER_CACHE", None)
        os.environ["HF_HUB_OFFLINE"] = "1"
        sys.path.insert(0, {str(folder)!r})
        """
    )
    return in_preloaded_process(head + code, GUIDE_PRELOADED)


def run_block(block: Block, folder: Path, setups: dict[str, Setup]) -> int:
    """Runs one block in ``folder`` (its setup's files written first); fails with the block's place.

    Returns:
        How many programs it ran: 1 for a Python block, each ``lightning-order`` / ``python`` command
        of a bash block (0 for one of only the user's own commands: ``pip``, ``apt-get``...).
    """
    setup = setups[block.setup] if block.setup else Setup()
    for name, text in setup.files().items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text(text, encoding="utf-8")
    if block.language == "python":
        code = setup.prelude + textwrap.dedent(
            f"""
            error = None
            try:
                exec(compile({block.text!r}, {block.where!r}, 'exec'), {{'__name__': '__main__'}})
            except Exception as raised:
                if {block.raises!r} is None:
                    raise
                error = type(raised).__name__
            print(json.dumps({{'error': error}}))
            """
        )
        answer = _run(code, folder)
        assert answer["error"] == block.raises, f"{block.where}: raised {answer['error']}, expected {block.raises}"
        return 1
    commands = commands_of(block.text)
    for words in commands:
        words = [str(Path(w).expanduser()) if w.startswith("~") else w for w in _bounded(words, setup)]
        if words[0] == "lightning-order":
            run = f"from lightning_order.cli import main\n    code = main({words[1:]!r})"
        else:
            run = f"sys.argv = {words[1:]!r}\n    runpy.run_path(sys.argv[0], run_name='__main__')"
        # --help and LightningCLI's own errors end in SystemExit, as they do for the user.
        call = (
            f"code = 0\ntry:\n    {run}\n"
            "except SystemExit as stop:\n    code = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1\n"
        )
        answer = _run(call + "print(json.dumps({'code': code}))\n", folder)
        assert answer["code"] == block.expect, f"{block.where}: {shlex.join(words)} exited {answer['code']}"
    return len(commands)


def _page_params() -> list:
    setups = _setups()
    params = []
    for page in PAGES:
        slow = any(b.setup and setups[b.setup].slow for b in blocks_of(page) if b.runs)
        marks = [pytest.mark.docs, *([pytest.mark.slow] if slow else [])]
        params.append(pytest.param(page, id=str(page.relative_to(ROOT)), marks=marks))
    return params


@pytest.mark.parametrize("page", _page_params())
def test_every_block_of_the_page_runs_as_written(page: Path, tmp_path: Path) -> None:
    """The page's blocks, in order, in one folder: files saved, commands and Python run, skips stated."""
    setups = _setups()
    shutil.copytree(ROOT / "configs", tmp_path / "configs")
    ran = 0
    for block in blocks_of(page):
        if block.skip is not None:
            continue
        if block.file is not None:
            (tmp_path / block.file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / block.file).write_text(block.text, encoding="utf-8")
        elif block.runs:
            ran += run_block(block, tmp_path, setups)
    assert ran > 0, f"{page.relative_to(ROOT)}: no block of it ran (each page shows one runnable example)"


def test_the_guide_has_its_pages_and_every_block_is_run_or_skipped_with_a_reason() -> None:
    setups = _setups()
    assert len(PAGES) >= 10, "the guide's pages are under docs/guide/"
    blocks = [b for page in PAGES for b in blocks_of(page)]
    for block in blocks:
        assert block.skip is None or block.skip, f"{block.where}: a skip states its reason"
        assert block.setup is None or block.setup in setups, f"{block.where}: no setup {block.setup!r}"
        if block.language == "bash":
            commands_of(block.text)  # raises on a program the suite neither runs nor lists
    run = [b for b in blocks if b.runs and (b.language == "python" or commands_of(b.text))]
    listed = [b for b in blocks if b.runs and b.language == "bash" and not commands_of(b.text)]
    skipped = [b for b in blocks if b.skip is not None]
    assert len(run) >= 30
    assert len(skipped) <= len(run) // 4, "skips are kept few: " + ", ".join(b.where for b in skipped)
    counts = {"run": len(run), "files": sum(b.file is not None for b in blocks), "user_commands_only": len(listed),
              "skipped": len(skipped)}
    print(json.dumps(counts))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pip install -e '.[dev]' && lightning-order fit --config configs/demo.yaml", [["lightning-order", "fit", "--config", "configs/demo.yaml"]]),
        ("lightning-order graph --format dot | dot -Tsvg > pipeline.svg", [["lightning-order", "graph", "--format", "dot"]]),
        ("lightning-order fit \\\n  --config x.yaml  # a comment", [["lightning-order", "fit", "--config", "x.yaml"]]),
        ("python train.py fit --config hf.yaml", [["python", "train.py", "fit", "--config", "hf.yaml"]]),
        ("# only a comment\npytest", []),
    ],
)
def test_commands_of_a_bash_block(text: str, expected: list[list[str]]) -> None:
    assert commands_of(text) == expected


def test_a_bash_block_naming_an_unknown_program_is_refused() -> None:
    with pytest.raises(ValueError, match="'curl'"):
        commands_of("curl https://example.com")


def test_a_directive_binds_the_next_block_only(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "<!-- snippet: setup=lm expect=1 -->\n```bash\nlightning-order fit\n```\n\n```python\nprint(1)\n```\n"
        "<!-- snippet: skip needs 8 GPUs -->\n```bash\nlightning-order fit\n```\n"
        "<!-- snippet: file=hf.yaml -->\n```yaml\na: 1\n```\n```text\nout\n```\n"
    )
    found = [(b.line, b.language, b.setup, b.expect, b.skip, b.file, b.runs) for b in blocks_of(page)]
    assert found == [
        (2, "bash", "lm", 1, None, None, True),
        (6, "python", None, 0, None, None, True),
        (10, "bash", None, 0, "needs 8 GPUs", None, False),
        (14, "yaml", None, 0, None, "hf.yaml", False),
    ]
    assert parse_directive("setup=demo raises=OrderError") == {"setup": "demo", "raises": "OrderError"}
    with pytest.raises(ValueError, match="unknown snippet directive"):
        parse_directive("setup=lm slow")
