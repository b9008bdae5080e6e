"""``roberta-ext prepare-tagging`` without fairseq: reading CoNLL-style files (tabs or columns,
``-DOCSTART-``, errors that name file:line) and the ``--text-only`` output of GPT-2 and
SentencePiece tokenization (the label on the first sub-word of each word, ``<pad>`` on the others
— the alignment the hub's ``tag()`` reads back). Binarizing with fairseq-preprocess, and training,
are tested in tests/fairseq_plugin/test_tagging.py."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from roberta_ext.cli.corpus import prepare_tagging_main
from roberta_ext.corpus import CorpusError, TokenWriter, prepare_tagging, read_conll
from roberta_ext.tokenizers import GPT2BPE

NAMES = ["Ada", "Alan", "Grace", "Paris", "London", "Berlin", "Kyoto", "Lima", "Oslo", "Turing", "Hopper", "Nile"]
WORDS = ["the", "went", "to", "saw", "visited", "with", "and", "a", "city", "friend", "river", "near", "in", "of"]


def tagged_sentences(count: int, seed: int) -> list[list[tuple[str, str]]]:
    """Capitalised words are ENT, numbers NUM, other words O."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        words = []
        for _ in range(rng.randint(4, 10)):
            kind = rng.random()
            if kind < 0.25:
                words.append((rng.choice(NAMES), "ENT"))
            elif kind < 0.4:
                words.append((str(rng.randint(1, 3000)), "NUM"))
            else:
                words.append((rng.choice(WORDS), "O"))
        sentences.append(words)
    return sentences


def write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> Path:
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------- reading


def test_read_conll_columns_docstart_and_crlf(tmp_path):
    path = tmp_path / "train.conll"
    path.write_bytes(
        b"-DOCSTART- -X- -X- O\r\n\r\nEU NNP B-NP B-ORG\r\nrejects VBZ B-VP O\r\n\r\n\r\nAda\tB-PER\nsang\tO\n"
    )
    sentences, docstarts = read_conll(path)
    assert [(s.words, s.labels) for s in sentences] == [
        (["EU", "rejects"], ["B-ORG", "O"]),
        (["Ada", "sang"], ["B-PER", "O"]),
    ]
    assert docstarts == 1
    assert sentences[1].where == f"{path}:7"


@pytest.mark.parametrize(
    "content, message",
    [
        (b"Ada\tB-PER\nalone\n", r"train\.conll:2: expected 'word<TAB>label'"),
        (b"Ada\t<pad>\n", r"train\.conll:1: '<pad>' cannot be a label"),
        (b"Ada\tO\n\nb\xffad\tO\n", r"train\.conll:3: not valid UTF-8"),
        (b"New York\tLOC\n", r"train\.conll:1: the word 'New York' contains whitespace"),
    ],
)
def test_read_conll_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "train.conll"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        read_conll(path)


# ----------------------------------------------------------------------------- preparing


def test_prepare_tagging_gpt2_tokenizes_words_as_the_hub_does(tmp_path, bpe_files, capsys):
    train = write_conll(
        tmp_path / "train.conll",
        [[("Ada", "ENT"), ("visited", "O"), ("Kyoto", "ENT"), ("in", "O"), ("1868", "NUM")]] * 3,
    )
    valid = write_conll(tmp_path / "valid.conll", [[("Hopper", "ENT"), ("sailed", "VERB")]])
    out = tmp_path / "ner"
    assert (
        prepare_tagging_main(
            [
                "--tokenizer",
                "gpt2",
                "--encoder-json",
                str(bpe_files.encoder_json),
                "--vocab-bpe",
                str(bpe_files.vocab_bpe),
                "--dict",
                str(bpe_files.dict_txt),
                "--train",
                str(train),
                "--valid",
                str(valid),
                "--output-dir",
                str(out),
                "--text-only",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "label 'VERB'" in err and "does not occur in train" in err and "fairseq-preprocess" in err
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)
    words = ["Ada", "visited", "Kyoto", "in", "1868"]
    expected_tokens, expected_labels = [], []
    for i, (word, label) in enumerate(zip(words, ["ENT", "O", "ENT", "O", "NUM"])):
        ids = bpe.encode(word if i == 0 else f" {word}")  # a word after the first has its leading space
        expected_tokens += [str(t) for t in ids]
        expected_labels += [label] + ["<pad>"] * (len(ids) - 1)
    assert len(expected_tokens) > len(words)  # some words really are several sub-words
    assert (out / "text" / "train.input0").read_text().splitlines()[0].split() == expected_tokens
    assert (out / "text" / "train.label").read_text().splitlines()[0].split() == expected_labels
    # By count in train, then by name; labels only in valid last.
    assert (out / "text" / "label.dict.txt").read_text().splitlines() == ["ENT 6", "O 6", "NUM 3", "VERB 0"]
    assert not (out / "input0").exists()


def test_prepare_tagging_sentencepiece(tmp_path):
    from roberta_ext.tokenizers.sentencepiece_tokenizer import train_sentencepiece

    texts = [" ".join(w for w, _ in s) for s in tagged_sentences(200, 0)]
    model = train_sentencepiece(texts, tmp_path / "spiece", vocab_size=60, hard_vocab_limit=False)
    writer = TokenWriter("sentencepiece", model=str(model))
    train = write_conll(tmp_path / "train.conll", tagged_sentences(5, 1))
    (tmp_path / "dict.txt").write_text(
        "".join(f"{p} 1\n" for p in sorted({t for s in texts for t in writer.tokens(s)}))
    )
    stats = prepare_tagging(writer, tmp_path / "dict.txt", {"train": train}, tmp_path / "ner", text_only=True)
    for words, tokens, labels in zip(
        read_conll(train)[0],
        (tmp_path / "ner" / "text" / "train.input0").open(),
        (tmp_path / "ner" / "text" / "train.label").open(),
    ):
        tokens, labels = tokens.split(), labels.split()
        assert len(tokens) == len(labels)
        starts = [i for i, label in enumerate(labels) if label != "<pad>"]
        assert [labels[i] for i in starts] == words.labels
        assert all(tokens[i].startswith("▁") for i in starts)  # each word starts a piece with "▁"
    assert stats.sentences == {"train": 5}
