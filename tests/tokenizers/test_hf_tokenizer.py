"""A ``tokenizer.json`` read by the ``tokenizers`` library (ModernBERT's byte-level BPE) behind the
hub's tokenizer interface, against transformers' fast tokenizer over the same file.

No download: :func:`modernbert_tokenizer` trains a small byte-level BPE and gives it what
answerdotai/ModernBERT-base's ``tokenizer.json`` has: an NFC normalizer, GPT-2's byte-level
pre-tokenizer and decoder, ``|||IP_ADDRESS|||`` and ``<|padding|>`` first, added tokens for runs
of spaces, ``<|endoftext|>``, ``[UNK] [CLS] [SEP] [PAD]``, a ``[MASK]`` that absorbs the spaces
before it (``lstrip``), ``[unusedN]`` tokens, and the template ``[CLS] $A [SEP]`` /
``[CLS] $A [SEP] $B [SEP]`` (its ``tokenizer_config.json``: ``PreTrainedTokenizerFast``).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

from roberta_ext.inference.inputs import ModelInputs, PairLayout
from roberta_ext.tokenizers.dictionary import Dictionary
from roberta_ext.tokenizers.hf_tokenizer import HFTokenizer, HFTokenizerFormatError, special_token_names
from roberta_ext.tokenizers.registry import (
    KINDS,
    TokenizerFiles,
    kind_for_transformers,
    kind_of,
    write_transformers_tokenizer,
)
from tests.bpe_fixtures import UNICODE_SAMPLES
from tests.peers import require
from tests.tokenizers.conftest import TEXTS, is_utf8

tokenizers = require("tokenizers", "the tokenizers library reads tokenizer.json")
transformers = require("transformers", "its fast tokenizer is the peer")

PROPERTY = settings(max_examples=150, deadline=None)

_WORDS = (
    "the capital of France is Paris and the capital of Italy is Rome while Berlin lies in Germany "
    "a model reads text one token at a time it learns which words come next and which were masked "
    "encoders see the whole sentence at once and fill the blanks from both sides"
).split()
CORPUS = [" ".join(_WORDS[(7 * i + k) % len(_WORDS)] for k in range(5 + i % 9)) + ".,!?"[i % 4] for i in range(300)]
"""A few hundred lines of plain English for the BPE to learn words from, beside UNICODE_SAMPLES."""

SPACE_RUNS = tuple(" " * n for n in range(8, 1, -1))
"""ModernBERT's added tokens for runs of spaces (it has 24 down to 2), longest first as it lists them."""

SAMPLES = (
    "The capital of France is [MASK].",
    "The capital of France is    [MASK] !",
    "[MASK] starts, and ends [MASK]",
    "a  b   c        d\t\te",
    "Contact |||IP_ADDRESS||| or |||EMAIL_ADDRESS|||<|endoftext|>",
    "literal [CLS] and [SEP] and [PAD] and [UNK] and [unused1] inside",
    "Cafe\u0301 (decomposed) and Café (composed): NFC makes them one",
    "",
    " ",
    *UNICODE_SAMPLES,
)


def modernbert_tokenizer(vocab_size: int = 600):
    """A small byte-level BPE laid out like ModernBERT's ``tokenizer.json`` (see the module's docstring)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    library = Tokenizer(models.BPE())
    library.normalizer = normalizers.NFC()
    library.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    library.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["|||IP_ADDRESS|||", "<|padding|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    library.train_from_iterator([*CORPUS, *UNICODE_SAMPLES], trainer)
    library.add_tokens([AddedToken(run, normalized=True) for run in SPACE_RUNS])
    library.add_tokens([AddedToken("|||EMAIL_ADDRESS|||", normalized=True)])
    library.add_special_tokens([AddedToken(t, normalized=False) for t in ("<|endoftext|>", "[UNK]", "[CLS]", "[SEP]")])
    library.add_special_tokens([AddedToken("[PAD]", normalized=False), AddedToken("[MASK]", lstrip=True)])
    library.add_tokens([AddedToken(f"[unused{i}]", normalized=True) for i in range(3)])
    cls, sep = library.token_to_id("[CLS]"), library.token_to_id("[SEP]")
    library.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return library


def save_modernbert_tokenizer(folder: Path):
    """Write :func:`modernbert_tokenizer`'s ``tokenizer.json`` and ``tokenizer_config.json`` into
    ``folder`` as transformers does; return the fast tokenizer."""
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=modernbert_tokenizer(),
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
    )
    fast.save_pretrained(folder)
    return fast


def rows_for(size: int) -> int:
    """The model's embedding rows: the tokenizer padded to a multiple of 64, always with some rows
    no token has (as ModernBERT-base pads to 50,368)."""
    return (size // 64 + 1) * 64


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("modernbert-tokenizer")
    save_modernbert_tokenizer(folder)
    return folder


@pytest.fixture(scope="module")
def fast(folder):
    return transformers.AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def rows(fast) -> int:
    return rows_for(len(fast))


@pytest.fixture(scope="module")
def ours(folder, rows) -> HFTokenizer:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer = KINDS["hf_tokenizer"].from_transformers(folder, config, {}, rows)
    assert isinstance(tokenizer, HFTokenizer)
    return tokenizer


@pytest.fixture(scope="module")
def inputs(ours) -> ModelInputs:
    """The hub's text -> ids with ModernBERT's pair layout (one [SEP] between, no segments)."""
    return ModelInputs(tokenizer=ours, layout=PairLayout(double_separator=False, segments=False), max_positions=10**6)


# ------------------------------------------------------------------------------------- ids


@pytest.mark.parametrize("text", SAMPLES)
def test_ids_of_texts_and_pairs_equal_the_fast_tokenizer(inputs, fast, text):
    assert inputs.encode(text) == fast(text).input_ids
    assert inputs.encode(text, "and [MASK] a second  text") == fast(text, "and [MASK] a second  text").input_ids
    if text:  # transformers takes an empty second text for no second text; the library does not
        assert inputs.encode("first", text) == fast("first", text).input_ids


def test_an_empty_second_text_is_a_pair_as_the_library_makes_it(inputs, fast):
    assert inputs.encode("a", "") == fast._tokenizer.encode("a", "").ids != fast("a", "").input_ids


def test_the_mask_absorbs_the_spaces_before_it(ours, fast):
    mask = fast.mask_token_id
    assert (
        ours.encode("is    [MASK].")
        == ours.encode("is[MASK].")
        == fast("is [MASK].", add_special_tokens=False).input_ids
    )
    assert ours.encode("is [MASK].")[-2:] == [mask, ours.encode(".")[0]]
    assert ours.encode("[MASK] x")[1:] == ours.encode(" x")  # no rstrip: the space after it stays


@PROPERTY
@given(TEXTS)
def test_arbitrary_unicode_gives_the_fast_tokenizers_ids(inputs, fast, text):
    """Any code point, unassigned and private-use included; a lone surrogate is not text, and both refuse it."""
    if not is_utf8(text):
        with pytest.raises(ValueError, match="lone surrogate at index"):
            inputs.encode(text)
        with pytest.raises(TypeError, match="TextEncodeInput must be"):  # transformers says so less plainly
            fast(text)
        return
    assert inputs.encode(text) == fast(text).input_ids


@PROPERTY
@given(TEXTS, TEXTS)
def test_arbitrary_pairs_give_the_fast_tokenizers_ids(inputs, fast, first, second):
    if is_utf8(first) and is_utf8(second) and second:
        assert inputs.encode(first, second) == fast(first, second).input_ids


@PROPERTY
@given(TEXTS)
def test_decoding_gives_what_the_fast_tokenizer_gives_and_round_trips(ours, fast, text):
    if not is_utf8(text):
        return
    ids = ours.encode(text)
    # transformers' clean_up_tokenization_spaces (true in ModernBERT's files) deletes the space
    # before "." and "," and so loses text: the hub never applies it.
    assert ours.decode(ids) == fast.decode(ids, clean_up_tokenization_spaces=False)


@pytest.mark.parametrize("text", [t for t in SAMPLES if not re.search(r"\[(MASK|CLS|SEP|PAD)\]", t)])
def test_text_comes_back_from_its_ids(inputs, ours, text):
    """Byte-level BPE loses nothing but what NFC changes; a [MASK] in the text absorbs the spaces
    before it, and [CLS], [SEP] and [PAD] are dropped, as every hub tokenizer drops them."""
    nfc = __import__("unicodedata").normalize("NFC", text)
    assert ours.decode(ours.encode(text)) == nfc
    assert inputs.decode(inputs.encode(text)) == nfc  # the hub's decode: [CLS] and [SEP] dropped


# -------------------------------------------------------------------------- the vocabulary


def test_the_dictionary_is_the_embedding_rows_with_the_specials_of_the_template(ours, fast, rows):
    d = ours.dictionary
    assert len(d) == rows > len(fast)
    assert (d.bos(), d.eos(), d.pad(), d.unk()) == (
        fast.cls_token_id,
        fast.sep_token_id,
        fast.pad_token_id,
        fast.unk_token_id,
    )
    assert (d.bos_word, d.eos_word, d.pad_word, d.unk_word) == ("[CLS]", "[SEP]", "[PAD]", "[UNK]")
    assert d.symbols[: len(fast)] == fast.convert_ids_to_tokens(list(range(len(fast))))
    assert d.symbols[len(fast) :] == [f"<id:{i}>" for i in range(len(fast), rows)]
    assert ours.mask_token == "[MASK]" and d.index("[MASK]") == fast.mask_token_id
    assert kind_of(ours) is KINDS["hf_tokenizer"] and ours.is_identity


def test_each_tokens_text_is_the_token_decoded(ours, fast, rows):
    for token_id in range(len(fast)):
        assert ours.token_text(token_id) == fast.decode([token_id], clean_up_tokenization_spaces=False), token_id
    assert ours.token_text(rows - 1) == ""  # a row no token has
    capital = ours.encode(" capital")
    assert len(capital) == 1 and ours.token_text(capital[0]) == " capital"


@PROPERTY
@given(TEXTS)
def test_spans_are_the_fast_tokenizers_offsets(ours, fast, text):
    if not is_utf8(text):
        return
    expected = fast(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    assert ours.spans(text) == [tuple(span) for span in expected]
    assert len(ours.spans(text)) == len(ours.encode(text))


def test_words_after_the_first_are_read_after_a_space(inputs, ours):
    assert ours.encode_word("capital", first=True) == ours.encode("capital")
    assert ours.encode_word("capital", first=False) == ours.encode(" capital")
    ids, firsts = inputs.encode_words(["The", "capital", "is", "Paris"])
    assert ids == inputs.encode("The capital is Paris")
    assert [ids[i] for i in firsts] == [ours.encode(w)[0] for w in ("The", " capital", " is", " Paris")]


# ------------------------------------------------------------------- what the files must say


def library_with(*, template: str | None = "bert", unk: bool = True):
    """A tiny byte-level tokenizer: ``template`` ``"bert"`` (``[CLS] a [SEP] b [SEP]``),
    ``"roberta"`` (``<s> a </s> </s> b </s>``) or None (no post-processor)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    vocab = {"[CLS]": 0, "[SEP]": 1, "[PAD]": 2, "[UNK]": 3, "a": 4, "b": 5}
    library = Tokenizer(models.BPE(vocab, [], unk_token="[UNK]" if unk else None))
    library.pre_tokenizer, library.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    if template == "bert":
        library.post_processor = processors.BertProcessing(("[SEP]", 1), ("[CLS]", 0))
    elif template == "roberta":
        library.post_processor = processors.RobertaProcessing(("[SEP]", 1), ("[CLS]", 0))
    return library


NAMES = {"pad_token": "[PAD]", "unk_token": "[UNK]"}


def test_bert_and_roberta_processors_read_as_templates():
    bert = HFTokenizer.for_model(library_with(template="bert"), rows=8, names=NAMES)
    roberta = HFTokenizer.for_model(library_with(template="roberta"), rows=8, names=NAMES, double_separator=True)
    for tokenizer in (bert, roberta):
        assert (tokenizer.dictionary.bos(), tokenizer.dictionary.eos()) == (0, 1)


@pytest.mark.parametrize(
    ("template", "double_separator", "given"),
    [
        (None, False, r"\['a'\] for a text 'a' and \['a', 'b'\] for a pair 'a', 'b'"),
        ("roberta", False, r"\['\[CLS\]', 'a', '\[SEP\]', '\[SEP\]', 'b', '\[SEP\]'\] for a pair"),
        ("bert", True, r"\['\[CLS\]', 'a', '\[SEP\]', 'b', '\[SEP\]'\] for a pair"),
    ],
)
def test_a_template_the_model_does_not_read_is_refused(template, double_separator, given):
    layout = r"<s> a </s> </s> b </s>" if double_separator else r"\[CLS\] a \[SEP\] b \[SEP\]"
    with pytest.raises(HFTokenizerFormatError, match=rf"^'x.json': its post-processor gives .*{given}.*as {layout}$"):
        HFTokenizer.for_model(
            library_with(template=template), rows=8, names=NAMES, double_separator=double_separator, source="x.json"
        )


def test_the_padding_and_unknown_tokens_come_from_the_files_or_are_asked_for():
    library = library_with(unk=True)
    library.enable_padding(pad_id=2, pad_token="[PAD]")
    tokenizer = HFTokenizer.for_model(library, rows=8, names={})  # tokenizer.json's padding and model's unk_token
    assert (tokenizer.dictionary.pad_word, tokenizer.dictionary.unk_word) == ("[PAD]", "[UNK]")
    assert tokenizer.library.padding is None  # the hub pads rows itself
    assert tokenizer.mask_token == "<mask>"  # names no mask: the hub's spelling, which is <unk>
    with pytest.raises(HFTokenizerFormatError, match=r"^'x.json': the folder names no pad_token"):
        HFTokenizer.for_model(library_with(), rows=8, names={"unk_token": "[UNK]"}, source="x.json")
    with pytest.raises(HFTokenizerFormatError, match=r"^'x.json': the folder names no unk_token"):
        HFTokenizer.for_model(library_with(unk=False), rows=8, names={"pad_token": "[PAD]"}, source="x.json")
    for role in ("pad_token", "unk_token", "mask_token"):
        with pytest.raises(HFTokenizerFormatError, match=rf"its {role} '<nope>' is not in its vocabulary"):
            HFTokenizer.for_model(library_with(), rows=8, names={**NAMES, role: "<nope>"})


def test_ids_past_the_models_rows_are_refused():
    message = r"^'x.json' has ids up to 5, but the model's embedding has 5 rows: this tokenizer does not belong"
    with pytest.raises(HFTokenizerFormatError, match=message):
        HFTokenizer.for_model(library_with(), rows=5, names=NAMES, source="x.json")


def test_a_file_the_library_cannot_read_is_named(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"version": "1.0"}')
    with pytest.raises(HFTokenizerFormatError, match=r"tokenizer.json' is not a tokenizer.json the tokenizers library"):
        HFTokenizer.from_file(tmp_path / "tokenizer.json", rows=8, names=NAMES)
    with pytest.raises(FileNotFoundError, match=r"has no tokenizer.json \(the tokenizers library's file\)$"):
        KINDS["hf_tokenizer"].from_transformers(tmp_path / "empty", {}, {}, 8)


def test_special_token_names_read_both_configs_and_added_token_dicts(tmp_path):
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"pad_token": "<pad>", "unk_token": "<unk>"}))
    config = {"mask_token": {"content": "[MASK]", "lstrip": True}, "pad_token": "[PAD]", "cls_token": "[CLS]"}
    assert special_token_names(tmp_path, config) == {  # [CLS] and [SEP] come from the template
        "pad_token": "[PAD]",  # tokenizer_config.json first
        "unk_token": "<unk>",
        "mask_token": "[MASK]",
    }


def test_the_library_is_asked_for_by_name_when_missing(folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(ImportError, match=r"read by the tokenizers library: pip install tokenizers$"):
        HFTokenizer.from_file(folder / "tokenizer.json", rows=4096, names=NAMES)


# ------------------------------------------------------------------------- the registry


def test_transformers_folders_whose_tokenizer_is_tokenizer_json_are_read_by_the_library(folder, tmp_path):
    generic = {"tokenizer_class": "TokenizersBackend"}
    assert kind_for_transformers(folder, generic, "gpt2").name == "hf_tokenizer"
    assert kind_for_transformers(folder, {"tokenizer_class": "PreTrainedTokenizerFast"}, "wordpiece").name == (
        "hf_tokenizer"
    )
    assert kind_for_transformers(folder, {"tokenizer_class": "RobertaTokenizer"}, "gpt2").name == "gpt2"
    assert kind_for_transformers(tmp_path, generic, "gpt2").name == "gpt2"  # no tokenizer.json to read
    assert kind_for_transformers(tmp_path, {}, "hf_tokenizer").name == "hf_tokenizer"  # the family's kind


def test_written_for_transformers_it_gives_the_same_ids(ours, tmp_path):
    write_transformers_tokenizer(ours, tmp_path, max_positions=8192, mask_token="[MASK]")
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config == {
        "model_max_length": 8192,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "mask_token": "[MASK]",
    }
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in SAMPLES:
        assert theirs(text).input_ids == [ours.dictionary.bos(), *ours.encode(text), ours.dictionary.eos()]


def test_a_fairseq_checkpoint_reads_the_ids_through_dict_txt(folder, ours, tmp_path):
    text = "The capital of France is Paris."
    ids = ours.encode(text)
    dictionary = Dictionary()  # <s> <pad> </s> <unk>, then the ids seen, most frequent first
    for token_id in sorted(set(ids), reverse=True):
        dictionary.add_symbol(str(token_id))
    dictionary.add_symbol("<mask>")
    tokenizer = KINDS["hf_tokenizer"].for_fairseq(folder, dictionary, TokenizerFiles())
    assert isinstance(tokenizer, HFTokenizer) and not tokenizer.is_identity
    indices = tokenizer.encode(text)
    assert indices == [dictionary.index(str(i)) for i in ids] and min(indices) >= 4
    assert tokenizer.encode("Zebra") == [dictionary.unk()] * len(ours.encode("Zebra"))  # ids dict.txt lacks
    assert tokenizer.decode([0, *indices, 2]) == text
    assert [tokenizer.token_text(i) for i in indices] == [ours.token_text(i) for i in ids]
    assert tokenizer.token_text(dictionary.index("<mask>")) == "<mask>"
    assert tokenizer.spans(text) == ours.spans(text)
    with pytest.raises(ValueError, match="not its tokenizer.json's ids"):
        write_transformers_tokenizer(tokenizer, tmp_path, max_positions=512, mask_token="<mask>")
    with pytest.raises(FileNotFoundError, match=re.escape(f"{str(tmp_path)!r} has no tokenizer.json")):
        KINDS["hf_tokenizer"].for_fairseq(tmp_path, dictionary, TokenizerFiles())


def test_it_pickles_as_a_hub_sent_to_worker_processes_must(ours):
    import pickle

    copy = pickle.loads(pickle.dumps(ours))
    assert [copy.encode(text) for text in SAMPLES] == [ours.encode(text) for text in SAMPLES]
    assert copy.dictionary.symbols == ours.dictionary.symbols and copy.mask_token == "[MASK]"


def test_a_roberta_folder_with_a_generic_fast_tokenizer_is_read_by_the_library(tmp_path):
    """Any family: a tokenizer_config.json naming PreTrainedTokenizerFast means tokenizer.json is
    the tokenizer, here with RoBERTa's template (<s> a </s> </s> b </s>) and its <mask>."""
    import torch
    from tokenizers import AddedToken, processors

    import roberta_ext

    library = modernbert_tokenizer()
    library.add_special_tokens(["<s>", "</s>", "<pad>", "<unk>", AddedToken("<mask>", lstrip=True)])
    bos, eos = library.token_to_id("<s>"), library.token_to_id("</s>")
    library.post_processor = processors.RobertaProcessing(("</s>", eos), ("<s>", bos))
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=library, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>"
    )
    fast.mask_token = "<mask>"
    fast.save_pretrained(tmp_path)
    config = transformers.RobertaConfig(
        vocab_size=rows_for(len(fast)),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        pad_token_id=fast.pad_token_id,
        max_position_embeddings=fast.pad_token_id + 1 + 64,  # positions start after the padding index
    )
    torch.manual_seed(0)
    transformers.RobertaForMaskedLM(config).save_pretrained(tmp_path)
    theirs = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    hub = roberta_ext.from_pretrained(str(tmp_path))
    assert isinstance(hub.tokenizer, HFTokenizer) and hub.mask_token == "<mask>"
    for text in SAMPLES[:8]:
        assert hub.encode(text).tolist() == theirs(text).input_ids
        assert hub.encode(text, "second <mask> text").tolist() == theirs(text, "second <mask> text").input_ids
