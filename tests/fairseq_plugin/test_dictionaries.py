"""Every task of the plugin loads its ``dict.txt`` through one loader: the same dictionary as
fairseq's ``Dictionary.load`` (its indices are the model's), and one message, naming the task and
the path, when the file is missing or is no dictionary."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.peers import require

require("fairseq", "the tasks are fairseq's")

from fairseq.data import Dictionary  # (after the peer check)

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the tasks)
from roberta_ext.errors import RobertaExtError
from roberta_ext.fairseq_plugin.dictionaries import (
    DictionaryError,
    MissingDictionary,
    UnreadableDictionary,
    data_folders,
    load_dictionary,
    task_name,
)
from roberta_ext.fairseq_plugin.electra import ElectraTask
from roberta_ext.fairseq_plugin.multiple_choice import RobertaExtCommonsenseQATask, RobertaExtMultipleChoiceTask
from roberta_ext.fairseq_plugin.question_answering import ExtractiveQATask
from roberta_ext.fairseq_plugin.sentence_pairs import SentencePairMLMTask
from roberta_ext.fairseq_plugin.spanbert import SpanBertTask
from roberta_ext.fairseq_plugin.tagging import TokenClassificationTask
from roberta_ext.fairseq_plugin.tasks import RobertaExtClassificationTask, RobertaExtMLMTask

DICT_TXT = "hello 7\nworld 3\nmadeupword0000 0\n"

# (task class, options beyond DATA, the dict.txt it reads first relative to DATA, what the message says DATA needs)
TASKS = [
    (RobertaExtMLMTask, {}, "dict.txt", "fairseq-preprocess output"),
    (ElectraTask, {}, "dict.txt", "fairseq-preprocess output"),
    (SpanBertTask, {}, "dict.txt", "fairseq-preprocess output"),
    (SentencePairMLMTask, {"tokens_per_sample": 16, "mask_whole_words": False}, "dict.txt", "fairseq-preprocess"),
    (ExtractiveQATask, {}, "dict.txt", "the pretrained model's dict.txt"),
    (TokenClassificationTask, {}, "input0/dict.txt", "as roberta-ext prepare-tagging writes them"),
    (
        RobertaExtMultipleChoiceTask,
        {"criterion": "roberta_ext_multiple_choice", "num_classes": 4},
        "input0/dict.txt",
        "input0/ ... input4/ and label/",
    ),
    (
        RobertaExtCommonsenseQATask,
        {"criterion": "roberta_ext_multiple_choice", "num_classes": 5},
        "dict.txt",
        "{train,valid,test}.jsonl",
    ),
    (
        RobertaExtClassificationTask,
        {"num_classes": 2, "regression_target": False},
        "input0/dict.txt",
        "input0/ with the binarized (first) sentences",
    ),
]
IDS = [task_name(task) for task, *_ in TASKS]


def setup(task: type, options: dict, data: Path) -> object:
    return task.setup_task(SimpleNamespace(data=str(data), **options))


@pytest.mark.parametrize(("task", "options", "path", "needs"), TASKS, ids=IDS)
def test_a_missing_dictionary_names_the_task_and_the_path(tmp_path, task, options, path, needs):
    with pytest.raises(MissingDictionary) as error:
        setup(task, options, tmp_path)
    message = str(error.value)
    assert message.startswith(f"--task {task_name(task)}: {tmp_path / path} does not exist; its data folder needs ")
    assert needs in message
    assert isinstance(error.value, FileNotFoundError) and isinstance(error.value, RobertaExtError)


BAD = {
    "a line without a count": (b"hello 7\nworld\n", "Incorrect dictionary format"),
    "a count that is no number": (b"hello seven\n", "Incorrect dictionary format"),
    "a symbol twice": (b"hello 7\nhello 3\n", "Duplicate word found"),
    "not UTF-8": (b"hello 7\n\xff\xfe 3\n", "can't decode byte 0xff"),
}


@pytest.mark.parametrize(("task", "options", "path", "needs"), TASKS, ids=IDS)
@pytest.mark.parametrize("bad", BAD, ids=list(BAD))
def test_an_unreadable_dictionary_names_the_task_the_path_and_the_problem(tmp_path, task, options, path, needs, bad):
    content, problem = BAD[bad]
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_bytes(content)
    with pytest.raises(UnreadableDictionary) as error:
        setup(task, options, tmp_path)
    message = str(error.value)
    assert message.startswith(f"--task {task_name(task)}: {tmp_path / path} is not a fairseq dictionary (")
    assert problem in message and needs in message and "\n" not in message


def test_a_folder_in_place_of_the_file_is_named_as_such(tmp_path):
    (tmp_path / "dict.txt").mkdir()
    with pytest.raises(UnreadableDictionary, match=r"dict.txt is a folder, not a file; its data folder needs"):
        setup(RobertaExtMLMTask, {}, tmp_path)


@pytest.mark.parametrize("mask", [False, True])
def test_the_dictionary_is_fairseqs(tmp_path, mask):
    """Indices, symbols and counts as ``Dictionary.load`` reads them (``#fairseq:overwrite`` and
    ``\\r\\n`` line ends included), ``<mask>`` after them when asked, as fairseq's tasks add it."""
    path = tmp_path / "dict.txt"
    path.write_bytes(b"hello 7\r\nworld 3\nhello 2 #fairseq:overwrite\nmadeupword0000 0\n")
    ours = load_dictionary(path, task=RobertaExtMLMTask, needs="-", mask=mask)
    theirs = Dictionary.load(str(path))
    if mask:
        theirs.add_symbol("<mask>")
    assert (ours.symbols, ours.count, ours.indices) == (theirs.symbols, theirs.count, theirs.indices)


def test_tasks_set_up_with_the_loaded_dictionary(tmp_path):
    """The dictionaries the tasks keep: ``<mask>`` appended where pretraining appended it."""
    (tmp_path / "dict.txt").write_text(DICT_TXT)
    for name in ("input0", "label"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "dict.txt").write_text(DICT_TXT)
    plain = Dictionary.load(str(tmp_path / "dict.txt"))
    expected = [*plain.symbols, "<mask>"]
    mlm = setup(RobertaExtMLMTask, {}, tmp_path)
    classification = setup(RobertaExtClassificationTask, {"num_classes": 2, "regression_target": False}, tmp_path)
    options = {"criterion": "roberta_ext_multiple_choice", "num_classes": 4}
    multiple_choice = setup(RobertaExtMultipleChoiceTask, options, tmp_path)
    for task in (mlm, classification, multiple_choice):
        assert task.source_dictionary.symbols == expected and task.mask_idx == len(plain)
    assert classification.label_dictionary.symbols == expected  # fairseq's sentence_prediction adds it too


def test_the_errors_derive_from_the_projects_base():
    assert issubclass(DictionaryError, RobertaExtError)
    assert issubclass(MissingDictionary, FileNotFoundError) and issubclass(UnreadableDictionary, ValueError)


def test_a_task_is_named_as_fairseq_registered_it_from_its_class_or_an_instance(tmp_path):
    (tmp_path / "dict.txt").write_text(DICT_TXT)
    task = setup(RobertaExtMLMTask, {}, tmp_path)
    assert task_name(RobertaExtMLMTask) == task_name(task) == "roberta_ext_mlm"


def test_a_task_fairseq_does_not_know_is_named_by_its_class_name(tmp_path):
    from fairseq.tasks import FairseqTask

    class UnregisteredTask(FairseqTask):
        pass

    assert task_name(UnregisteredTask) == "UnregisteredTask"
    with pytest.raises(MissingDictionary) as error:
        load_dictionary(tmp_path / "dict.txt", task=UnregisteredTask, needs="its files")
    assert (
        str(error.value)
        == f"--task UnregisteredTask: {tmp_path / 'dict.txt'} does not exist; its data folder needs its files"
    )


def test_no_mask_unless_asked_for(tmp_path):
    (tmp_path / "dict.txt").write_text(DICT_TXT)
    dictionary = load_dictionary(tmp_path / "dict.txt", task=RobertaExtMLMTask, needs="-")
    assert "<mask>" not in dictionary.indices
    assert dictionary.symbols == Dictionary.load(str(tmp_path / "dict.txt")).symbols


def test_a_utf8_dictionary_is_read_as_utf8_whatever_the_locale(tmp_path, ascii_locale):
    """``Dictionary.load`` reads ``dict.txt`` as UTF-8 (an XLM-R dictionary is mostly not ASCII)."""
    path = tmp_path / "dict.txt"
    path.write_bytes("hello 7\n▁héllo 3\n世界 2\n".encode())
    ours = load_dictionary(path, task=RobertaExtMLMTask, needs="-")
    theirs = Dictionary.load(str(path))
    assert ours.symbols == theirs.symbols and ours.symbols[-2:] == ["▁héllo", "世界"]


def test_data_names_its_folders_as_fairseq_splits_them():
    assert data_folders("data-bin/wiki") == ["data-bin/wiki"]
    assert data_folders("shard0:shard1:shard2") == ["shard0", "shard1", "shard2"]
    assert data_folders("s3://bucket/a|s3://bucket/b") == ["s3://bucket/a", "s3://bucket/b"]  # fairseq's "|" for URLs


@pytest.mark.parametrize("data", ["shard0::shard1", "shard0:", ":shard1", ":"])
def test_an_empty_folder_in_data_is_refused_not_read_as_the_working_directory(data):
    with pytest.raises(ValueError) as refused:
        data_folders(data)
    assert str(refused.value) == (
        f"--data (the positional DATA argument) {data!r} names an empty folder (two colons in a row, or one at an end)"
    )


# The tasks that read DATA as colon-separated folders (fairseq's masked_lm does the same); the others, as
# fairseq's sentence_prediction, read it as one folder and name the dict.txt they miss in it.
SPLIT_DATA = [case for case in TASKS if case[0] in (RobertaExtMLMTask, SentencePairMLMTask, ExtractiveQATask)]


@pytest.mark.parametrize(("task", "options", "path", "needs"), SPLIT_DATA, ids=[task_name(c[0]) for c in SPLIT_DATA])
def test_an_empty_data_is_refused_before_any_file_is_read(tmp_path, monkeypatch, task, options, path, needs):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dict.txt").write_text(DICT_TXT)  # what an empty DATA would have read: the working directory's
    with pytest.raises(ValueError, match=r"^--data \(the positional DATA argument\) is empty$"):
        task.setup_task(SimpleNamespace(data="", **options))
    with pytest.raises(ValueError, match="names an empty folder"):
        task.setup_task(SimpleNamespace(data=f"{tmp_path}:", **options))
