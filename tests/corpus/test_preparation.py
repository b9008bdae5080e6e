"""The skeleton the preparing commands share (:mod:`roberta_ext.corpus.preparation`): the checks
before any work, the folders that appear whole or not at all, fairseq-preprocess's arguments and
report lines. The commands' own tests (tagging, multiple choice, GLUE) check what they write."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roberta_ext.corpus import CorpusError, preparation
from roberta_ext.corpus.binarize import PreprocessBatch
from roberta_ext.corpus.multiple_choice import ChoiceExample, prepare_multiple_choice
from roberta_ext.corpus.preparation import Preparation, check_dictionary, check_output, only_source, report_lines
from roberta_ext.corpus.tagging import prepare_tagging
from roberta_ext.corpus.tokenize import TokenWriter
from roberta_ext.tokenizers.dictionary import DictionaryFormatError


def test_check_output_refuses_what_only_force_may_replace(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    (tmp_path / "file").write_text("mine")
    (tmp_path / "empty").mkdir()
    for taken in ("full", "file"):
        with pytest.raises(CorpusError, match=re.escape(f"refusing to overwrite {tmp_path / taken} (use --force)")):
            check_output(tmp_path / taken, force=False)
        assert check_output(tmp_path / taken, force=True) == tmp_path / taken
    assert check_output(tmp_path / "empty", force=False) == tmp_path / "empty"
    assert check_output(tmp_path / "new", force=False) == tmp_path / "new"


def test_check_dictionary_names_a_missing_file_and_a_bad_line(tmp_path):
    with pytest.raises(FileNotFoundError, match=re.escape(f"not found: '{tmp_path / 'dict.txt'}'")):
        check_dictionary(tmp_path / "dict.txt")
    (tmp_path / "dict.txt").write_text("hello 3\nworld\n")
    with pytest.raises(DictionaryFormatError, match=re.escape(f"{tmp_path / 'dict.txt'}:2")):
        check_dictionary(tmp_path / "dict.txt")
    (tmp_path / "dict.txt").write_text("hello 3\nworld 2\n")
    assert check_dictionary(str(tmp_path / "dict.txt")) == tmp_path / "dict.txt"


def test_every_command_refuses_a_malformed_dictionary_before_writing(tmp_path):
    """One rule for the three commands: GLUE's check of dict.txt, now also tagging's and
    multiple choice's (fairseq-preprocess would otherwise fail on it after all the work)."""
    bad = tmp_path / "dict.txt"
    bad.write_text("hello 3\nhello 4\n")
    writer = TokenWriter("wordpiece", model=str(write_vocab(tmp_path)))
    conll = tmp_path / "train.conll"
    conll.write_text("hello\tO\n")
    example = ChoiceExample("hello", ["hello", "hello"], 0, "x:1")
    attempts = [
        lambda: prepare_tagging(writer, bad, {"train": conll}, tmp_path / "out", text_only=True),
        lambda: prepare_multiple_choice(writer, bad, {"train": [example]}, tmp_path / "out", text_only=True),
    ]
    for attempt in attempts:
        with pytest.raises(DictionaryFormatError, match=re.escape(f"{bad}:2: duplicate symbol 'hello'")):
            attempt()
        assert not (tmp_path / "out").exists()


def write_vocab(folder: Path) -> Path:
    path = folder / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    return path


def test_folders_appear_together_or_not_at_all(tmp_path):
    outputs = [tmp_path / "a-bin", tmp_path / "b-bin"]
    prepared = Preparation(outputs, binarize=False, why="-")
    with pytest.raises(RuntimeError), prepared.building() as folders:
        for folder in folders:
            (folder / "x").write_text("1")
        raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
    with prepared.building() as folders:
        assert [folder.parent for folder in folders] == [tmp_path, tmp_path]
        for folder in folders:
            (folder / "x").write_text("1")
        assert not any(output.exists() for output in outputs)
    assert all((output / "x").read_text() == "1" for output in outputs)


def test_fairseq_is_checked_only_to_binarize(tmp_path, monkeypatch):
    def missing(why):
        raise CorpusError(f"fairseq is not installed: {why}")

    monkeypatch.setattr(preparation, "check_fairseq", missing)
    with pytest.raises(CorpusError, match="fairseq is not installed: the reason"):
        Preparation([tmp_path / "o"], binarize=True, why="the reason")
    text_only = Preparation([tmp_path / "o"], binarize=False, why="the reason")
    with pytest.raises(CorpusError, match="writes text only"):
        text_only.binarize([PreprocessBatch("input0", tmp_path, [])])


def test_binarize_runs_every_batch_in_one_call(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(preparation, "check_fairseq", lambda why: None)
    monkeypatch.setattr(preparation, "run_fairseq_preprocess", lambda batches: calls.append(batches) or {"a": ["x"]})
    batches = [PreprocessBatch("a", tmp_path, [["--only-source"]]), PreprocessBatch("b", tmp_path, [])]
    assert Preparation([tmp_path / "o"], binarize=True, why="-").binarize(batches) == {"a": ["x"]}
    assert calls == [batches]


def test_only_source_and_report_lines():
    tests = "text/test.input1,text/test1.input1"
    prefixes = {"train": "text/train.input1", "valid": "text/valid.input1", "test": tests}
    assert only_source(Path("/d/dict.txt"), prefixes, Path("input1"), 3) == [
        *("--only-source", "--srcdict", "/d/dict.txt"),
        *("--trainpref", "text/train.input1", "--validpref", "text/valid.input1"),
        *("--testpref", tests),
        *("--destdir", "input1", "--workers", "3"),
    ]
    report = ["/b/.o-x/text/test1.label: 2 sents, 9 tokens, 0.0% replaced (by <unk>)", "text/train.input0: 1 sents, 3"]
    expected = ["label/test1: 2 sents, 9 tokens, 0.0% replaced (by <unk>)", "input0/train: 1 sents, 3"]
    assert report_lines(report) == expected
