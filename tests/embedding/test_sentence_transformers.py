"""sentence-transformers folders through our hub: ``from_pretrained(folder).embed(texts)`` equals
``SentenceTransformer(folder).encode(texts)`` within 1e-5.

Golden values come from sentence-transformers itself, in the test: small random BERT and
RoBERTa models are saved with transformers' ``save_pretrained`` (their tokenizers over
vocabularies trained here), wrapped in sentence-transformers' ``Transformer`` + ``Pooling``
(+ ``Normalize``) modules, saved with ``SentenceTransformer.save`` and loaded back by both
sides. Every pooling mode is compared, on texts of mixed lengths (some cut by
``max_seq_length``), pairs, prompts with and without ``include_prompt``, and ``do_lower_case``.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from tests.peers import require

st = require("sentence_transformers", "the tests compare with SentenceTransformer.encode")
transformers = require("transformers", "the models are built and saved with transformers")

import roberta_ext
from roberta_ext.checkpoints import CheckpointError
from roberta_ext.embedding import POOLING_MODES, read_sentence_transformers
from roberta_ext.embedding.st_folder import MODULE_TYPES, OLD_TRANSFORMER_TYPES
from roberta_ext.tokenizers.wordpiece import train_wordpiece_vocab, write_vocab
from tests.bpe_fixtures import UNICODE_SAMPLES

modules = st.sentence_transformer.modules

TEXTS = [
    "Hi",
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve façade — Ångström, and double  spaces.",
    "A much longer text, repeated until it runs past the maximum length of the model. " * 6,
    "",
    "Numbers 1,234.56 and e-mail a@b.c (parentheses) [brackets] {braces}",
    *UNICODE_SAMPLES[:4],
]
PAIRS = [
    ("Is this the first sentence?", "And this the second one."),
    ("Short", "A long second text that must be cut when the pair is too long for the model. " * 4),
    ("A long first text that must be cut when the pair is too long for the model. " * 4, "Short"),
    ("Equal " * 30, "sides " * 30),
]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37)
MAX_SEQ_LENGTH = 24
ATOL = 1e-5


def quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    """A transformers BERT (cased WordPiece vocabulary, so that lowercasing shows)."""
    directory = tmp_path_factory.mktemp("bert")
    vocab = directory / "vocab.txt"
    write_vocab(
        train_wordpiece_vocab(TEXTS * 3 + [a + b for a, b in PAIRS], vocab_size=300, do_lower_case=False), vocab
    )
    torch.manual_seed(0)
    size = len(vocab.read_text(encoding="utf-8").splitlines())
    config = transformers.BertConfig(vocab_size=size, max_position_embeddings=64, **SMALL)
    transformers.BertModel(config).eval().save_pretrained(directory)
    transformers.BertTokenizer(str(vocab), do_lower_case=False).save_pretrained(directory)
    return directory


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory, bpe_files) -> Path:
    """A transformers RoBERTa over the test BPE vocabulary."""
    directory = tmp_path_factory.mktemp("roberta")
    vocab = json.loads(Path(bpe_files.encoder_json).read_text(encoding="utf-8"))
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    tokens = specials + [t for t in vocab if t not in specials and t != "<|endoftext|>"] + ["<mask>"]
    (directory / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}), encoding="utf-8")
    shutil.copy(bpe_files.vocab_bpe, directory / "merges.txt")
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=len(tokens), type_vocab_size=1, pad_token_id=1, max_position_embeddings=66, **SMALL
    )
    transformers.RobertaModel(config, add_pooling_layer=False).eval().save_pretrained(directory)
    transformers.RobertaTokenizer(str(directory / "vocab.json"), str(directory / "merges.txt")).save_pretrained(
        directory
    )
    return directory


def save_st(
    folder: Path,
    hf_dir: Path,
    pooling,
    *,
    normalize: bool = False,
    include_prompt: bool = True,
    max_seq_length: int | None = MAX_SEQ_LENGTH,
    do_lower_case: bool = False,
    **model_kwargs,
):
    """A sentence-transformers folder written by sentence-transformers, and the model it loads back."""
    transformer = quiet(modules.Transformer, str(hf_dir), max_seq_length=max_seq_length, do_lower_case=do_lower_case)
    pooler = modules.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling, include_prompt=include_prompt)
    layers = [transformer, pooler] + ([modules.Normalize()] if normalize else [])
    quiet(st.SentenceTransformer, modules=layers, device="cpu", **model_kwargs).save(str(folder))
    return quiet(st.SentenceTransformer, str(folder), device="cpu").eval()


def encode(model, items, **kwargs) -> torch.Tensor:
    return quiet(model.encode, items, convert_to_tensor=True, batch_size=3, **kwargs).float()


@pytest.mark.parametrize(
    "family,pooling",
    [*(("bert", mode) for mode in POOLING_MODES), ("bert", ("cls", "mean", "max")), ("roberta", "mean")]
    + [("roberta", POOLING_MODES)],
)
def test_every_pooling_mode_equals_sentence_transformers(request, tmp_path, family, pooling):
    hf_dir = request.getfixturevalue(f"{family}_dir")
    model = save_st(tmp_path / "st", hf_dir, pooling, normalize=pooling == "mean")
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    expected = encode(model, TEXTS)
    assert hub.sentence_embedding.pooling == ((pooling,) if isinstance(pooling, str) else tuple(pooling))
    torch.testing.assert_close(hub.embed(TEXTS), expected, atol=ATOL, rtol=ATOL)
    # Order, batch size and token budget change nothing.
    torch.testing.assert_close(hub.embed(TEXTS[::-1], batch_size=2, max_tokens=40), expected.flip(0), atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["bert", "roberta"])
def test_pairs_are_encoded_and_truncated_longest_first_as_transformers(request, tmp_path, family):
    hf_dir = request.getfixturevalue(f"{family}_dir")
    model = save_st(tmp_path / "st", hf_dir, "mean")
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    torch.testing.assert_close(hub.embed(PAIRS), encode(model, PAIRS), atol=ATOL, rtol=ATOL)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    from roberta_ext.embedding import Embedder

    embedder = Embedder.for_hub(hub)
    for a, b in PAIRS:
        ids = tokenizer(a, b, truncation="longest_first", max_length=MAX_SEQ_LENGTH)["input_ids"]
        assert embedder.encode((a, b)) == ids
    for text in TEXTS:
        assert embedder.encode(text) == tokenizer(text, truncation=True, max_length=MAX_SEQ_LENGTH)["input_ids"]


@pytest.mark.parametrize("include_prompt", [True, False])
def test_prompts_and_include_prompt(tmp_path, bert_dir, include_prompt):
    """Every mode at once (concatenated): with ``include_prompt=False`` each leaves out the
    prompt's tokens in its own way (``cls`` takes the first token after them)."""
    pooling = POOLING_MODES
    prompts = {"query": "query: ", "passage": "passage: "}
    model = save_st(
        tmp_path / "st",
        bert_dir,
        pooling,
        include_prompt=include_prompt,
        prompts=prompts,
        default_prompt_name="query",
    )
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    assert hub.sentence_embedding.prompts["passage"] == "passage: "
    torch.testing.assert_close(hub.embed(TEXTS), encode(model, TEXTS), atol=ATOL, rtol=ATOL)  # the default prompt
    torch.testing.assert_close(
        hub.embed(TEXTS, prompt_name="passage"), encode(model, TEXTS, prompt_name="passage"), atol=ATOL, rtol=ATOL
    )
    torch.testing.assert_close(
        hub.embed(TEXTS, prompt="Represent: "), encode(model, TEXTS, prompt="Represent: "), atol=ATOL, rtol=ATOL
    )
    with pytest.raises(KeyError, match="'nope' is not one of the model's prompts"):
        hub.embed(TEXTS, prompt_name="nope")


def test_do_lower_case_as_each_version_of_sentence_transformers_reads_it(tmp_path, bert_dir):
    """sentence-transformers 2-5 wrote ``do_lower_case`` (and ``max_seq_length``) to
    sentence_bert_config.json, and lowercase what they load. Version 6 saves ``do_lower_case``
    only as a ``Lowercase`` step in tokenizer.json's normalizer, which transformers 5's
    ``BertTokenizer`` does not read back: the reloaded model does not lowercase, nor do we."""
    model = save_st(tmp_path / "v6", bert_dir, "mean", do_lower_case=True)
    assert "Lowercase" in (tmp_path / "v6" / "tokenizer.json").read_text()
    hub = roberta_ext.from_pretrained(str(tmp_path / "v6"))
    assert not hub.sentence_embedding.do_lower_case
    torch.testing.assert_close(hub.embed(TEXTS), encode(model, TEXTS), atol=ATOL, rtol=ATOL)

    save_st(tmp_path / "v5", bert_dir, "mean", max_seq_length=None)
    (tmp_path / "v5" / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": 16, "do_lower_case": True}), encoding="utf-8"
    )
    old_style = quiet(st.SentenceTransformer, str(tmp_path / "v5"), device="cpu").eval()
    hub = roberta_ext.from_pretrained(str(tmp_path / "v5"))
    assert hub.sentence_embedding.max_length == 16 and hub.sentence_embedding.do_lower_case
    torch.testing.assert_close(hub.embed(TEXTS), encode(old_style, TEXTS), atol=ATOL, rtol=ATOL)
    cased = roberta_ext.from_pretrained(str(bert_dir))  # the same model without the folder's lowercasing
    assert not torch.allclose(cased.embed(["The Quick Fox"]), hub.embed(["The Quick Fox"]))


def test_legacy_pooling_flags_and_a_transformer_in_a_subfolder(tmp_path, bert_dir):
    """The layout of sentence-transformers 2.x folders: ``0_Transformer/``, ``pooling_mode_*`` flags."""
    model = save_st(tmp_path / "new", bert_dir, ("cls", "max"))
    folder = tmp_path / "old"
    shutil.copytree(bert_dir, folder / "0_Transformer")
    (folder / "0_Transformer" / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": MAX_SEQ_LENGTH, "do_lower_case": False})
    )
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 32,
                "pooling_mode_cls_token": True,
                "pooling_mode_mean_tokens": False,
                "pooling_mode_max_tokens": True,
                "pooling_mode_mean_sqrt_len_tokens": False,
            }
        )
    )
    (folder / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "0_Transformer", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]
        )
    )
    hub = roberta_ext.from_pretrained(str(folder))
    assert hub.sentence_embedding.pooling == ("cls", "max")
    torch.testing.assert_close(hub.embed(TEXTS), encode(model, TEXTS), atol=ATOL, rtol=ATOL)


def test_similarity_follows_the_folder(tmp_path, bert_dir):
    model = save_st(tmp_path / "st", bert_dir, "mean", similarity_fn_name="dot")
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    assert hub.sentence_embedding.similarity == "dot"
    a, b = encode(model, TEXTS[:3]), encode(model, TEXTS[3:])
    torch.testing.assert_close(hub.similarity(TEXTS[:3], TEXTS[3:]), model.similarity(a, b), atol=1e-4, rtol=1e-5)
    cosine = roberta_ext.from_pretrained(str(bert_dir))
    torch.testing.assert_close(
        cosine.similarity(a, b), st.util.cos_sim(a, b), atol=1e-6, rtol=1e-6
    )  # a plain model: cosine


def test_folders_we_cannot_reproduce_are_refused_by_name(tmp_path, bert_dir):
    save_st(tmp_path / "st", bert_dir, "mean")
    entries = json.loads((tmp_path / "st" / "modules.json").read_text())
    with_dense = [*entries, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    (tmp_path / "st" / "modules.json").write_text(json.dumps(with_dense))
    with pytest.raises(CheckpointError, match=r"modules\.json.*sentence_transformers\.models\.Dense"):
        roberta_ext.from_pretrained(str(tmp_path / "st"))
    (tmp_path / "st" / "modules.json").write_text(json.dumps(entries))
    pooling = tmp_path / "st" / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": "sum"}))
    with pytest.raises(CheckpointError, match=r"1_Pooling/config\.json.*unknown pooling mode 'sum'"):
        read_sentence_transformers(tmp_path / "st")
    pooling.write_text(json.dumps({"embedding_dimension": 48, "pooling_mode": "mean"}))
    with pytest.raises(CheckpointError, match="48-wide token embeddings.*32 wide"):
        read_sentence_transformers(tmp_path / "st")


@pytest.mark.parametrize("index", [0, 1, 2])
@pytest.mark.parametrize("package", ["evilpkg", "pkg.models", "sentence_transformers_extra.models"])
def test_a_module_of_another_package_is_refused_though_it_bears_the_name(tmp_path, bert_dir, index, package):
    """``evilpkg.Normalize`` is not sentence-transformers' Normalize: sentence-transformers would
    import and run ``evilpkg``'s class (or refuse without ``trust_remote_code``), so reading it
    as the standard module could give other embeddings without a word."""
    save_st(tmp_path / "st", bert_dir, "mean", normalize=True)
    entries = json.loads((tmp_path / "st" / "modules.json").read_text())
    kind = ("Transformer", "Pooling", "Normalize")[index]
    spoofed = f"{package}.{kind}"
    entries[index]["type"] = spoofed
    (tmp_path / "st" / "modules.json").write_text(json.dumps(entries))
    with pytest.raises(CheckpointError) as refused:
        roberta_ext.from_pretrained(str(tmp_path / "st"))
    message = str(refused.value)
    assert str(tmp_path / "st" / "modules.json") in message
    assert f"module {entries[index]['name']!r} has type {spoofed!r}" in message
    assert f"not sentence-transformers' own {kind}" in message
    with pytest.raises(ValueError, match="trust_remote_code"):  # the peer does not take it for its own either
        quiet(st.SentenceTransformer, str(tmp_path / "st"), device="cpu")


def test_the_module_types_we_accept_are_sentence_transformers_own_classes():
    """Each type of :data:`MODULE_TYPES` is resolved by sentence-transformers (its own
    ``import_from_string``, as its loading does) to its class of that kind (0.x's model-specific
    modules aside: sentence-transformers no longer has them), and the types this version writes
    are among them."""
    from sentence_transformers.util import import_from_string

    own = {"Transformer": modules.Transformer, "Pooling": modules.Pooling, "Normalize": modules.Normalize}
    for type_name, kind in MODULE_TYPES.items():
        if type_name not in OLD_TRANSFORMER_TYPES:
            assert quiet(import_from_string, type_name) is own[kind], type_name
    for kind, module_class in own.items():
        assert MODULE_TYPES[f"{module_class.__module__}.{module_class.__name__}"] == kind
