"""``hub.embed`` and its parts against plain references: the pooling against a loop over rows,
the sorted and packed batches against one text at a time, truncation against the tokenizers
library's, and results that never depend on batch-mates. (Equality with sentence-transformers
itself is in ``test_sentence_transformers.py``.)"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import roberta_ext
from roberta_ext.data.batching import length_batches
from roberta_ext.embedding import POOLING_MODES, Embedder, SentenceEmbedding, pool, similarity
from roberta_ext.inference.inputs import truncate_longest_first
from roberta_ext.modeling import attention
from roberta_ext.tokenizers.normalization import lowercase_per_character as lowercase
from tests.peers import require
from tests.test_hub import make_model_dir

TEXTS = [
    "Hello world!",
    "Hi",
    "A much longer sentence, with many more tokens than the others have in them, to pad the batch.",
    "",
    "Numbers 1,234 and e-mail a@b.c",
    "word " * 80,  # longer than the model: truncated
    "Café naïve façade",
]


@pytest.fixture(scope="module")
def roberta(tmp_path_factory, bpe_files):
    model_dir = make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, max_positions=64)
    return roberta_ext.from_pretrained(str(model_dir))


def reference_pool(features: torch.Tensor, mode: str, skip: int = 0) -> torch.Tensor:
    """One row's pooling, written out plainly: ``features`` (T, C) are all real tokens."""
    length = features.size(0)
    kept = features[skip:]
    if mode == "cls":
        return features[skip] if skip < length else features[0]
    if mode == "lasttoken":
        return features[-1] if skip < length else torch.zeros_like(features[0])
    if mode == "max":
        return kept.max(dim=0).values if len(kept) else torch.full_like(features[0], float("-inf"))
    if mode == "weightedmean":
        weights = torch.arange(skip + 1, max(skip, length) + 1, dtype=features.dtype)[:, None]
        return (kept * weights).sum(0) / weights.sum().clamp(min=1e-9)
    total = kept.sum(0)
    count = torch.tensor(float(len(kept))).clamp(min=1e-9)
    return total / count if mode == "mean" else total / count.sqrt()


@pytest.mark.parametrize("skip", [0, 2, 5])
def test_pool_equals_a_plain_loop_over_rows_for_every_mode(skip):
    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([7, 3, 1, 5])
    features = torch.randn(4, 7, 6, generator=generator)
    features[torch.arange(7) >= lengths[:, None]] = 123.0  # padding must not leak into any mode
    out = pool(features, lengths, POOLING_MODES, skip=skip)
    assert out.shape == (4, 6 * len(POOLING_MODES)) and out.dtype == torch.float32
    for b, length in enumerate(lengths.tolist()):
        expected = torch.cat([reference_pool(features[b, :length], mode, skip) for mode in POOLING_MODES])
        torch.testing.assert_close(out[b], expected)


def test_embed_equals_one_text_at_a_time_for_every_pooling(roberta):
    """Sorted, batched and packed: the same as each text alone, unpadded, in its own call."""
    embedder = Embedder.for_hub(roberta)
    for mode in POOLING_MODES:
        batched = roberta.embed(TEXTS, pooling=mode)
        for i, text in enumerate(TEXTS):
            ids = torch.tensor(embedder.encode(text))
            with torch.no_grad():
                alone = roberta.extract_features(ids)[0]  # (T, C)
            torch.testing.assert_close(batched[i], reference_pool(alone, mode), atol=1e-5, rtol=1e-5)


def test_mean_pooling_ignores_padding_and_batch_mates(roberta, monkeypatch):
    """A text's embedding is the same alone, beside longer texts (padded, packed or not) and in
    any order and batch size."""
    alone = torch.cat([roberta.embed([text]) for text in TEXTS])
    together = roberta.embed(TEXTS)
    torch.testing.assert_close(together, alone, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(roberta.embed(TEXTS[::-1], batch_size=3).flip(0), alone, atol=1e-6, rtol=1e-6)
    # Padded batches attended with a key mask instead of packed (little padding: no packing).
    monkeypatch.setattr(attention, "PACKING_MIN_PADDING", 2.0)
    torch.testing.assert_close(roberta.embed(TEXTS, max_tokens=10_000), alone, atol=1e-6, rtol=1e-6)


def test_embed_options_shapes_and_errors(roberta):
    width = roberta.model.cfg.encoder_embed_dim
    assert roberta.embed(TEXTS).shape == (len(TEXTS), width)
    assert roberta.embed("one text").shape == (1, width)
    assert roberta.embed([]).shape == (0, width)
    assert roberta.embed(TEXTS, pooling=["cls", "mean"]).shape == (len(TEXTS), 2 * width)
    normalized = roberta.embed(TEXTS, normalize=True)
    torch.testing.assert_close(normalized.norm(dim=-1), torch.ones(len(TEXTS)))
    torch.testing.assert_close(normalized, F.normalize(roberta.embed(TEXTS), dim=-1))
    pairs = roberta.embed([("A question?", "An answer."), "a text"])
    assert pairs.shape == (2, width)
    # A shorter max_length truncates: the long text's embedding changes, the short ones' do not.
    cut = roberta.embed(TEXTS, max_length=8)
    torch.testing.assert_close(cut[1], roberta.embed(TEXTS)[1])
    assert not torch.allclose(cut[2], roberta.embed(TEXTS)[2])
    with pytest.raises(ValueError, match="unknown pooling mode 'sum'"):
        roberta.embed(TEXTS, pooling="sum")
    with pytest.raises(ValueError, match="a text or a pair"):
        roberta.embed([("a", "b", "c")])
    with pytest.raises(ValueError, match="prompt or prompt_name"):
        roberta.embed(TEXTS, prompt="q: ", prompt_name="query")
    with pytest.raises(KeyError, match="none"):
        roberta.embed(TEXTS, prompt_name="query")
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        roberta.embed(TEXTS, max_tokens=0)


def test_embed_runs_in_eval_mode_and_restores_the_mode(roberta):
    expected = roberta.embed(TEXTS)
    roberta.model.train()
    try:
        torch.testing.assert_close(roberta.embed(TEXTS), expected, atol=0, rtol=0)
        assert roberta.model.training
    finally:
        roberta.model.eval()


def test_a_hub_carries_its_embedding_settings(roberta):
    default = roberta.sentence_embedding
    try:
        roberta.sentence_embedding = SentenceEmbedding(
            pooling=("cls",), normalize=True, prompts={"query": "query: "}, default_prompt_name="query"
        )
        expected = roberta.embed(["query: Hello"], pooling="cls", normalize=True, prompt="")
        torch.testing.assert_close(roberta.embed(["Hello"]), expected)
    finally:
        roberta.sentence_embedding = default


def test_bf16_embeddings_stay_close_to_fp32(roberta):
    expected = roberta.embed(TEXTS)
    roberta.to(torch.bfloat16)
    try:
        got = roberta.embed(TEXTS)
    finally:
        roberta.to(torch.float32)
    assert got.dtype == torch.float32
    assert F.cosine_similarity(got, expected).min() > 0.99


def test_similarity_is_cosine_by_default(roberta):
    a, b = roberta.embed(TEXTS[:3]), roberta.embed(TEXTS[3:])
    expected = F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T
    torch.testing.assert_close(roberta.similarity(a, b), expected)
    torch.testing.assert_close(roberta.similarity(TEXTS[:3], TEXTS[3:]), expected, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(similarity(a[0], b[0], "dot"), (a[0] @ b[0]).reshape(1, 1))
    torch.testing.assert_close(similarity(a, b, "manhattan"), -(a[:, None] - b[None]).abs().sum(-1))


def test_length_batches_cover_every_row_once_within_the_budget():
    lengths = [5, 40, 3, 17, 17, 2, 90, 1, 8]
    batches = length_batches(lengths, max_tokens=40, batch_size=3)
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))
    order = [i for batch in batches for i in batch]
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)
    for batch in batches:
        assert len(batch) <= 3
        assert len(batch) == 1 or len(batch) * max(lengths[i] for i in batch) <= 40


def test_lowercase_is_per_character_as_the_tokenizers_library():
    tokenizers = require("tokenizers", "the reference lowercasing")
    normalizer = tokenizers.normalizers.Lowercase()
    for text in ["ΟΔΟΣ ΟΔΟΣ.", "İstanbul ǅ Straße", "MIXED case ΣΑΣ"]:
        assert lowercase(text) == normalizer.normalize_str(text)


@settings(max_examples=200, deadline=None)
@given(first=st.integers(0, 40), second=st.integers(0, 40), budget=st.integers(0, 50))
def test_truncate_longest_first_equals_the_tokenizers_library(first, second, budget):
    tokenizers = require("tokenizers", "the reference truncation")
    vocab = {"[UNK]": 0, "a": 1, "b": 2}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.WhitespaceSplit()
    if budget:
        tokenizer.enable_truncation(budget, strategy="longest_first")
    encoding = tokenizer.encode(" ".join("a" * first), " ".join("b" * second))
    ours = truncate_longest_first([1] * first, [2] * second, budget) if budget else ([1] * first, [2] * second)
    assert ours[0] + ours[1] == encoding.ids
