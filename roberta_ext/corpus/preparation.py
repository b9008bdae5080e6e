"""The skeleton of the commands that prepare fine-tuning data for fairseq (``prepare-tagging``,
``prepare-multiple-choice``, ``glue-preprocess``): check, build each output folder beside its
final name, write the text into it, binarize the text with fairseq-preprocess, rename the folders
into place.

Each command reads its own inputs and writes its own text; what they share is here, once:
:func:`check_dictionary` and :func:`check_output` (before any work), :class:`Preparation` (the
temporary folders, and fairseq-preprocess in one process for all of them), :func:`only_source`
(the arguments of a ``fairseq-preprocess --only-source`` run) and :func:`report_lines` (its
``sents, tokens, % replaced`` lines, by folder and split).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ..atomic import atomic_directory
from ..tokenizers.dictionary import Dictionary
from .binarize import PreprocessBatch, check_fairseq, run_fairseq_preprocess
from .reading import CorpusError

__all__ = ["Preparation", "check_dictionary", "check_output", "only_source", "report_lines"]


def check_dictionary(path: str | os.PathLike[str]) -> Path:
    """``path``, the pretrained model's ``dict.txt``, checked: a ``FileNotFoundError`` when no
    file is there, a :class:`~roberta_ext.tokenizers.dictionary.DictionaryFormatError` naming
    the line when it is no fairseq dictionary (fairseq-preprocess would fail later, or read it
    otherwise).

    >>> check_dictionary("missing/dict.txt")
    Traceback (most recent call last):
    ...
    FileNotFoundError: [Errno 2] dictionary (the pretrained model's dict.txt) not found: 'missing/dict.txt'
    """
    if not Path(path).is_file():
        raise FileNotFoundError(2, "dictionary (the pretrained model's dict.txt) not found", str(path))
    Dictionary.load(path)
    return Path(path)


def check_output(path: str | os.PathLike[str], *, force: bool) -> Path:
    """``path``, an output folder to be written, unless something is there that only ``force``
    may replace (an empty folder is nothing).

    >>> import tempfile
    >>> taken = Path(tempfile.mkdtemp())
    >>> _ = (taken / "dict.txt").write_text("a 1")
    >>> check_output(taken, force=True) == taken
    True
    >>> check_output(taken, force=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    roberta_ext.corpus.reading.CorpusError: refusing to overwrite /... (use --force)
    """
    path = Path(path)
    if path.exists() and not force and (not path.is_dir() or any(path.iterdir())):
        raise CorpusError(f"refusing to overwrite {path} (use --force)")
    return path


class Preparation:
    """One run of a preparing command over its ``outputs`` folders: checked when made (each
    output with :func:`check_output`; fairseq installed when ``binarize``, else ``why`` is the
    message), built in temporary folders by :meth:`building`, binarized by :meth:`binarize`.

    >>> preparation = Preparation(["ner-bin"], binarize=True, why="prepare-tagging binarizes")  # doctest: +SKIP
    >>> with preparation.building() as (folder,):  # doctest: +SKIP
    ...     (folder / "text").mkdir()  # the command writes its text here, then
    ...     reports = preparation.binarize([PreprocessBatch("input0", folder, [only_source(...)])])
    """

    def __init__(
        self, outputs: Sequence[str | os.PathLike[str]], *, binarize: bool, why: str, force: bool = False
    ) -> None:
        self.outputs = [check_output(path, force=force) for path in outputs]
        self.force = force
        self.binarizes = binarize
        if binarize:
            check_fairseq(why)

    @contextlib.contextmanager
    def building(self) -> Iterator[list[Path]]:
        """The temporary folder of each output, in order; all become their outputs when the block
        ends without an error, each whole, and are removed otherwise
        (:func:`roberta_ext.atomic.atomic_directory`)."""
        with contextlib.ExitStack() as stack:
            yield [stack.enter_context(atomic_directory(path, overwrite=self.force)) for path in self.outputs]

    def binarize(self, batches: Sequence[PreprocessBatch]) -> dict[str, list[str]]:
        """fairseq-preprocess's runs of every batch, in one process
        (:func:`~roberta_ext.corpus.binarize.run_fairseq_preprocess`); its report lines per batch."""
        if not self.binarizes:
            raise CorpusError("this preparation writes text only: binarizing was not asked for")
        return run_fairseq_preprocess(batches)


def only_source(
    srcdict: str | os.PathLike[str], prefixes: Mapping[str, str], destdir: str | os.PathLike[str], workers: int
) -> list[str]:
    """The arguments of ``fairseq-preprocess --only-source`` binarizing ``prefixes`` (``train``,
    ``valid``, ``test`` -> a prefix, or several joined by commas) with the dictionary ``srcdict``.

    >>> only_source("dict.txt", {"train": "text/train.input0", "test": "text/test.input0"}, "input0", 2)
    ['--only-source', '--srcdict', 'dict.txt', '--trainpref', 'text/train.input0', '--testpref', \
'text/test.input0', '--destdir', 'input0', '--workers', '2']
    """
    command = ["--only-source", "--srcdict", str(srcdict)]
    for split, prefix in prefixes.items():
        command += [f"--{split}pref", prefix]
    return command + ["--destdir", str(destdir), "--workers", str(workers)]


def report_lines(report: Sequence[str]) -> list[str]:
    """fairseq-preprocess's ``PATH: N sents, M tokens, X% replaced (by <unk>)`` lines as
    ``column/split: ...``, the column and split read off ``PATH`` (``text/valid.input1``).

    >>> report_lines(["/tmp/x/text/valid.input1: 100 sents, 812 tokens, 0.0% replaced (by <unk>)"])
    ['input1/valid: 100 sents, 812 tokens, 0.0% replaced (by <unk>)']
    """
    lines = []
    for line in report:
        path, numbers = line.rsplit(": ", 1)
        lines.append(f"{Path(path).suffix[1:]}/{Path(path).stem}: {numbers}")
    return lines
