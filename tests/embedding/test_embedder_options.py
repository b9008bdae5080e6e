"""``Embedder``'s settings and each option of ``embed``, checked field by field and row by row
against plain references: each text's ids encoded by the hub's own inputs, its features from the
model alone, pooled by ``pool``. (Equality with sentence-transformers itself is in
``test_sentence_transformers.py``; batching and packing against one text at a time in
``test_embed.py``.)"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import roberta_ext
from roberta_ext.data.batching import length_batches
from roberta_ext.embedding import Embedder, SentenceEmbedding, pool
from roberta_ext.embedding.embedder import DEFAULT_MAX_TOKENS, embed
from roberta_ext.tokenizers.normalization import lowercase_per_character as lowercase
from tests.test_hub import make_model_dir

TEXTS = ["Hello world!", "Hi", "A longer sentence, with more tokens than the others.", "", "Café Naïve"]
MAX_POSITIONS = 64


@pytest.fixture(scope="module")
def hub(tmp_path_factory, bpe_files):
    return roberta_ext.from_pretrained(
        str(make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, max_positions=64))
    )


def create(hub, settings: SentenceEmbedding | None = None, **options) -> Embedder:
    return Embedder.create(hub.model, hub.inputs, settings or SentenceEmbedding(), **options)


def reference(hub, rows: list[list[int]], modes=("mean",), skip: int = 0, normalize: bool = False) -> torch.Tensor:
    """Each row's features alone (no batch-mates, no padding), pooled."""
    out = []
    for row in rows:
        with torch.no_grad():
            features = hub.extract_features(torch.tensor(row))  # (1, T, C)
        pooled = pool(features, torch.tensor([len(row)]), modes, skip=skip)[0]
        out.append(F.normalize(pooled, dim=-1) if normalize else pooled)
    return torch.stack(out)


# ------------------------------------------------------------------------------------- settings


def test_defaults_come_from_the_settings(hub):
    embedder = create(hub)
    assert embedder.model is hub.model and embedder.inputs is hub.inputs
    assert (embedder.pooling, embedder.normalize, embedder.max_length) == (("mean",), False, MAX_POSITIONS)
    assert (embedder.prompt, embedder.prompt_length, embedder.skip, embedder.do_lower_case) == ("", 0, 0, False)
    assert (embedder.max_tokens, embedder.batch_size) == (DEFAULT_MAX_TOKENS, None) and DEFAULT_MAX_TOKENS == 4096
    settings = SentenceEmbedding(pooling=("cls", "max"), normalize=True, max_length=9, do_lower_case=True)
    embedder = create(hub, settings)
    assert (embedder.pooling, embedder.normalize, embedder.max_length, embedder.do_lower_case) == (
        ("cls", "max"),
        True,
        9,
        True,
    )
    assert embedder.dimension == 2 * hub.model.cfg.encoder_embed_dim


def test_options_replace_the_settings(hub):
    settings = SentenceEmbedding(pooling=("cls",), normalize=True, max_length=9)
    embedder = create(hub, settings, pooling="max", normalize=False, max_length=12, max_tokens=100, batch_size=3)
    assert (embedder.pooling, embedder.normalize, embedder.max_length) == (("max",), False, 12)
    assert (embedder.max_tokens, embedder.batch_size) == (100, 3)
    assert create(hub, settings, pooling=["mean", "cls"]).pooling == ("mean", "cls")
    assert create(hub, SentenceEmbedding(normalize=True), normalize=False).normalize is False
    assert create(hub, SentenceEmbedding(), normalize=True).normalize is True


def test_max_length_is_at_most_the_model_positions(hub):
    assert create(hub, max_length=1000).max_length == MAX_POSITIONS
    assert create(hub, SentenceEmbedding(max_length=1000)).max_length == MAX_POSITIONS
    assert create(hub, SentenceEmbedding(max_length=20), max_length=MAX_POSITIONS).max_length == MAX_POSITIONS
    assert create(hub, max_length=1).max_length == 1
    assert create(hub, max_length=MAX_POSITIONS - 1).max_length == MAX_POSITIONS - 1


@pytest.mark.parametrize("name", ["max_length", "max_tokens", "batch_size"])
@pytest.mark.parametrize("value", [0, -3])
def test_sizes_below_one_are_refused_by_name(hub, name, value):
    with pytest.raises(ValueError, match=f"^{name} must be >= 1, got {value}$"):
        create(hub, **{name: value})
    assert getattr(create(hub, **{name: 1}), name) == 1


def test_prompt_or_prompt_name_and_the_default_prompt(hub):
    settings = SentenceEmbedding(prompts={"query": "query: ", "doc": "Doc: "}, default_prompt_name="query")
    query_ids = hub.inputs.tokenizer.encode("query: ")
    embedder = create(hub, settings)
    assert (embedder.prompt, embedder.prompt_length, embedder.skip) == ("query: ", 1 + len(query_ids), 0)
    assert create(hub, settings, prompt_name="doc").prompt == "Doc: "
    assert create(hub, settings, prompt="Find: ").prompt == "Find: "
    none = create(hub, settings, prompt="")  # an empty prompt given: no prompt, not the default
    assert (none.prompt, none.prompt_length, none.skip) == ("", 0, 0)
    assert create(hub, SentenceEmbedding(prompts={"query": "query: "})).prompt == ""  # no default prompt
    with pytest.raises(ValueError, match="^give prompt or prompt_name, not both$"):
        create(hub, settings, prompt="q: ", prompt_name="query")
    with pytest.raises(ValueError, match="^give prompt or prompt_name, not both$"):
        create(hub, settings, prompt="", prompt_name="query")
    message = "prompt_name 'nope' is not one of the model's prompts (doc, query)"
    with pytest.raises(KeyError, match=f"^{re.escape(repr(message))}$"):
        create(hub, settings, prompt_name="nope")
    message = "prompt_name 'query' is not one of the model's prompts (none)"
    with pytest.raises(KeyError, match=f"^{re.escape(repr(message))}$"):
        create(hub, prompt_name="query")


def test_prompt_tokens_are_left_out_of_the_pooling_without_include_prompt(hub):
    prompt = "Represent this: "
    length = 1 + len(hub.inputs.tokenizer.encode(prompt))
    assert length > 2
    included = create(hub, prompt=prompt)
    left_out = create(hub, SentenceEmbedding(include_prompt=False), prompt=prompt)
    assert (included.prompt_length, included.skip) == (length, 0)
    assert (left_out.prompt_length, left_out.skip) == (length, length)
    rows = [left_out.encode(text) for text in TEXTS]
    assert rows == [included.encode(text) for text in TEXTS]
    torch.testing.assert_close(left_out.embed(TEXTS), reference(hub, rows, skip=length), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(included.embed(TEXTS), reference(hub, rows), atol=1e-5, rtol=1e-5)
    # A prompt as long as max_length leaves the last position (</s>) to the pooling.
    short = create(hub, SentenceEmbedding(include_prompt=False), prompt=prompt, max_length=3)
    assert (short.prompt_length, short.skip) == (2, 2)


def test_a_lowercasing_model_counts_its_prompt_lowercased(hub):
    prompt = "QUERY NUMBER ONE: "
    lower, upper = (len(hub.inputs.tokenizer.encode(p)) for p in (lowercase(prompt), prompt))
    assert lower != upper
    embedder = create(hub, SentenceEmbedding(do_lower_case=True), prompt=prompt)
    assert (embedder.prompt, embedder.prompt_length) == (prompt, 1 + lower)
    assert create(hub, prompt=prompt).prompt_length == 1 + upper


# ------------------------------------------------------------------------------------- encode


def test_encode_prepends_the_prompt_lowercases_and_truncates(hub):
    inputs = hub.inputs
    assert create(hub).encode("Hello World") == inputs.encode_truncated(("Hello World",), MAX_POSITIONS)
    assert create(hub).encode(("A?", "B.")) == inputs.encode_truncated(("A?", "B."), MAX_POSITIONS)
    assert create(hub).encode(["A?", "B."]) == inputs.encode_truncated(("A?", "B."), MAX_POSITIONS)
    prompted = create(hub, prompt="Q: ")
    assert prompted.encode(("A?", "B.")) == inputs.encode_truncated(("Q: A?", "B."), MAX_POSITIONS)
    lowered = create(hub, SentenceEmbedding(do_lower_case=True), prompt="Q: ")
    assert lowered.encode(("Ä?", "B.")) == inputs.encode_truncated(("q: ä?", "b."), MAX_POSITIONS)
    assert lowered.encode(("Ä?", "B.")) != prompted.encode(("Ä?", "B."))
    assert create(hub, max_length=5).encode("word " * 20) == inputs.encode_truncated(("word " * 20,), 5)
    assert len(create(hub, max_length=5).encode("word " * 20)) == 5


@pytest.mark.parametrize("item", [(), ("a", "b", "c"), ("a", 1), [b"a"]])
def test_encode_refuses_what_is_not_a_text_or_a_pair(hub, item):
    with pytest.raises(ValueError, match=f"^{re.escape(f'expected a text or a pair of texts, got {item!r}')}$"):
        create(hub).encode(item)


# ------------------------------------------------------------------------------------- embed_ids


def test_embed_ids_rows_in_their_order_with_progress(hub):
    embedder = create(hub, batch_size=2, max_tokens=1000)
    rows = [embedder.encode(text) for text in TEXTS]
    seen: list[int] = []
    out = embedder.embed_ids(rows, progress=seen.append)
    assert out.dtype == torch.float32 and out.shape == (len(TEXTS), embedder.dimension)
    torch.testing.assert_close(out, reference(hub, rows), atol=1e-5, rtol=1e-5)
    expected = [len(batch) for batch in length_batches([len(r) for r in rows], max_tokens=1000, batch_size=2)]
    assert seen == expected == [2, 2, 1]
    seen.clear()
    create(hub, max_tokens=20).embed_ids(rows, progress=seen.append)
    assert seen == [len(batch) for batch in length_batches([len(r) for r in rows], max_tokens=20)]
    assert len(seen) > 2
    seen.clear()
    create(hub).embed_ids(rows, progress=seen.append)
    assert seen == [len(TEXTS)]  # one batch under the default budget
    assert create(hub).embed_ids([], progress=seen.append).shape == (0, embedder.dimension) and seen == [5]


def test_embed_ids_pools_and_normalizes_as_asked(hub):
    embedder = create(hub, pooling=["cls", "max"], normalize=True)
    rows = [embedder.encode(text) for text in TEXTS]
    out = embedder.embed_ids(rows)
    torch.testing.assert_close(out, reference(hub, rows, ("cls", "max"), normalize=True), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.norm(dim=-1), torch.ones(len(TEXTS)))
    torch.testing.assert_close(
        create(hub, pooling=["cls", "max"]).embed_ids(rows), reference(hub, rows, ("cls", "max")), atol=1e-5, rtol=1e-5
    )


@pytest.mark.parametrize("training", [True, False])
def test_embed_ids_runs_in_eval_mode_and_gives_the_mode_back(hub, training):
    embedder = create(hub)
    rows = [embedder.encode(text) for text in TEXTS]
    expected = reference(hub, rows)
    modes: list[bool] = []
    hook = hub.model.transformer.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    hub.model.train(training)
    try:
        torch.testing.assert_close(embedder.embed_ids(rows), expected, atol=1e-5, rtol=1e-5)
        assert hub.model.training is training and modes == [False]
        with pytest.raises(RuntimeError, match="^stop$"):
            embedder.embed_ids(rows, progress=lambda n: (_ for _ in ()).throw(RuntimeError("stop")))
        assert hub.model.training is training
    finally:
        hook.remove()
        hub.model.eval()


# ------------------------------------------------------------------------------------- embed


def test_embed_passes_each_option_on(hub):
    settings = SentenceEmbedding(prompts={"q": "query: "})
    items = [*TEXTS, ("A question?", "An answer.")]
    options = [
        {},
        {"pooling": "cls"},
        {"normalize": True},
        {"max_length": 4},
        {"prompt": "Represent: "},
        {"prompt_name": "q"},
    ]
    for option in options:
        embedder = create(hub, settings, **option)
        rows = [embedder.encode(item) for item in items]
        expected = reference(hub, rows, embedder.pooling, normalize=embedder.normalize)
        got = embed(hub.model, hub.inputs, settings, items, **option)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=str(option))
    for option in ({"batch_size": 0}, {"max_tokens": 0}):
        with pytest.raises(ValueError, match=f"^{next(iter(option))} must be >= 1, got 0$"):
            embed(hub.model, hub.inputs, settings, items, **option)
    # A single string is one row.
    torch.testing.assert_close(
        embed(hub.model, hub.inputs, settings, "Hello world!"),
        reference(hub, [create(hub).encode("Hello world!")]),
        atol=1e-5,
        rtol=1e-5,
    )


def test_for_hub_takes_the_hubs_model_inputs_and_settings(hub):
    default = hub.sentence_embedding
    hub.sentence_embedding = SentenceEmbedding(pooling=("max",), prompts={"q": "q: "}, default_prompt_name="q")
    try:
        embedder = Embedder.for_hub(hub, normalize=True)
        assert embedder.model is hub.model and embedder.inputs is hub.inputs
        assert (embedder.pooling, embedder.prompt, embedder.normalize) == (("max",), "q: ", True)
    finally:
        hub.sentence_embedding = default


def test_embed_reports_progress_as_embed_ids_does(hub):
    embedder = create(hub, batch_size=2)
    seen: list[int] = []
    embedder.embed(TEXTS, progress=seen.append)
    assert seen == [2, 2, 1]


def test_on_a_gpu_the_default_budget_is_the_gpus(hub):
    """Only the model's ``device`` is read: a stand-in on ``cuda`` needs no GPU."""
    from types import SimpleNamespace

    from roberta_ext.embedding.embedder import DEFAULT_MAX_TOKENS_CUDA

    on_gpu = SimpleNamespace(device=torch.device("cuda", 0))
    embedder = Embedder.create(on_gpu, hub.inputs, SentenceEmbedding())
    assert embedder.max_tokens == DEFAULT_MAX_TOKENS_CUDA == 32768
    assert Embedder.create(on_gpu, hub.inputs, SentenceEmbedding(), max_tokens=7).max_tokens == 7
