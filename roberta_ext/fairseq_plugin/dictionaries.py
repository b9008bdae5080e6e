"""The one way every task of the plugin loads a ``dict.txt``, with one message when it cannot.

fairseq's own tasks call ``Dictionary.load`` and fail on a missing file with a bare
``FileNotFoundError``, on a file that is not UTF-8 with a bare ``Exception``, and on a bad line
with a message that names neither the file nor the task. :func:`load_dictionary` reads the file
exactly as ``Dictionary.load`` does (so the indices are fairseq's), and when it cannot, raises a
:class:`DictionaryError` that says which task wanted which file, what is wrong with it, and what
the task's data folder should hold.
"""

from __future__ import annotations

import os

from fairseq import utils
from fairseq.data import Dictionary

from ..errors import RobertaExtError

__all__ = [
    "DictionaryError",
    "MissingDictionary",
    "UnreadableDictionary",
    "data_folders",
    "load_dictionary",
    "task_name",
]


class DictionaryError(RobertaExtError):
    """A task's ``dict.txt`` that is missing or cannot be read; the message names the task,
    the path and what the data folder needs."""


class MissingDictionary(DictionaryError, FileNotFoundError):
    """No file at the path (a ``FileNotFoundError`` too, as the tasks always raised)."""


class UnreadableDictionary(DictionaryError, ValueError):
    """A file that is not a fairseq dictionary: not UTF-8, a line without a count, a symbol twice."""


def task_name(task: type | object) -> str:
    """The name ``task`` (a task class or instance) is registered under with fairseq: what
    ``--task`` takes. A class fairseq does not know is named by its class name.

    >>> from roberta_ext.fairseq_plugin.tasks import RobertaExtMLMTask
    >>> task_name(RobertaExtMLMTask)
    'roberta_ext_mlm'
    """
    from fairseq.tasks import TASK_REGISTRY

    cls = task if isinstance(task, type) else type(task)
    return next((name for name, registered in TASK_REGISTRY.items() if registered is cls), cls.__name__)


def data_folders(data: str) -> list[str]:
    """The folders DATA names (fairseq's ``--data``: colon-separated, one an epoch in turn), as
    fairseq's ``utils.split_paths`` splits them; the first holds the ``dict.txt``. An empty DATA,
    or an empty folder in it, is refused: fairseq would read it as the working directory.

    >>> data_folders("shard0:shard1")
    ['shard0', 'shard1']
    >>> data_folders("shard0::shard1")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ValueError: --data (the positional DATA argument) 'shard0::shard1' names an empty folder
    (two colons in a row, or one at an end)
    """
    folders = utils.split_paths(data)
    if not data:
        raise ValueError("--data (the positional DATA argument) is empty")
    if not all(folders):
        where = "two colons in a row, or one at an end"
        raise ValueError(f"--data (the positional DATA argument) {data!r} names an empty folder ({where})")
    return folders


def load_dictionary(path: str | os.PathLike[str], *, task: type | object, needs: str, mask: bool = False) -> Dictionary:
    """The fairseq dictionary in ``path``, read as ``Dictionary.load`` reads it; ``mask`` adds
    ``<mask>`` after it, as pretraining did (fairseq's ``sentence_prediction`` and
    ``sentence_ranking`` do the same). ``task`` (the task class asking) and ``needs`` (what its
    data folder should hold) go into the message of the :class:`DictionaryError` raised when the
    file is missing or is no dictionary.

    >>> import tempfile
    >>> from roberta_ext.fairseq_plugin.tasks import RobertaExtMLMTask
    >>> path = os.path.join(tempfile.mkdtemp(), "dict.txt")
    >>> _ = open(path, "w").write("hello 3\\nworld 2\\n")
    >>> d = load_dictionary(path, task=RobertaExtMLMTask, needs="fairseq-preprocess output", mask=True)
    >>> d.index("world"), d.index("<mask>")
    (5, 6)
    >>> _ = open(path, "w").write("hello\\n")
    >>> try:
    ...     load_dictionary(path, task=RobertaExtMLMTask, needs="fairseq-preprocess output")
    ... except UnreadableDictionary as error:
    ...     print(str(error).replace(path, "DATA/dict.txt"))  # doctest: +NORMALIZE_WHITESPACE
    --task roberta_ext_mlm: DATA/dict.txt is not a fairseq dictionary
    (Incorrect dictionary format, expected '<token> <cnt> [flags]': "hello");
    its data folder needs fairseq-preprocess output
    """
    path = os.fspath(path)

    def problem(what: str) -> str:  # the one message
        return f"--task {task_name(task)}: {path} {what}; its data folder needs {needs}"

    if not os.path.exists(path):
        raise MissingDictionary(problem("does not exist"))
    dictionary = Dictionary()
    try:
        # Dictionary.load(path) is Dictionary() + add_from_file(path), which turns a decoding
        # error into a bare Exception; reading the lines here keeps it a UnicodeDecodeError.
        with open(path, encoding="utf-8") as lines:
            dictionary.add_from_file(lines)
    except (OSError, ValueError, RuntimeError) as error:  # ValueError: UnicodeDecodeError and bad lines
        # fairseq quotes the bad line with its line end
        reason = "is a folder, not a file" if os.path.isdir(path) else f"is not a fairseq dictionary ({error})"
        reason = reason.replace("\n", "")
        raise UnreadableDictionary(problem(reason)) from error
    if mask:
        dictionary.add_symbol("<mask>")
    return dictionary
