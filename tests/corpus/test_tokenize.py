"""``roberta-ext tokenize``: WordPiece / SentencePiece tokens per line for ``fairseq-preprocess``
(empty lines kept as document breaks, unknowns as ``<unk>``, errors naming file and line, all
outputs or none). The pipeline through fairseq-preprocess and fairseq-train is tested in
tests/fairseq_plugin/test_families_training.py."""

from __future__ import annotations

import pytest

from roberta_ext.cli.corpus import tokenize_main


def test_tokenize_keeps_lines_maps_unknowns_and_names_bad_lines(tmp_path, capsys):
    from roberta_ext.tokenizers.wordpiece import BERT_SPECIAL_TOKENS, write_vocab

    vocab = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "apple", "##s", "river", "."], vocab)
    (tmp_path / "a.txt").write_bytes(b"Apples river.\n\n   \n\x07\nzebra apple\r\nriver")
    (tmp_path / "b.txt").write_bytes(b"river\nriv\xffer\n")
    args = ["--tokenizer", "wordpiece", "--model", str(vocab), "--no-progress"]
    assert tokenize_main([*args, "--inputs", str(tmp_path / "a.txt"), "--outputs", str(tmp_path / "a.tok")]) == 0
    # Empty and blank lines stay empty (document breaks); [UNK] is fairseq's <unk>; a line of
    # control characters has no token and becomes <unk>, not a document break.
    assert (tmp_path / "a.tok").read_text() == "apple ##s river .\n\n\n<unk>\n<unk> apple\nriver\n"
    assert "1 line had text but no token and was written as <unk>" in capsys.readouterr().err
    assert (
        tokenize_main(
            [
                *args,
                "--inputs",
                str(tmp_path / "a.txt"),
                str(tmp_path / "b.txt"),
                "--outputs",
                str(tmp_path / "a2.tok"),
                str(tmp_path / "b.tok"),
            ]
        )
        == 1
    )
    assert f"{tmp_path / 'b.txt'}:2: not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "a2.tok").exists() and not (tmp_path / "b.tok").exists()  # all or nothing
    with pytest.raises(SystemExit):
        tokenize_main([*args, "--inputs", str(tmp_path / "a.txt")])  # --outputs is required
