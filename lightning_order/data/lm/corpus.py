"""The built-in language-modelling corpus: the documentation of Python's own standard library.

Real English prose about programming that is on every machine where Python runs, with no
download: one document per documented object (a module's docstring, each public class and
function defined in it, and each public method of those classes) of a curated, sorted list of
standard-library modules, read with :func:`inspect.getdoc`. The modules are pure Python or always
built into CPython, free of import side effects and of platform-specific content (no
``antigravity``, ``this``, ``tkinter``, ``idlelib``, ``turtle``, ``os``, ``socket``, ``asyncio``,
``ssl``, ``sqlite3``, ``decimal``...); one that is missing on a build is skipped. The language
reference's topics from ``pydoc_data`` follow, one document per topic.

The traversal is sorted at every level (modules, names, methods), so the corpus is a pure function
of the Python version: the same documents in the same order on every machine running that version
(its :func:`corpus_fingerprint` says which). It keeps text that repeats in real documentation on
purpose: a method that does not override its base class's docstring gets it from
:func:`inspect.getdoc` (e.g. the SAX handler methods of ``xml.dom.pulldom.PullDOM`` and
``xml.sax.saxutils.XMLGenerator``, the file methods of ``tempfile.SpooledTemporaryFile``), so
exact duplicates exist and deduplication has real work to do.

Its size is measured in docs/lm.md. Running Python with ``-OO`` strips docstrings,
so there only the 79 topics remain (and where ``pydoc_data`` is missing too, the corpus is empty and
:func:`stdlib_corpus` raises a :class:`DataError` saying so).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import xxhash

from lightning_order.errors import DataError

__all__ = ["STDLIB_CORPUS_MODULES", "corpus_fingerprint", "stdlib_corpus"]

#: The modules read, sorted. Each is pure Python (or always built into CPython) and imports
#: without side effects; none has content that depends on the platform.
STDLIB_CORPUS_MODULES: tuple[str, ...] = tuple(
    sorted(
        """
        abc argparse ast base64 bdb bisect calendar cmd code codecs codeop collections
        collections.abc colorsys concurrent.futures concurrent.futures._base configparser
        contextlib copy copyreg csv dataclasses difflib dis doctest email email.charset
        email.contentmanager email.feedparser email.generator email.header email.headerregistry
        email.iterators email.message email.mime.base email.mime.multipart email.mime.text
        email.parser email.policy email.utils enum filecmp fileinput fnmatch fractions ftplib
        functools getopt gettext glob graphlib heapq hmac html html.parser http http.client
        http.cookiejar http.cookies http.server imaplib importlib.abc importlib.metadata
        importlib.util inspect ipaddress itertools json json.decoder json.encoder keyword
        linecache logging logging.handlers mailbox mimetypes netrc numbers operator optparse
        pathlib pdb pickletools pkgutil plistlib poplib pprint pstats pydoc queue quopri random
        re reprlib runpy sched secrets shlex shutil smtplib statistics string stringprep struct
        symtable tabnanny tarfile tempfile textwrap threading timeit token tokenize tomllib trace
        traceback types typing unittest unittest.case unittest.loader unittest.mock
        unittest.result unittest.runner unittest.suite urllib.error urllib.parse urllib.request
        urllib.response urllib.robotparser uuid warnings wave weakref wsgiref.handlers
        wsgiref.simple_server wsgiref.util xml.dom.minidom xml.dom.pulldom xml.etree.ElementTree
        xml.sax xml.sax.handler xml.sax.saxutils xml.sax.xmlreader xmlrpc.client xmlrpc.server
        zipapp zipfile zipimport zoneinfo
        """.split()
    )
)

#: Documents shorter than this (in characters) are left out: one-line docstrings ("Return self.")
#: say little and would make the corpus mostly boilerplate.
_MIN_CHARS = 120


def _public_names(module: object) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [name for name in dir(module) if not name.startswith("_")]
    return sorted(set(names))


def _documents_of_module(name: str) -> Iterator[str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
    except ImportError:  # missing on this build (e.g. a distribution that splits the stdlib)
        return
    yield inspect.getdoc(module) or ""
    for attr in _public_names(module):
        obj = getattr(module, attr, None)
        # Only what the module defines itself: a re-export would depend on import order.
        if not (inspect.isclass(obj) or inspect.isroutine(obj)) or getattr(obj, "__module__", None) != name:
            continue
        yield inspect.getdoc(obj) or ""
        if inspect.isclass(obj):
            for method in sorted(vars(obj)):
                if method.startswith("_"):
                    continue
                member = getattr(obj, method, None)
                if inspect.isroutine(member) or isinstance(member, property):
                    # getdoc inherits the base class's docstring when the method has none.
                    yield inspect.getdoc(member) or ""


def _topic_documents() -> Iterator[str]:
    """The language reference's topics as ``help()`` shows them (``pydoc_data``), sorted by name."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # a distribution that ships the stdlib without pydoc_data
        return
    for key in sorted(topics):
        yield topics[key].strip()


def _all_documents() -> Iterator[str]:
    for name in STDLIB_CORPUS_MODULES:
        yield from _documents_of_module(name)
    yield from _topic_documents()


def _documents_here(max_documents: int | None) -> list[str]:
    """The corpus read in this process (what a fresh interpreter, see :func:`stdlib_corpus`, runs)."""
    documents: list[str] = []
    for text in _all_documents():
        if len(text) >= _MIN_CHARS:
            documents.append(text)
            if max_documents is not None and len(documents) >= max_documents:
                break
    return documents


@functools.lru_cache(maxsize=8)
def _documents_fresh(max_documents: int | None) -> tuple[str, ...]:
    """The corpus read by a fresh, isolated interpreter: no import of this process can change it.

    Importing some packages rewrites standard-library objects (importing Ray replaces
    ``inspect.isgenerator``, and with it its docstring), so the documentation read in a busy
    process depends on what it imported. A fresh ``python -I`` of the same interpreter and
    ``-O`` level imports only the standard library.
    """
    flags = ["-" + "O" * sys.flags.optimize] if sys.flags.optimize else []
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[2]); "
        "from lightning_order.data.lm.corpus import _documents_here; "
        "n = json.loads(sys.argv[1]); json.dump(_documents_here(n), sys.stdout)"
    )
    package_root = str(Path(__file__).resolve().parents[3])  # where this lightning_order is imported from
    out = subprocess.run(
        [sys.executable, *flags, "-I", "-c", code, json.dumps(max_documents), package_root],
        capture_output=True,
        check=False,
        env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "SYSTEMROOT")},
    )
    if out.returncode:
        raise DataError(
            f"the standard-library corpus could not be read in a fresh interpreter ({sys.executable}): "
            f"{out.stderr.decode(errors='replace').strip().splitlines()[-1:]}",
            step="load",
        )
    return tuple(json.loads(out.stdout))


def stdlib_corpus(max_documents: int | None = None) -> list[str]:
    """Returns the documentation of the standard library as a list of documents.

    Read by a fresh interpreter of the same Python (see :func:`_documents_fresh`), so the corpus
    is a function of the Python build alone, whatever this process has imported.

    Args:
        max_documents: keep only the first ``max_documents`` documents (in the deterministic
            order); ``None`` keeps them all.

    Returns:
        The documents, each a docstring of at least 120 characters, in module then name order.

    Raises:
        DataError: ``max_documents`` is negative, or Python runs with ``-OO`` (no docstrings).
    """
    if max_documents is not None and max_documents < 0:
        raise DataError(
            f"expected max_documents >= 0 or None, got {max_documents}; pass None for the whole corpus",
            step="load",
        )
    if max_documents == 0:
        return []
    documents = list(_documents_fresh(max_documents))
    if not documents:
        raise DataError(
            "the standard-library corpus is empty: Python runs without docstrings "
            f"(sys.flags.optimize={sys.flags.optimize}); run without -OO / PYTHONOPTIMIZE=2, or pass "
            "dataset=/data_files= with your own text",
            step="load",
        )
    return documents


def corpus_fingerprint(documents: Iterable[str]) -> str:
    """Hashes documents, in order, into a 32-character hex fingerprint (xxh3, 128 bits).

    Each document is length-prefixed, so ``["ab", "c"]`` and ``["a", "bc"]`` differ.

    Args:
        documents: the texts.

    Returns:
        A lowercase hex digest, safe as a file name.
    """
    hasher = xxhash.xxh3_128()
    for text in documents:
        data = text.encode("utf-8", "surrogatepass")
        hasher.update(len(data).to_bytes(8, "little"))
        hasher.update(data)
    return hasher.hexdigest()
