"""Each tokenizer kind of the registry (roberta_ext/tokenizers/registry.py), built, read and written
over tiny vocabularies made here, against transformers' own tokenizers over the same files.

Four kinds, four layouts of special tokens: GPT-2 BPE and XLM-R's SentencePiece use fairseq's
``<s> <pad> </s> <unk>`` and ``<mask>``; WordPiece (BERT) ``[CLS] [SEP] [PAD] [UNK] [MASK]``;
ALBERT's SentencePiece ``[CLS] [SEP] <pad> <unk> [MASK]``. A transformers directory is read with
the tokenizer's own ids (``[CLS]`` playing ``<s>``); a fairseq checkpoint's through its
``dict.txt``, where a token's index is that of its symbol. The peers are transformers 5's
``AutoTokenizer`` over a folder holding the same files (``tokenizer_config.json`` naming the
class and the options), the ``sentencepiece`` library for fairseq's XLM-R reading (pieces joined
by spaces, split again at whitespace: ``encode_line``), and fairseq's rule for GPT-2 ids missing
from ``dict.txt`` (``<unk>``).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import sentencepiece as spm

from roberta_ext import download
from roberta_ext.tokenizers import Dictionary, FairseqGPT2Tokenizer
from roberta_ext.tokenizers.gpt2_bpe import bytes_to_unicode
from roberta_ext.tokenizers.pieces import PieceTokenizer
from roberta_ext.tokenizers.registry import (
    BPE_CHOICES,
    KINDS,
    TokenizerFiles,
    choose_kind,
    get_kind,
    in_folder,
    kind_for_folder,
    kind_of,
    kinds_named,
    write_transformers_tokenizer,
)
from roberta_ext.tokenizers.sentencepiece_tokenizer import train_sentencepiece, train_xlmr_sentencepiece
from tests.tokenizers.test_sentencepiece_tokenizer import SlowAlbert

transformers = pytest.importorskip("transformers")

CORPUS = [
    "Hello world, hello there! The quick brown fox jumps over the lazy dog.",
    "Café naïve ÉCOLE, façade; 1,000 and 9,9 are numbers.",
    "a b c d e f g h i j k l m n o p",
] * 10
TEXTS = [
    "Hello world, hello there!",
    "  the QUICK brown   fox\tjumps \n",
    "Café naïve ÉCOLE 9,9",
    "zebra? ÿ",
    "",
]
WORDPIECE_TOKENS = [
    *("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    *("<pad>", "<unk>", "<s>", "</s>", "<mask>"),
    *("hello", "world", "##s", "the", "café", "cafe", ",", "!", "##llo", "he", "[", "]", "<", ">", "mask"),
    *("你", "好", "##好", "quick", "fox"),
]
GPT2_MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or")]


def transformers_tokenizer(folder: Path, tokenizer_class: str, **config):
    """transformers' ``AutoTokenizer`` over ``folder``'s tokenizer files, with ``config`` as its
    ``tokenizer_config.json``."""
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": tokenizer_class, **config}))
    return transformers.AutoTokenizer.from_pretrained(str(folder))


def their_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def copy_of(folder: Path, destination: Path, *names: str) -> Path:
    destination.mkdir()
    for name in names:
        shutil.copy(folder / name, destination / name)
    return destination


# ----------------------------------------------------------------------------------------- vocabularies


@pytest.fixture(scope="module")
def wordpiece_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("wordpiece")
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token in WORDPIECE_TOKENS), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory) -> SimpleNamespace:
    """GPT-2's files (``encoder.json``: the 256 bytes, the merges, ``<|endoftext|>``) and a RoBERTa
    transformers folder over the same BPE (``vocab.json``: ``<s> <pad> </s> <unk>``, the bytes, the
    merges, ``<mask>``)."""
    folder = tmp_path_factory.mktemp("gpt2")
    encoder = {symbol: i for i, symbol in enumerate(bytes_to_unicode().values())}
    for first, second in GPT2_MERGES:
        encoder[first + second] = len(encoder)
    encoder["<|endoftext|>"] = len(encoder)
    merges = "#version: 0.2\n" + "".join(f"{first} {second}\n" for first, second in GPT2_MERGES)
    (folder / "encoder.json").write_text(json.dumps(encoder), encoding="utf-8")
    (folder / "vocab.bpe").write_text(merges, encoding="utf-8")
    roberta = folder / "roberta"
    roberta.mkdir()
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for symbol in [*bytes_to_unicode().values(), *(first + second for first, second in GPT2_MERGES)]:
        vocab[symbol] = len(vocab)
    vocab["<mask>"] = len(vocab)
    (roberta / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (roberta / "merges.txt").write_text(merges, encoding="utf-8")
    return SimpleNamespace(fairseq=folder, roberta=roberta, encoder=encoder, vocab=vocab)


@pytest.fixture(scope="module")
def albert_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("albert")
    train_sentencepiece(CORPUS, folder / "spiece", 70, hard_vocab_limit=False, num_threads=1)
    return folder


@pytest.fixture(scope="module")
def xlmr_dir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("xlmr")
    train_xlmr_sentencepiece(CORPUS, folder / "sentencepiece.bpe", 70, hard_vocab_limit=False, num_threads=1)
    return folder


def fairseq_dictionary(symbols: list[str], *, extra: tuple[str, ...] = ()) -> Dictionary:
    """A ``dict.txt`` as fairseq-preprocess writes it: ``<s> <pad> </s> <unk>``, then ``symbols``."""
    dictionary = Dictionary()
    for symbol in [*symbols, *extra]:
        dictionary.add_symbol(symbol)
    return dictionary


# ----------------------------------------------------------------------------------------- the registry


def test_each_bpe_name_means_its_kind():
    assert {name: get_kind(name).name for name in BPE_CHOICES} == {
        "gpt2": "gpt2",
        "bert": "wordpiece",
        "wordpiece": "wordpiece",
        "sentencepiece": "sentencepiece",
        "xlmr_sentencepiece": "xlmr_sentencepiece",
        "hf_tokenizer": "hf_tokenizer",
    }
    assert {name: [kind.name for kind in kinds_named(name)] for name in BPE_CHOICES} == {
        "gpt2": ["gpt2"],
        "bert": ["wordpiece"],
        "wordpiece": ["wordpiece"],
        "sentencepiece": ["sentencepiece", "xlmr_sentencepiece"],
        "xlmr_sentencepiece": ["xlmr_sentencepiece"],
        "hf_tokenizer": ["hf_tokenizer"],
    }
    assert kinds_named("xlmr") == []


def test_each_kind_announces_its_files_names_and_family():
    described = {name: (kind.name, kind.files, kind.bpe_names, kind.family) for name, kind in KINDS.items()}
    assert described == {
        "gpt2": ("gpt2", ("encoder.json", "vocab.bpe"), ("gpt2",), None),
        "wordpiece": ("wordpiece", ("vocab.txt",), ("bert", "wordpiece"), None),
        "sentencepiece": ("sentencepiece", ("spiece.model",), ("sentencepiece",), None),
        "xlmr_sentencepiece": (
            "xlmr_sentencepiece",
            ("sentencepiece.bpe.model",),
            ("sentencepiece", "xlmr_sentencepiece"),
            "xlmr",
        ),
        "hf_tokenizer": ("hf_tokenizer", ("tokenizer.json",), ("hf_tokenizer",), None),
    }


UNKNOWN_BPE = (
    "bpe={!r} is not supported; choose one of ('gpt2', 'bert', 'wordpiece', 'sentencepiece', 'xlmr_sentencepiece', "
    "'hf_tokenizer')"
)


@pytest.mark.parametrize("name", ["char", "xlmr", "GPT2", ""])
def test_an_unknown_bpe_is_refused_with_every_choice(name, tmp_path):
    with pytest.raises(ValueError, match=re.escape(UNKNOWN_BPE.format(name)) + "$"):
        get_kind(name)
    with pytest.raises(ValueError, match=re.escape(UNKNOWN_BPE.format(name)) + "$"):
        choose_kind(name, tmp_path, TokenizerFiles(), "gpt2")


def test_files_are_announced_only_by_regular_files(tmp_path):
    (tmp_path / "vocab.txt").mkdir()
    (tmp_path / "encoder.json").write_bytes(b"")
    assert not in_folder(KINDS["wordpiece"], tmp_path) and not in_folder(KINDS["gpt2"], tmp_path)
    (tmp_path / "vocab.bpe").write_bytes(b"")
    assert in_folder(KINDS["gpt2"], tmp_path)


def test_which_files_the_caller_gave_decide_the_kind(albert_dir, xlmr_dir, tmp_path):
    albert, xlmr = albert_dir / "spiece.model", xlmr_dir / "sentencepiece.bpe.model"
    (tmp_path / "text.model").write_text("not a model")
    given = {
        "encoder": TokenizerFiles(gpt2_encoder_json="encoder.json"),
        "vocab_bpe only": TokenizerFiles(gpt2_vocab_bpe="vocab.bpe"),
        "vocab": TokenizerFiles(bpe_vocab_file="vocab.txt"),
        "albert": TokenizerFiles(sentencepiece_model=albert),
        "xlmr": TokenizerFiles(sentencepiece_model=str(xlmr)),
        "absent model": TokenizerFiles(sentencepiece_model=tmp_path / "absent.model"),
        "text model": TokenizerFiles(sentencepiece_model=tmp_path / "text.model"),
        "a folder": TokenizerFiles(sentencepiece_model=tmp_path),
        "nothing": TokenizerFiles(bpe_cased=True, cache_dir=tmp_path, offline=True),
    }
    assert {case: [name for name, kind in KINDS.items() if kind.given(files)] for case, files in given.items()} == {
        "encoder": ["gpt2"],
        "vocab_bpe only": [],
        "vocab": ["wordpiece"],
        "albert": ["sentencepiece"],
        "xlmr": ["xlmr_sentencepiece"],
        "absent model": ["sentencepiece"],
        "text model": ["sentencepiece"],
        "a folder": ["sentencepiece"],
        "nothing": [],
    }


def test_choose_kind_prefers_given_files_then_the_folders_then_the_bpe_named(albert_dir, xlmr_dir, tmp_path):
    empty = tmp_path
    albert, xlmr = albert_dir / "spiece.model", xlmr_dir / "sentencepiece.bpe.model"
    chosen = {
        "sentencepiece, an XLM-R model given": choose_kind(
            "sentencepiece", albert_dir, TokenizerFiles(sentencepiece_model=xlmr), "gpt2"
        ),
        "sentencepiece, an ALBERT model given": choose_kind(
            "sentencepiece", xlmr_dir, TokenizerFiles(sentencepiece_model=albert), "gpt2"
        ),
        "sentencepiece, XLM-R's folder": choose_kind("sentencepiece", xlmr_dir, TokenizerFiles(), "gpt2"),
        "sentencepiece, ALBERT's folder": choose_kind("sentencepiece", albert_dir, TokenizerFiles(), "gpt2"),
        "sentencepiece, an empty folder": choose_kind("sentencepiece", empty, TokenizerFiles(), "gpt2"),
        "xlmr_sentencepiece, ALBERT's folder": choose_kind("xlmr_sentencepiece", albert_dir, TokenizerFiles(), "gpt2"),
        "gpt2, a vocab.txt given": choose_kind("gpt2", xlmr_dir, TokenizerFiles(bpe_vocab_file="v.txt"), "bert"),
        "none, XLM-R's folder": choose_kind(None, xlmr_dir, TokenizerFiles(), "gpt2"),
        "none, an empty folder": choose_kind(None, empty, TokenizerFiles(), "sentencepiece"),
        "none, an ALBERT model given": choose_kind(None, xlmr_dir, TokenizerFiles(sentencepiece_model=albert), "bert"),
    }
    assert {case: kind.name for case, kind in chosen.items()} == {
        "sentencepiece, an XLM-R model given": "xlmr_sentencepiece",
        "sentencepiece, an ALBERT model given": "sentencepiece",
        "sentencepiece, XLM-R's folder": "xlmr_sentencepiece",
        "sentencepiece, ALBERT's folder": "sentencepiece",
        "sentencepiece, an empty folder": "sentencepiece",
        "xlmr_sentencepiece, ALBERT's folder": "xlmr_sentencepiece",
        "gpt2, a vocab.txt given": "gpt2",
        "none, XLM-R's folder": "xlmr_sentencepiece",
        "none, an empty folder": "sentencepiece",
        "none, an ALBERT model given": "sentencepiece",
    }


def test_a_folder_with_files_of_two_kinds_and_no_bpe_takes_the_first_kind(wordpiece_dir, albert_dir, tmp_path):
    folder = copy_of(wordpiece_dir, tmp_path / "both", "vocab.txt")
    shutil.copy(albert_dir / "spiece.model", folder)
    assert kind_for_folder(folder, TokenizerFiles(), "gpt2").name == "wordpiece"
    assert kind_for_folder(folder, TokenizerFiles(gpt2_encoder_json="e.json"), "bert").name == "gpt2"


# ----------------------------------------------------------------------------------------- WordPiece


WORDPIECE_TEXTS = [
    *TEXTS,
    "hello [MASK] world[SEP] x[CLS]",
    "HELLO [mask] [UNK]x <mask> <s>",
    "你好 hello 好",
    "Café CAFÉ cafe",
]
WORDPIECE_CONFIGS = {
    "defaults": {},
    "cased": {"do_lower_case": False},
    "accents kept": {"strip_accents": False},
    "accents stripped, cased": {"do_lower_case": False, "strip_accents": True},
    "no chinese split": {"tokenize_chinese_chars": False},
    "fairseq's names": {
        "unk_token": "<unk>",
        "cls_token": "<s>",
        "sep_token": "</s>",
        "pad_token": "<pad>",
        "mask_token": "<mask>",
    },
    "added-token objects": {"mask_token": {"content": "<mask>", "lstrip": False, "__type": "AddedToken"}},
}


@pytest.mark.parametrize("config", WORDPIECE_CONFIGS.values(), ids=WORDPIECE_CONFIGS.keys())
def test_wordpiece_of_a_transformers_folder_equals_bert_tokenizer(wordpiece_dir, tmp_path, config):
    folder = copy_of(wordpiece_dir, tmp_path / "bert", "vocab.txt")
    theirs = transformers_tokenizer(folder, "BertTokenizer", **config)
    ours = KINDS["wordpiece"].from_transformers(folder, config, {}, 0)
    assert [ours.encode(text) for text in WORDPIECE_TEXTS] == [their_ids(theirs, text) for text in WORDPIECE_TEXTS]
    dictionary = ours.dictionary
    specials = (dictionary.bos_word, dictionary.eos_word, dictionary.pad_word, dictionary.unk_word, ours.mask_token)
    assert specials == (theirs.cls_token, theirs.sep_token, theirs.pad_token, theirs.unk_token, theirs.mask_token)
    assert (dictionary.bos(), dictionary.eos(), dictionary.pad(), dictionary.unk()) == (
        theirs.cls_token_id,
        theirs.sep_token_id,
        theirs.pad_token_id,
        theirs.unk_token_id,
    )
    assert ours.is_identity


@pytest.mark.parametrize(
    ("config", "mask"),
    [({}, "[MASK]"), ({"mask_token": "<MASK>"}, "<MASK>"), ({"mask_token": {"content": "<MASK>"}}, "<MASK>")],
)
def test_wordpiece_lacking_a_special_names_the_folder(tmp_path, config, mask):
    (tmp_path / "vocab.txt").write_text("".join(f"{token}\n" for token in WORDPIECE_TOKENS if token != "[MASK]"))
    message = (
        f"{tmp_path}: lacks the mask token {mask!r}; BERT vocabularies start with [PAD], [UNK], [CLS], [SEP], "
        "[MASK] (or pass the names this one uses)"
    )
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        KINDS["wordpiece"].from_transformers(tmp_path, config, {}, 0)


def test_wordpiece_specials_are_berts_by_default(wordpiece_dir):
    ours = KINDS["wordpiece"].from_transformers(wordpiece_dir, {}, {}, 0)
    dictionary = ours.dictionary
    assert [dictionary.bos_word, dictionary.eos_word, dictionary.pad_word, dictionary.unk_word, ours.mask_token] == [
        "[CLS]",
        "[SEP]",
        "[PAD]",
        "[UNK]",
        "[MASK]",
    ]
    assert [dictionary.bos(), dictionary.eos(), dictionary.pad(), dictionary.unk()] == [2, 3, 0, 1]


def test_wordpiece_of_a_tokenizer_json_numbers_its_vocab_by_id(tmp_path):
    shuffled = {token: i for i, token in enumerate(WORDPIECE_TOKENS)}
    fast = {"type": "WordPiece", "vocab": dict(reversed(list(shuffled.items())))}
    ours = KINDS["wordpiece"].from_transformers(tmp_path, {"do_lower_case": False}, fast, 0)
    assert ours.dictionary.symbols == WORDPIECE_TOKENS
    assert ours.encode("Hello world [MASK]") == [1, 11, 4]


@pytest.mark.parametrize("fast", [{}, {"type": "BPE", "vocab": {}, "merges": []}])
def test_wordpiece_without_a_vocabulary_names_the_folder(tmp_path, fast):
    message = f"{str(tmp_path)!r} has neither vocab.txt nor a WordPiece tokenizer.json"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        KINDS["wordpiece"].from_transformers(tmp_path, {}, fast, 0)


@pytest.mark.parametrize("cased", [False, True])
@pytest.mark.parametrize("where", ["folder", "given"])
def test_wordpiece_of_a_fairseq_checkpoint_maps_berts_tokens_through_dict_txt(wordpiece_dir, tmp_path, cased, where):
    theirs = transformers_tokenizer(copy_of(wordpiece_dir, tmp_path / "bert", "vocab.txt"), "BertTokenizer")
    if cased:
        theirs = transformers_tokenizer(tmp_path / "bert", "BertTokenizer", do_lower_case=False)
    dictionary = fairseq_dictionary(list(reversed(WORDPIECE_TOKENS[10:])), extra=("<mask>",))
    if where == "folder":
        model_dir, files = wordpiece_dir, TokenizerFiles(bpe_cased=cased)
    else:
        model_dir, files = tmp_path, TokenizerFiles(bpe_vocab_file=wordpiece_dir / "vocab.txt", bpe_cased=cased)
    ours = KINDS["wordpiece"].for_fairseq(model_dir, dictionary, files)
    assert isinstance(ours, PieceTokenizer) and ours.kind == "wordpiece" and ours.dictionary is dictionary
    for text in WORDPIECE_TEXTS:
        assert ours.encode(text) == [dictionary.index(token) for token in theirs.tokenize(text)], text
    assert ours.pieces.do_lower_case is not cased


def test_wordpiece_of_a_fairseq_checkpoint_needs_its_vocab_txt(tmp_path):
    with pytest.raises(FileNotFoundError):
        KINDS["wordpiece"].for_fairseq(tmp_path, Dictionary(), TokenizerFiles())


@pytest.mark.parametrize("lowercase", [True, False])
def test_wordpiece_written_for_transformers_reads_back_as_bert_tokenizer(wordpiece_dir, tmp_path, lowercase):
    ours = KINDS["wordpiece"].from_transformers(wordpiece_dir, {"do_lower_case": lowercase}, {}, 0)
    out = tmp_path / "out"
    out.mkdir()
    write_transformers_tokenizer(ours, out, max_positions=64, mask_token="[MASK]")
    assert (out / "vocab.txt").read_bytes() == (wordpiece_dir / "vocab.txt").read_bytes()
    assert (out / "tokenizer_config.json").read_text() == json.dumps(
        {
            "model_max_length": 64,
            "tokenizer_class": "BertTokenizer",
            "do_lower_case": lowercase,
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "mask_token": "[MASK]",
        },
        indent=2,
    ) + "\n"
    theirs = transformers.AutoTokenizer.from_pretrained(str(out))
    assert [ours.encode(text) for text in WORDPIECE_TEXTS] == [their_ids(theirs, text) for text in WORDPIECE_TEXTS]


def test_wordpiece_of_a_fairseq_dictionary_writes_the_dictionarys_specials(wordpiece_dir, tmp_path):
    dictionary = fairseq_dictionary(WORDPIECE_TOKENS[10:], extra=("<mask>",))
    ours = KINDS["wordpiece"].for_fairseq(wordpiece_dir, dictionary, TokenizerFiles(bpe_cased=True))
    config: dict = {}
    KINDS["wordpiece"].save_transformers(ours, tmp_path, config, mask_token="<mask>")
    assert (tmp_path / "vocab.txt").read_text() == "".join(f"{s}\n" for s in dictionary.symbols)
    assert config == {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": False,
        "cls_token": "<s>",
        "sep_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
    }


# ----------------------------------------------------------------------------------------- GPT-2 BPE


GPT2_TEXTS = [*TEXTS, "hello <mask> world</s>", " héllo\n“world”", "<s>hello<pad>"]


def gpt2_ids_through(dictionary: Dictionary, tokenizer, text: str) -> list[int]:
    """fairseq's path: GPT-2 ids, each the index of its symbol in dict.txt (``<unk>`` if absent)."""
    return [dictionary.index(str(gpt2_id)) for gpt2_id in their_ids(tokenizer, text)]


@pytest.fixture(scope="module")
def gpt2_reference(gpt2_dir, tmp_path_factory):
    """transformers' RoBERTa tokenizer over ``encoder.json``/``vocab.bpe`` (GPT-2's ids), reading
    written specials as text, as fairseq does."""
    folder = tmp_path_factory.mktemp("gpt2_ids")
    shutil.copy(gpt2_dir.fairseq / "encoder.json", folder / "vocab.json")
    shutil.copy(gpt2_dir.fairseq / "vocab.bpe", folder / "merges.txt")
    return transformers_tokenizer(folder, "RobertaTokenizer", split_special_tokens=True)


def gpt2_fairseq_dictionary(encoder: dict[str, int]) -> Dictionary:
    """A dict.txt in an order of its own that lacks GPT-2's ``"é"`` bytes, with ``<mask>`` added."""
    left_out = {encoder[bytes_to_unicode()[byte]] for byte in "é".encode()}
    ids = sorted((i for i in encoder.values() if i not in left_out), key=lambda i: (i % 7, i))
    return fairseq_dictionary([str(i) for i in ids], extra=("madeupword0000", "<mask>"))


@pytest.mark.parametrize("where", ["folder", "given"])
def test_gpt2_of_a_fairseq_checkpoint_maps_gpt2_ids_through_dict_txt(gpt2_dir, gpt2_reference, tmp_path, where):
    dictionary = gpt2_fairseq_dictionary(gpt2_dir.encoder)
    if where == "folder":
        model_dir, files = gpt2_dir.fairseq, TokenizerFiles(offline=True, cache_dir=tmp_path)
    else:
        given = {name: str(gpt2_dir.fairseq / name) for name in ("encoder.json", "vocab.bpe")}
        model_dir = tmp_path
        files = TokenizerFiles(gpt2_encoder_json=given["encoder.json"], gpt2_vocab_bpe=given["vocab.bpe"])
    ours = KINDS["gpt2"].for_fairseq(model_dir, dictionary, files)
    assert isinstance(ours, FairseqGPT2Tokenizer) and ours.dictionary is dictionary
    for text in GPT2_TEXTS:
        assert ours.encode(text) == gpt2_ids_through(dictionary, gpt2_reference, text), text
    assert dictionary.unk() in ours.encode("é")


@pytest.mark.parametrize("given", ["gpt2_encoder_json", "gpt2_vocab_bpe"])
def test_gpt2_files_are_given_both_or_neither(gpt2_dir, given):
    files = TokenizerFiles(**{given: str(gpt2_dir.fairseq / "encoder.json")})
    with pytest.raises(ValueError, match=re.escape("pass both gpt2_encoder_json and gpt2_vocab_bpe, or neither") + "$"):
        KINDS["gpt2"].for_fairseq(gpt2_dir.fairseq, Dictionary(), files)


def test_a_given_gpt2_file_that_is_not_there_is_named(gpt2_dir, tmp_path):
    absent = str(tmp_path / "encoder.json")
    files = TokenizerFiles(gpt2_encoder_json=absent, gpt2_vocab_bpe=str(gpt2_dir.fairseq / "vocab.bpe"))
    with pytest.raises(FileNotFoundError, match=re.escape(f"BPE file {absent!r} does not exist") + "$"):
        KINDS["gpt2"].for_fairseq(gpt2_dir.fairseq, Dictionary(), files)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_gpt2_file_given_as_a_url_is_fetched_into_the_given_cache(gpt2_dir, tmp_path, monkeypatch, scheme):
    monkeypatch.setenv(download.OFFLINE_ENV, "not a setting")  # only offline=True keeps it from the network
    url = f"{scheme}://example.invalid/bpe/encoder.json"
    with pytest.raises(download.DownloadError) as expected:
        download.resolve_file(url, cache_dir=tmp_path / "cache", offline=True)
    files = TokenizerFiles(
        gpt2_encoder_json=url,
        gpt2_vocab_bpe=str(gpt2_dir.fairseq / "vocab.bpe"),
        cache_dir=tmp_path / "cache",
        offline=True,
    )
    with pytest.raises(download.DownloadError, match=re.escape(str(expected.value)) + "$"):
        KINDS["gpt2"].for_fairseq(tmp_path, Dictionary(), files)


def test_the_default_gpt2_bpe_is_refused_over_another_bpes_dictionary_with_the_full_message(tmp_path):
    dictionary = fairseq_dictionary(["5", "7", "madeupword0000", "x1", "-3"])
    dictionary.source = "/data/dict.txt"
    (tmp_path / "encoder.json").write_text("{}")  # half of GPT-2's files
    message = (
        "no GPT-2 BPE files for '/data/dict.txt': none were given or found beside the model or its data, and "
        "fairseq's default GPT-2 BPE does not fit this dictionary (2 BPE ids, not GPT-2's 50257: it comes from a "
        "BPE of your own, such as roberta-ext train-bpe's); pass gpt2_encoder_json= and gpt2_vocab_bpe= "
        "(--gpt2-encoder-json and --gpt2-vocab-bpe on the roberta-ext commands), or put encoder.json and "
        f"vocab.bpe in {str(tmp_path)!r}"
    )
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        KINDS["gpt2"].for_fairseq(tmp_path, dictionary, TokenizerFiles(offline=True, cache_dir=tmp_path / "c"))


@pytest.mark.parametrize("extra", [(), ("50257", "50258")])
def test_gpt2s_own_dictionary_offline_names_the_missing_cache_entry(tmp_path, monkeypatch, extra):
    monkeypatch.setenv(download.OFFLINE_ENV, "not a setting")
    dictionary = fairseq_dictionary([str(i) for i in range(50257)], extra=extra)
    with pytest.raises(download.DownloadError) as expected:
        download.resolve_gpt2_bpe_files(cache_dir=tmp_path / "cache", offline=True)
    message = (
        f"no GPT-2 BPE files: {expected.value}; pass gpt2_encoder_json= and gpt2_vocab_bpe= (--gpt2-encoder-json "
        "and --gpt2-vocab-bpe on the roberta-ext commands), or put encoder.json and vocab.bpe in "
        f"{str(tmp_path)!r}"
    )
    files = TokenizerFiles(offline=True, cache_dir=tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        KINDS["gpt2"].for_fairseq(tmp_path, dictionary, files)


def test_gpt2s_own_dictionary_lacking_one_id_is_refused(tmp_path):
    dictionary = fairseq_dictionary([str(i) for i in range(50257) if i != 50256])
    with pytest.raises(FileNotFoundError, match=re.escape("(50256 BPE ids, not GPT-2's 50257:")):
        KINDS["gpt2"].for_fairseq(tmp_path, dictionary, TokenizerFiles(offline=True, cache_dir=tmp_path))


@pytest.fixture(scope="module")
def roberta_reference(gpt2_dir):
    return transformers_tokenizer(gpt2_dir.roberta, "RobertaTokenizer")


@pytest.fixture(scope="module")
def roberta_reference_as_text(gpt2_dir, tmp_path_factory):
    """The same RoBERTa tokenizer reading written specials as text (as ours and fairseq do)."""
    folder = copy_of(gpt2_dir.roberta, tmp_path_factory.mktemp("roberta") / "r", "vocab.json", "merges.txt")
    return transformers_tokenizer(folder, "RobertaTokenizer", split_special_tokens=True)


def test_gpt2_of_a_transformers_folder_equals_roberta_tokenizer(gpt2_dir, roberta_reference, roberta_reference_as_text):
    ours = KINDS["gpt2"].from_transformers(gpt2_dir.roberta, {}, {}, len(gpt2_dir.vocab) + 3)
    assert [ours.encode(text) for text in GPT2_TEXTS] == [
        their_ids(roberta_reference_as_text, text) for text in GPT2_TEXTS
    ]
    assert ours.encode("hello <mask>") != their_ids(roberta_reference, "hello <mask>")  # written specials are text
    dictionary = ours.dictionary
    assert [dictionary.bos_word, dictionary.eos_word, dictionary.pad_word, dictionary.unk_word] == [
        "<s>",
        "</s>",
        "<pad>",
        "<unk>",
    ]
    assert [dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()] == [
        roberta_reference.cls_token_id,
        roberta_reference.pad_token_id,
        roberta_reference.sep_token_id,
        roberta_reference.unk_token_id,
    ]
    mask = gpt2_dir.vocab["<mask>"]
    assert dictionary.index("<mask>") == mask == roberta_reference.mask_token_id
    assert dictionary.symbols[4:6] == ["4", "5"] and dictionary.symbols[mask + 1 :] == [
        str(mask + 1),
        str(mask + 2),
        str(mask + 3),
    ]
    assert len(dictionary) == len(gpt2_dir.vocab) + 3 and dictionary.source == str(gpt2_dir.roberta)


def test_gpt2_of_a_tokenizer_json_reads_both_spellings_of_merges(gpt2_dir, roberta_reference_as_text, tmp_path):
    merges = [f"{a} {b}" for a, b in GPT2_MERGES[:3]] + [[a, b] for a, b in GPT2_MERGES[3:]]
    fast = {"type": "BPE", "vocab": gpt2_dir.vocab, "merges": merges}
    ours = KINDS["gpt2"].from_transformers(tmp_path, {}, fast, len(gpt2_dir.vocab))
    assert [ours.encode(text) for text in GPT2_TEXTS] == [
        their_ids(roberta_reference_as_text, text) for text in GPT2_TEXTS
    ]


@pytest.mark.parametrize("padding", [0, 8])
def test_gpt2_names_an_id_by_its_first_token_and_reads_bytes_it_lacks_as_unk(gpt2_dir, tmp_path, padding):
    """The first token of an id names it (an exported vocab.json lists the BPE tokens dict.txt
    lacked with ``<unk>``'s id); a byte that vocab.json lacks is ``<unk>`` (fairseq's rule, and
    transformers 4's ``RobertaTokenizer``), also where the model has more rows than vocab.json ids."""
    vocab = dict(gpt2_dir.vocab)
    unk = vocab["<unk>"]
    for byte in "é".encode():
        del vocab[bytes_to_unicode()[byte]]
    vocab = {**vocab, "<alias>": unk, "<mask2>": vocab["<mask>"]}
    fast = {"type": "BPE", "vocab": vocab, "merges": [list(pair) for pair in GPT2_MERGES]}
    ours = KINDS["gpt2"].from_transformers(tmp_path, {}, fast, len(gpt2_dir.vocab) + padding)
    dictionary = ours.dictionary
    assert dictionary.symbols[unk] == "<unk>" and dictionary[vocab["<mask>"]] == "<mask>"
    assert len(dictionary) == len(gpt2_dir.vocab) + padding
    assert ours.encode("héllo") == [vocab["h"], unk, unk, vocab["ll"], vocab["o"]]


def test_gpt2_of_an_empty_vocabulary_lacks_its_specials(tmp_path):
    fast = {"type": "BPE", "vocab": {}, "merges": []}
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}: has no bos symbol '<s>'") + "$"):
        KINDS["gpt2"].from_transformers(tmp_path, {}, fast, 0)


@pytest.mark.parametrize("fast", [{}, {"type": "WordPiece", "vocab": {}}])
def test_gpt2_without_a_vocabulary_names_the_folder(tmp_path, fast):
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    message = f"{str(tmp_path)!r} has neither vocab.json + merges.txt nor a BPE tokenizer.json"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        KINDS["gpt2"].from_transformers(tmp_path, {}, fast, 10)


def test_gpt2_of_a_fairseq_checkpoint_written_for_transformers_gives_the_same_ids(gpt2_dir, tmp_path):
    dictionary = gpt2_fairseq_dictionary(gpt2_dir.encoder)
    ours = KINDS["gpt2"].for_fairseq(gpt2_dir.fairseq, dictionary, TokenizerFiles())
    write_transformers_tokenizer(ours, tmp_path, max_positions=514, mask_token="<mask>")
    decoder = {i: token for token, i in gpt2_dir.encoder.items()}
    expected_vocab = {decoder[int(s)] if s.isdigit() else s: i for i, s in enumerate(dictionary.symbols)}
    for token in ("©", "Ã"):
        expected_vocab[token] = dictionary.unk()
    assert (tmp_path / "vocab.json").read_text("utf-8") == json.dumps(expected_vocab, ensure_ascii=False)
    assert (tmp_path / "merges.txt").read_bytes() == (gpt2_dir.fairseq / "vocab.bpe").read_bytes()
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == {
        "model_max_length": 514,
        "tokenizer_class": "RobertaTokenizer",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "sep_token": "</s>",
        "cls_token": "<s>",
    }
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path), split_special_tokens=True)
    assert [ours.encode(text) for text in GPT2_TEXTS] == [their_ids(theirs, text) for text in GPT2_TEXTS]
    assert [theirs.cls_token_id, theirs.pad_token_id, theirs.sep_token_id, theirs.unk_token_id] == [0, 1, 2, 3]
    assert theirs.mask_token_id == dictionary.index("<mask>")


def test_gpt2_exports_name_a_token_by_its_first_index(gpt2_dir, tmp_path):
    dictionary = fairseq_dictionary(["104", "101", "108"])
    dictionary.symbols[6] = "104"  # a row flagged #fairseq:overwrite: the token keeps its first index
    ours = KINDS["gpt2"].for_fairseq(gpt2_dir.fairseq, dictionary, TokenizerFiles())
    KINDS["gpt2"].save_transformers(ours, tmp_path, {}, mask_token="<mask>")
    vocab = json.loads((tmp_path / "vocab.json").read_text("utf-8"))
    assert [vocab["<s>"], vocab["h"], vocab["e"], vocab["l"]] == [0, 4, 5, 3]


def test_gpt2_spans_cover_each_tokens_bytes(gpt2_dir):
    ours = KINDS["gpt2"].for_fairseq(gpt2_dir.fairseq, gpt2_fairseq_dictionary(gpt2_dir.encoder), TokenizerFiles())
    assert KINDS["gpt2"].spans(ours, "hello world“é") == [
        (0, 5),
        (5, 9),
        (9, 10),
        (10, 11),
        (11, 12),
        (11, 12),
        (11, 12),
        (12, 13),
        (12, 13),
    ]


# ----------------------------------------------------------------------------------------- ALBERT


ALBERT_TEXTS = [*TEXTS, "hello [MASK] world[SEP] x[CLS]", "HELLO <unk> x<pad>", "ÉCOLE [MASK]", "<UNK> <Pad>"]
"""The last text's specials are found only after lowercasing: by transformers 4's ``AlbertTokenizer``
(:class:`SlowAlbert`, the peer), not by transformers 5's, compared on the others."""
ALBERT_CONFIGS = {
    "defaults": {},
    "cased": {"do_lower_case": False},
    "accents kept": {"keep_accents": True},
    "cased, accents kept": {"do_lower_case": False, "keep_accents": True},
}


@pytest.mark.parametrize("config", ALBERT_CONFIGS.values(), ids=ALBERT_CONFIGS.keys())
def test_albert_of_a_transformers_folder_equals_albert_tokenizer(albert_dir, tmp_path, config):
    folder = copy_of(albert_dir, tmp_path / "albert", "spiece.model")
    theirs = transformers_tokenizer(folder, "AlbertTokenizer", **config)
    slow = SlowAlbert(str(folder / "spiece.model"), **config)
    ours = KINDS["sentencepiece"].from_transformers(folder, config, {}, 0)
    assert [ours.encode(text) for text in ALBERT_TEXTS] == [slow.encode(text) for text in ALBERT_TEXTS]
    assert [ours.encode(text) for text in ALBERT_TEXTS[:-1]] == [their_ids(theirs, text) for text in ALBERT_TEXTS[:-1]]
    dictionary = ours.dictionary
    assert [dictionary.bos_word, dictionary.eos_word, dictionary.pad_word, dictionary.unk_word, ours.mask_token] == [
        "[CLS]",
        "[SEP]",
        "<pad>",
        "<unk>",
        "[MASK]",
    ]
    assert [dictionary.bos(), dictionary.eos(), dictionary.pad(), dictionary.unk()] == [
        theirs.cls_token_id,
        theirs.sep_token_id,
        theirs.pad_token_id,
        theirs.unk_token_id,
    ]
    assert ours.is_identity and ours.kind == "sentencepiece"


def test_albert_without_spiece_model_says_so(xlmr_dir):
    message = f"{str(xlmr_dir)!r} has no spiece.model (ALBERT's SentencePiece model)"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        KINDS["sentencepiece"].from_transformers(xlmr_dir, {}, {}, 0)


def albert_pieces(folder: Path) -> list[str]:
    sp = spm.SentencePieceProcessor(model_file=str(folder / "spiece.model"))
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())]


@pytest.mark.parametrize("cased", [False, True])
@pytest.mark.parametrize("where", ["folder", "given"])
def test_albert_of_a_fairseq_checkpoint_maps_its_pieces_through_dict_txt(albert_dir, tmp_path, cased, where):
    theirs = SlowAlbert(str(albert_dir / "spiece.model"), do_lower_case=not cased)
    dictionary = fairseq_dictionary(sorted(albert_pieces(albert_dir)))
    if where == "folder":
        model_dir, files = albert_dir, TokenizerFiles(bpe_cased=cased)
    else:
        model_dir, files = (
            tmp_path,
            TokenizerFiles(sentencepiece_model=str(albert_dir / "spiece.model"), bpe_cased=cased),
        )
    ours = KINDS["sentencepiece"].for_fairseq(model_dir, dictionary, files)
    assert isinstance(ours, PieceTokenizer) and ours.kind == "sentencepiece" and not ours.is_identity
    for text in ALBERT_TEXTS:
        assert ours.encode(text) == [dictionary.index(token) for token in theirs.tokenize(text)], text
    assert ours.pieces.do_lower_case is not cased


@pytest.mark.parametrize("config", [{}, {"do_lower_case": False, "keep_accents": True}])
def test_albert_written_for_transformers_reads_back_as_albert_tokenizer(albert_dir, tmp_path, config):
    ours = KINDS["sentencepiece"].from_transformers(albert_dir, config, {}, 0)
    write_transformers_tokenizer(ours, tmp_path, max_positions=32, mask_token="[MASK]")
    assert (tmp_path / "spiece.model").read_bytes() == (albert_dir / "spiece.model").read_bytes()
    assert json.loads((tmp_path / "tokenizer_config.json").read_text()) == {
        "model_max_length": 32,
        "tokenizer_class": "AlbertTokenizer",
        "do_lower_case": config.get("do_lower_case", True),
        "keep_accents": config.get("keep_accents", False),
    }
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert [ours.encode(text) for text in ALBERT_TEXTS[:-1]] == [their_ids(theirs, text) for text in ALBERT_TEXTS[:-1]]


def test_albert_with_a_dictionary_of_its_own_is_not_exported(albert_dir, tmp_path):
    ours = KINDS["sentencepiece"].for_fairseq(
        albert_dir, fairseq_dictionary(albert_pieces(albert_dir)), TokenizerFiles()
    )
    message = "only SentencePiece models whose ids are the model's indices can be exported"
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        write_transformers_tokenizer(ours, tmp_path, max_positions=32, mask_token="[MASK]")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------- XLM-R


XLMR_TEXTS = [*TEXTS, "hello <mask> world</s>", "HELLO <unk>x<pad> <s>", "<mask>"]


def xlmr_layout(folder: Path) -> list[str]:
    """XLM-R's ids: ``<s> <pad> </s> <unk>``, SentencePiece's pieces from id 3 on, ``<mask>``."""
    sp = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.bpe.model"))
    return ["<s>", "<pad>", "</s>", "<unk>", *(sp.id_to_piece(i) for i in range(3, sp.get_piece_size())), "<mask>"]


def test_xlmr_of_a_transformers_folder_equals_xlm_roberta_tokenizer(xlmr_dir, tmp_path):
    folder = copy_of(xlmr_dir, tmp_path / "xlmr", "sentencepiece.bpe.model")
    theirs = transformers_tokenizer(folder, "XLMRobertaTokenizer")
    ours = KINDS["xlmr_sentencepiece"].from_transformers(folder, {"do_lower_case": True}, {}, 0)
    assert [ours.encode(text) for text in XLMR_TEXTS] == [their_ids(theirs, text) for text in XLMR_TEXTS]
    dictionary = ours.dictionary
    assert [dictionary.bos_word, dictionary.eos_word, dictionary.pad_word, dictionary.unk_word, ours.mask_token] == [
        "<s>",
        "</s>",
        "<pad>",
        "<unk>",
        "<mask>",
    ]
    assert [dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()] == [0, 1, 2, 3]
    assert dictionary.index("<mask>") == theirs.mask_token_id == len(dictionary) - 1
    assert dictionary.symbols == xlmr_layout(folder) and ours.is_identity
    ids = ours.encode("Hello world, the fox")
    assert ours.decode(ids) == theirs.decode(ids) == "Hello world, the fox"
    assert [ours.token_text(i) for i in ids] == [token.replace("▁", " ") for token in theirs.convert_ids_to_tokens(ids)]


def test_xlmr_without_its_model_says_so(albert_dir):
    message = f"{str(albert_dir)!r} has no sentencepiece.bpe.model (XLM-R's SentencePiece model)"
    with pytest.raises(FileNotFoundError, match=re.escape(message) + "$"):
        KINDS["xlmr_sentencepiece"].from_transformers(albert_dir, {}, {}, 0)


@pytest.mark.parametrize("where", ["folder", "given"])
def test_xlmr_of_a_fairseq_checkpoint_reads_specials_as_text_like_fairseq(xlmr_dir, tmp_path, where):
    sp = spm.SentencePieceProcessor(model_file=str(xlmr_dir / "sentencepiece.bpe.model"))
    dictionary = fairseq_dictionary(sorted(xlmr_layout(xlmr_dir)[4:-1]), extra=("<mask>",))
    if where == "folder":
        model_dir, files = xlmr_dir, TokenizerFiles()
    else:
        model_dir, files = tmp_path, TokenizerFiles(sentencepiece_model=xlmr_dir / "sentencepiece.bpe.model")
    ours = KINDS["xlmr_sentencepiece"].for_fairseq(model_dir, dictionary, files)
    assert isinstance(ours, PieceTokenizer) and ours.kind == "sentencepiece" and ours.dictionary is dictionary
    for text in XLMR_TEXTS:
        line = " ".join(sp.encode(text, out_type=str))
        assert ours.encode(text) == [dictionary.index(piece) for piece in line.split()], text
    assert kind_of(ours) is KINDS["xlmr_sentencepiece"]


def test_xlmr_written_for_transformers_reads_back_as_xlm_roberta_tokenizer(xlmr_dir, tmp_path):
    dictionary = Dictionary.from_symbols(xlmr_layout(xlmr_dir), bos="<s>", pad="<pad>", eos="</s>", unk="<unk>")
    ours = KINDS["xlmr_sentencepiece"].for_fairseq(xlmr_dir, dictionary, TokenizerFiles())
    write_transformers_tokenizer(ours, tmp_path, max_positions=512, mask_token="<mask>")
    assert (tmp_path / "sentencepiece.bpe.model").read_bytes() == (xlmr_dir / "sentencepiece.bpe.model").read_bytes()
    assert (tmp_path / "tokenizer_config.json").read_text() == json.dumps(
        {
            "model_max_length": 512,
            "tokenizer_class": "XLMRobertaTokenizer",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "unk_token": "<unk>",
            "mask_token": "<mask>",
            "sep_token": "</s>",
            "cls_token": "<s>",
        },
        indent=2,
    ) + "\n"
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    plain = [text for text in XLMR_TEXTS if "<" not in text]
    assert [ours.encode(text) for text in plain] == [their_ids(theirs, text) for text in plain]


def test_xlmr_does_not_write_albert_s_model(albert_dir, tmp_path):
    albert = KINDS["sentencepiece"].from_transformers(albert_dir, {}, {}, 0)
    with pytest.raises(AssertionError):
        KINDS["xlmr_sentencepiece"].save_transformers(albert, tmp_path, {}, mask_token="<mask>")
    assert list(tmp_path.iterdir()) == []


def test_xlmr_with_a_dictionary_of_another_order_is_not_exported(xlmr_dir, tmp_path):
    dictionary = fairseq_dictionary(sorted(xlmr_layout(xlmr_dir)[4:-1]), extra=("<mask>",))
    ours = KINDS["xlmr_sentencepiece"].for_fairseq(xlmr_dir, dictionary, TokenizerFiles())
    message = (
        "transformers' XLMRobertaTokenizer numbers the pieces as XLM-R's dict.txt does (the model's pieces in "
        "order); this model's dict.txt orders them otherwise. Train on data preprocessed with the dict.txt that "
        "'roberta-ext tokenize --tokenizer xlmr_sentencepiece --dict-out' writes"
    )
    with pytest.raises(ValueError, match=re.escape(message) + "$"):
        write_transformers_tokenizer(ours, tmp_path, max_positions=512, mask_token="<mask>")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------------- kinds and spans


def test_each_tokenizer_is_written_by_its_own_kind(wordpiece_dir, albert_dir, xlmr_dir, gpt2_dir):
    built = {
        "gpt2": KINDS["gpt2"].from_transformers(gpt2_dir.roberta, {}, {}, len(gpt2_dir.vocab)),
        "wordpiece": KINDS["wordpiece"].from_transformers(wordpiece_dir, {}, {}, 0),
        "sentencepiece": KINDS["sentencepiece"].from_transformers(albert_dir, {}, {}, 0),
        "xlmr_sentencepiece": KINDS["xlmr_sentencepiece"].from_transformers(xlmr_dir, {}, {}, 0),
    }
    assert {name: kind_of(tokenizer).name for name, tokenizer in built.items()} == {name: name for name in built}


def test_piece_kinds_spans_are_the_characters_of_each_token(wordpiece_dir, albert_dir, xlmr_dir):
    wordpiece = KINDS["wordpiece"].from_transformers(wordpiece_dir, {}, {}, 0)
    assert KINDS["wordpiece"].spans(wordpiece, "Hellos, 你!") == [(0, 5), (5, 6), (6, 7), (8, 9), (9, 10)]
    albert = KINDS["sentencepiece"].from_transformers(albert_dir, {}, {}, 0)
    text = "the fox"
    spans = KINDS["sentencepiece"].spans(albert, text)
    assert len(spans) == len(albert.encode(text)) and spans[0][0] == 0 and spans[-1][1] == len(text)
    xlmr = KINDS["xlmr_sentencepiece"].from_transformers(xlmr_dir, {}, {}, 0)
    pieces = xlmr.pieces.tokens_with_spans("the <mask>")
    assert KINDS["xlmr_sentencepiece"].spans(xlmr, "the <mask>") == [(start, end) for _, start, end in pieces]
    assert pieces[-1] == ("<mask>", 4, 10)
