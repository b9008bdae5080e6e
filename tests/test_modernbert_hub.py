"""A ModernBERT transformers folder — a tiny random ``ModernBertForMaskedLM`` beside a
``tokenizer.json`` laid out like ModernBERT's — as a hub: ids, fill-mask and features equal
transformers' (``AutoTokenizer``, ``pipeline("fill-mask")``, ``ModernBertModel``) on the same folder.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

import roberta_ext
from roberta_ext.tokenizers.hf_tokenizer import HFTokenizer
from tests.peers import require
from tests.tokenizers.conftest import TEXTS, is_utf8
from tests.tokenizers.test_hf_tokenizer import SAMPLES, rows_for, save_modernbert_tokenizer

transformers = require("transformers", "ModernBERT's classes, tokenizer and pipeline are the peers")
require("tokenizers", "the tokenizers library reads tokenizer.json")

PROPERTY = settings(max_examples=60, deadline=None)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modernbert")
    fast = save_modernbert_tokenizer(folder)
    config = transformers.ModernBertConfig(
        vocab_size=rows_for(len(fast)),  # padded past the tokenizer, as ModernBERT-base's 50,368 rows
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=3,
        num_attention_heads=4,
        local_attention=8,  # a window far shorter than the texts
        max_position_embeddings=512,
        pad_token_id=fast.pad_token_id,
        cls_token_id=fast.cls_token_id,
        sep_token_id=fast.sep_token_id,
        bos_token_id=fast.cls_token_id,
        eos_token_id=fast.sep_token_id,
    )
    torch.manual_seed(0)
    peer = transformers.ModernBertForMaskedLM(config).eval()
    with torch.no_grad():  # untrained norms and biases are ones and zeros: make every tensor tell
        for parameter in peer.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    peer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def peer(folder):
    return transformers.ModernBertForMaskedLM.from_pretrained(str(folder)).eval()


@pytest.fixture(scope="module")
def fast(folder):
    return transformers.AutoTokenizer.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def hub(folder):
    return roberta_ext.from_pretrained(str(folder))


def test_the_folder_loads_with_the_tokenizers_library(hub, fast, peer):
    assert isinstance(hub.tokenizer, HFTokenizer)
    assert len(hub.dictionary) == peer.config.vocab_size > len(fast)
    assert hub.mask_token == "[MASK]" and hub.task.mask_idx == fast.mask_token_id
    d = hub.dictionary
    assert (d.bos(), d.eos(), d.pad()) == (peer.config.cls_token_id, peer.config.sep_token_id, peer.config.pad_token_id)


@pytest.mark.parametrize("text", SAMPLES)
def test_ids_equal_auto_tokenizer(hub, fast, text):
    assert hub.encode(text).tolist() == fast(text).input_ids
    assert hub.encode(text, "a second [MASK]  text").tolist() == fast(text, "a second [MASK]  text").input_ids


@PROPERTY
@given(TEXTS, TEXTS)
def test_arbitrary_texts_and_pairs_give_auto_tokenizers_ids(hub, fast, first, second):
    if not (is_utf8(first) and is_utf8(second)):
        return
    assert hub.encode(first).tolist() == fast(first).input_ids
    if second:  # transformers reads an empty second text as none
        assert hub.encode(first, second).tolist() == fast(first, second).input_ids


@pytest.mark.parametrize("text", ["The capital of France is Paris.", "a  b\u00a0c 👍🏽 e\u0301"])
def test_decode_gives_the_text_back(hub, text):
    import unicodedata

    assert hub.decode(hub.encode(text)) == unicodedata.normalize("NFC", text)


@pytest.mark.parametrize("spelling", ["[MASK]", "<mask>"])
def test_fill_mask_equals_the_fill_mask_pipeline(hub, peer, fast, spelling):
    pipeline = transformers.pipeline("fill-mask", model=peer, tokenizer=fast, device="cpu")
    theirs = pipeline("The capital of France is [MASK].", top_k=5)
    ours = hub.fill_mask(f"The capital of France is {spelling}.", topk=5)
    assert [token for _, _, token in ours] == [hub.tokenizer.token_text(t["token"]) for t in theirs]
    decoded = [fast.decode([t["token"]], clean_up_tokenization_spaces=False) for t in theirs]
    assert [token for _, _, token in ours] == decoded
    for (filled, probability, token), expected in zip(ours, theirs):
        assert abs(probability - expected["score"]) <= 1e-4
        assert filled == f"The capital of France is{token}."  # the space before the mask is the token's


@pytest.mark.parametrize(
    "texts",
    [
        ("The capital of France is Paris, and the capital of Italy is Rome.",),
        ("a  b   c [MASK] 👍🏽 and more", "a second text, longer"),
    ],
)
def test_features_equal_modernbert_model(folder, hub, fast, texts):
    model = transformers.ModernBertModel.from_pretrained(str(folder)).eval()
    tokens = hub.encode(*texts)
    assert tokens.tolist() == fast(*texts).input_ids and len(tokens) > 2 * model.config.local_attention
    with torch.no_grad():
        expected = model(input_ids=tokens[None]).last_hidden_state
    assert (hub.extract_features(tokens) - expected).abs().max() <= 1e-4


@pytest.mark.parametrize("tokenizer_class", [None, "RobertaTokenizer"])
def test_the_family_reads_tokenizer_json_whatever_the_config_names(folder, tmp_path, tokenizer_class):
    """transformers reads a ModernBERT folder's tokenizer.json alone, whatever its
    tokenizer_config.json names (ModernBERT is among its models with a wrong class on the Hub)."""
    import json
    import shutil

    copy = shutil.copytree(folder, tmp_path / "copy")
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config.pop("tokenizer_class")
    if tokenizer_class is not None:
        config["tokenizer_class"] = tokenizer_class
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    hub = roberta_ext.from_pretrained(str(copy))
    theirs = transformers.AutoTokenizer.from_pretrained(str(copy))
    assert isinstance(hub.tokenizer, HFTokenizer)
    for text in SAMPLES:
        assert hub.encode(text).tolist() == theirs(text).input_ids


def test_save_transformers_writes_a_folder_transformers_reads_with_the_same_ids_and_outputs(hub, tmp_path):
    folder = hub.save_transformers(tmp_path / "saved")
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.ModernBertForMaskedLM.from_pretrained(str(folder)).eval()
    tokens = hub.encode("The capital of France is [MASK].")
    assert tokens.tolist() == theirs("The capital of France is [MASK].").input_ids
    with torch.no_grad():
        expected = model(input_ids=tokens[None]).logits
    with hub.model.inference():
        logits = hub.model.lm_logits(hub.extract_features(tokens))
    assert (logits - expected).abs().max() <= 1e-4
    again = roberta_ext.from_pretrained(str(folder))
    assert isinstance(again.tokenizer, HFTokenizer) and again.dictionary.symbols == hub.dictionary.symbols
    # The vocabulary's own [CLS]/[SEP] in config.json, not transformers' defaults (50281, 50282).
    assert (model.config.cls_token_id, model.config.sep_token_id) == (theirs.cls_token_id, theirs.sep_token_id)
    assert (model.config.bos_token_id, model.config.eos_token_id) == (theirs.cls_token_id, theirs.sep_token_id)


def test_the_server_serves_the_family_as_the_hub_answers(hub, peer, fast):
    """``roberta-ext serve`` on a ModernBERT folder: ``/embed`` gives the hub's embeddings (texts
    longer than the window, batched together), ``/fill_mask`` takes ``[MASK]`` and answers as the
    fill-mask pipeline, ``/tokenize`` gives the hub's ids, ``/info`` names the family."""
    import httpx

    from tests.serve.conftest import serving

    texts = ["Paris.", "The capital of France is Paris, and the capital of Italy is Rome, " * 4]
    with serving(hub) as (url, _):
        embedded = httpx.post(f"{url}/embed", json={"inputs": texts}, timeout=60)
        filled = httpx.post(f"{url}/fill_mask", json={"inputs": "The capital of France is [MASK].", "top_k": 3})
        tokens = httpx.post(f"{url}/tokenize", json={"inputs": texts[1]}, timeout=60)
        info = httpx.get(f"{url}/info").json()
    assert embedded.status_code == 200, embedded.text
    assert torch.allclose(torch.tensor(embedded.json()), hub.embed(texts, normalize=True), atol=1e-5)
    assert len(hub.encode(texts[1])) > 3 * 8  # past the window of 8
    assert filled.status_code == 200, filled.text
    pipeline = transformers.pipeline("fill-mask", model=peer, tokenizer=fast, device="cpu")
    theirs = pipeline("The capital of France is [MASK].", top_k=3)
    assert [answer["token_str"] for answer in filled.json()] == [
        fast.decode([t["token"]], clean_up_tokenization_spaces=False) for t in theirs
    ]
    assert [abs(answer["score"] - t["score"]) <= 1e-4 for answer, t in zip(filled.json(), theirs)] == [True] * 3
    assert [token["id"] for token in tokens.json()[0]] == hub.encode(texts[1]).tolist()
    assert info["family"] == "modernbert" and info["mask_token"] == "[MASK]"
