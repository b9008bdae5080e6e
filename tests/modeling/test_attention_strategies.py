"""The attention strategies of the encoder (roberta_ext.modeling.attention.ATTENTION_STRATEGIES):
every packed strategy equals the masked full-batch computation on real tokens. The varlen flash
kernel is CUDA-only: on the CPU its wiring (cumulative lengths, longest run, scale, layout) is
checked against a reference built from per-sequence SDPA; the real kernel is checked where CUDA
is present. The strategy is each model's own: its config's, ``set_attention``'s or
``use_attention``'s, else ``$ROBERTA_EXT_ATTENTION``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from roberta_ext.modeling import RobertaModel, use_attention
from roberta_ext.modeling import attention as att
from tests.modeling import tiny_config

PAD = 1
LENGTHS = [12, 1, 7, 12, 3, 1]  # length-1 rows, and full-length rows of the padded width
CUDA = torch.cuda.is_available()


def tiny(**overrides) -> RobertaModel:
    torch.manual_seed(0)
    return RobertaModel(tiny_config(**overrides)).eval()


def batch_of(lengths: list[int], *, left: bool = False, vocab: int = 64) -> torch.Tensor:
    """``<s> ... </s>`` rows of the given lengths (a length-1 row is ``<s>`` alone), padded on
    the right or the left."""
    generator = torch.Generator().manual_seed(len(lengths))
    tokens = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        row = torch.randint(4, vocab, (n,), generator=generator)
        row[0] = 0
        if n > 1:
            row[-1] = 2
        if left:
            tokens[i, tokens.size(1) - n :] = row
        else:
            tokens[i, :n] = row
    return tokens


def features(model: RobertaModel, tokens: torch.Tensor, strategy: str) -> tuple[torch.Tensor, list[torch.Tensor]]:
    with torch.no_grad(), use_attention(model, strategy):
        out, extra = model(tokens, features_only=True, return_all_hiddens=True)
    return out, extra["inner_states"]


def reference_varlen(calls: list[dict]):
    """A stand-in for ``torch.nn.attention.varlen.varlen_attn`` from per-sequence SDPA: it checks
    the arguments the encoder passes and attends over the runs that ``cu_seq_q`` delimits."""

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None):
        assert query.dim() == key.dim() == value.dim() == 3  # packed (N, H, D)
        assert query.shape == key.shape == value.shape
        assert cu_seq_q.dtype == torch.int32 and cu_seq_q.device == query.device
        assert torch.equal(cu_seq_q, cu_seq_k) and cu_seq_q[0] == 0 and int(cu_seq_q[-1]) == query.size(0)
        runs = cu_seq_q.diff().tolist()
        assert max_q == max_k == max(runs)
        calls.append({"runs": runs, "max_len": max_q, "scale": scale, "heads": query.size(1)})
        out = [
            F.scaled_dot_product_attention(
                *(t[start:end].transpose(0, 1)[None] for t in (query, key, value)), scale=scale
            )[0].transpose(0, 1)
            for start, end in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist())
        ]
        return torch.cat(out)

    return varlen_attn


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("strategy", ["nested", "per_sequence", "padded"])
def test_packed_strategies_equal_the_masked_path_in_fp32(strategy, left):
    model = tiny()
    tokens = batch_of(LENGTHS, left=left)
    real = tokens.ne(PAD)
    packed, packed_hiddens = features(model, tokens, strategy)
    masked, masked_hiddens = features(model, tokens, "masked")
    torch.testing.assert_close(packed[real], masked[real], atol=1e-5, rtol=1e-5)
    for hp, hm in zip(packed_hiddens, masked_hiddens, strict=True):
        torch.testing.assert_close(hp[real], hm[real], atol=1e-5, rtol=1e-5)
    assert packed[~real].abs().sum() == 0


def test_per_sequence_attends_runs_of_equal_lengths_as_one_batch_with_the_same_bits():
    # Length-sorted batches come as runs of one length; each run is one SDPA call over a view,
    # and every sequence's output is bit for bit what a call of its own gives.
    lengths = [9, 9, 9, 4, 4, 1, 9, 2, 2]
    padding = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]
    packing = att.Packing.from_padding_mask(padding)
    assert packing.length_runs == [(9, 3), (4, 2), (1, 1), (9, 1), (2, 2)]
    q, k, v = torch.randn(3, sum(lengths), 4, 8, generator=torch.Generator().manual_seed(0)).unbind(0)
    alone = [
        F.scaled_dot_product_attention(*(t[start:end].transpose(0, 1)[None] for t in (q, k, v)))[0].transpose(0, 1)
        for start, end in zip(packing.cu_seqlens[:-1].tolist(), packing.cu_seqlens[1:].tolist())
    ]
    assert torch.equal(att.per_sequence_attention(q, k, v, packing, 0.0), torch.cat(alone))


def test_a_row_among_rows_of_its_length_gets_the_features_it_gets_alone():
    model = tiny()
    tokens = batch_of([7, 7, 7, 7, 3])
    with torch.no_grad(), use_attention(model, "per_sequence"):
        together = model(tokens, features_only=True)[0]
        for i in range(4):
            alone = model(tokens[i : i + 1, :7], features_only=True)[0]
            assert torch.equal(together[i], alone[0])


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("strategy", ["nested", "per_sequence"])
def test_packed_strategies_equal_the_masked_path_in_bf16(strategy, left):
    model = tiny(encoder_normalize_before=True).to(torch.bfloat16)
    tokens = batch_of(LENGTHS, left=left)
    real = tokens.ne(PAD)
    packed, _ = features(model, tokens, strategy)
    masked, _ = features(model, tokens, "masked")
    assert packed.dtype == torch.bfloat16
    # bf16 keeps 8 bits of mantissa: the two orders of summation agree to a few units in the last place.
    torch.testing.assert_close(packed[real].float(), masked[real].float(), atol=3e-2, rtol=3e-2)
    cosine = F.cosine_similarity(packed[real].float(), masked[real].float(), dim=-1)
    assert cosine.min() > 0.999


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_varlen_passes_cumulative_lengths_longest_run_and_scale(monkeypatch, left):
    calls: list[dict] = []
    monkeypatch.setattr(att, "varlen_kernel", lambda: reference_varlen(calls))
    model = tiny()
    tokens = batch_of(LENGTHS, left=left)
    real = tokens.ne(PAD)
    varlen, varlen_hiddens = features(model, tokens, "varlen")
    masked, masked_hiddens = features(model, tokens, "masked")
    torch.testing.assert_close(varlen[real], masked[real], atol=1e-5, rtol=1e-5)
    for hv, hm in zip(varlen_hiddens, masked_hiddens, strict=True):
        torch.testing.assert_close(hv[real], hm[real], atol=1e-5, rtol=1e-5)
    cfg = model.cfg
    head_dim = cfg.encoder_embed_dim // cfg.encoder_attention_heads
    assert len(calls) == cfg.encoder_layers  # one call per layer
    expected = {"runs": LENGTHS, "max_len": max(LENGTHS), "scale": head_dim**-0.5, "heads": cfg.encoder_attention_heads}
    assert all(call == expected for call in calls)


def test_one_packing_per_batch_is_shared_by_every_layer(monkeypatch):
    seen: list[att.Packing] = []
    real_nested = att.PACKED_ATTENTION["nested"]

    def spy(q, k, v, packing, dropout_p):
        seen.append(packing)
        return real_nested(q, k, v, packing, dropout_p)

    monkeypatch.setitem(att.PACKED_ATTENTION, "nested", spy)
    model = tiny()
    features(model, batch_of(LENGTHS), "nested")
    assert len(seen) == model.cfg.encoder_layers and all(p is seen[0] for p in seen)
    packing = seen[0]
    assert packing.cu_seqlens.dtype == torch.int32
    assert packing.cu_seqlens.tolist() == [0, *torch.tensor(LENGTHS).cumsum(0).tolist()]
    assert packing.max_len == max(LENGTHS) and packing.seq_lens == LENGTHS
    assert packing.offsets is packing.offsets  # one offsets tensor: one ragged dimension for every layer


@pytest.mark.parametrize("strategy", ["nested", "varlen"])
def test_packed_strategies_train(monkeypatch, strategy):
    """Gradients flow through the nested path (with SDPA's dropout) and the varlen path (no
    attention dropout: the kernel has none) and equal the masked path's without dropout."""
    monkeypatch.setattr(att, "varlen_kernel", lambda: reference_varlen([]))
    tokens = batch_of([10, 2, 6, 1])
    grads = {}
    for name in (strategy, "masked"):
        model = tiny(dropout=0.0, attention_dropout=0.0).train()
        with use_attention(model, name):
            logits, _ = model(tokens)
        logits[tokens.ne(PAD)].logsumexp(-1).sum().backward()
        grads[name] = model.encoder.sentence_encoder.layers[0].self_attn.q_proj.weight.grad
    torch.testing.assert_close(grads[strategy], grads["masked"], atol=1e-4, rtol=1e-4)
    if strategy == "nested":  # with attention dropout too
        model = tiny(attention_dropout=0.1).train()
        with use_attention(model, "nested"):
            model(tokens)[0].sum().backward()
        assert model.encoder.sentence_encoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_varlen_refuses_attention_dropout_and_the_cpu():
    with pytest.raises(ValueError, match="no dropout"):
        tiny(attention_dropout=0.1, attention="varlen").train()(batch_of([5, 2]))
    with pytest.raises(ValueError, match="needs CUDA and fp16/bf16"):
        tiny(attention="varlen").to(torch.bfloat16)(batch_of([5, 2]))


def test_auto_chooses_per_sequence_on_cpu_varlen_on_cuda_half_without_dropout(monkeypatch):
    monkeypatch.setattr(att, "_has_varlen", lambda: True)
    packing = att.Packing.from_padding_mask(torch.tensor([[False, True], [False, False]]))

    def q(*, cuda: bool, dtype: torch.dtype = torch.bfloat16, head_dim: int = 64):
        return SimpleNamespace(is_cuda=cuda, dtype=dtype, shape=(3, 2, head_dim))

    assert packing.attention_for(q(cuda=False), 0.0) == "per_sequence"
    assert packing.attention_for(q(cuda=True), 0.0) == "varlen"
    assert packing.attention_for(q(cuda=True, dtype=torch.float16), 0.0) == "varlen"
    assert packing.attention_for(q(cuda=True, dtype=torch.float32), 0.0) == "padded"
    assert packing.attention_for(q(cuda=True), 0.1) == "padded"  # training with attention dropout
    assert packing.attention_for(q(cuda=True, head_dim=12), 0.0) == "padded"
    forced = att.Packing.from_padding_mask(packing.padding_mask, "nested")
    assert forced.attention_for(q(cuda=True), 0.0) == "nested"


def test_masked_strategy_never_packs_and_a_full_batch_is_never_packed(monkeypatch):
    monkeypatch.setattr(att.Packing, "from_padding_mask", None)  # any packing would fail
    model = tiny()
    features(model, batch_of(LENGTHS), "masked")
    tiny(attention="masked")(batch_of(LENGTHS))  # chosen by the config
    for strategy in att.ATTENTION_STRATEGIES:
        features(model, batch_of([5, 5]), strategy)


def strategies_taken(model: RobertaModel) -> list[str]:
    """The strategy each forward of ``model`` over a padded batch resolved (one per forward)."""
    taken: list[str] = []
    packing_for = att.packing_for

    def spy(strategy: str, padding_mask: torch.Tensor) -> att.Packing | None:
        taken.append(strategy)
        return packing_for(strategy, padding_mask)

    with pytest.MonkeyPatch.context() as patch, torch.no_grad():
        patch.setattr("roberta_ext.modeling.encoder.packing_for", spy)
        model(batch_of(LENGTHS))
    return taken


def test_the_strategy_is_each_models_own():
    chosen, other = tiny(attention="nested"), tiny()
    assert strategies_taken(chosen) == ["nested"]
    assert strategies_taken(other) == ["auto"]
    with use_attention(other, "padded"):
        assert strategies_taken(other) == ["padded"]
        assert strategies_taken(chosen) == ["nested"]  # untouched by the other's choice
    assert strategies_taken(other) == ["auto"]
    assert chosen.set_attention("per_sequence") == "nested"
    assert strategies_taken(chosen) == ["per_sequence"]
    assert chosen.cfg.attention == "nested"  # the config (which other models may share) is left alone


def test_set_attention_reaches_every_encoder_of_the_model():
    model = tiny()
    model.add_module("generator", tiny())  # a second encoder inside the model, as ELECTRA's generator
    encoders = [model.encoder.sentence_encoder, model.generator.encoder.sentence_encoder]
    with use_attention(model, "masked"):
        assert [e.attention for e in encoders] == ["masked", "masked"]
    assert [e.attention for e in encoders] == [None, None]
    with pytest.raises(ValueError, match="'flash' is not an attention strategy"):
        model.set_attention("flash")
    assert [e.attention for e in encoders] == [None, None]  # a refused name changes nothing


def test_the_environment_is_the_default_of_a_model_that_has_not_chosen(monkeypatch):
    model, chosen = tiny(), tiny(attention="masked")
    monkeypatch.setenv(att.ATTENTION_ENV, "nested")
    assert att.default_attention() == "nested"
    assert strategies_taken(model) == ["nested"]  # read at the forward: built before it was set
    assert strategies_taken(chosen) == ["masked"]  # the model's own choice wins
    with use_attention(model, "padded"):
        assert strategies_taken(model) == ["padded"]
    monkeypatch.setenv(att.ATTENTION_ENV, "flash")
    with pytest.raises(ValueError, match="ROBERTA_EXT_ATTENTION='flash' is not an attention strategy"):
        model(batch_of(LENGTHS))


def test_unknown_strategies_are_refused_where_they_are_chosen():
    with pytest.raises(ValueError, match="attention='flash' is not an attention strategy"):
        tiny_config(attention="flash")
    with pytest.raises(ValueError, match="'flash' is not an attention strategy"):
        tiny().set_attention("flash")
    with pytest.raises(ValueError, match="'flash' is not an attention strategy"), use_attention(tiny(), "flash"):
        pass


@pytest.mark.skipif(not CUDA, reason="the varlen flash kernel needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("strategy", ["varlen", "nested", "auto"])
def test_cuda_kernels_equal_the_masked_path(monkeypatch, strategy, dtype):
    """On a GPU: the real varlen kernel (and nested tensors' SDPA) against the masked path, at a
    head size flash takes (64), on a batch large enough that ``auto`` packs."""
    calls = []
    kernel = att.varlen_kernel

    def counted():
        calls.append(1)
        return kernel()

    monkeypatch.setattr(att, "varlen_kernel", counted)
    torch.manual_seed(0)
    cfg = tiny_config(encoder_embed_dim=128, encoder_attention_heads=2, encoder_ffn_embed_dim=256)
    model = RobertaModel(cfg).eval().to("cuda", dtype)
    lengths = [64, 1, 9, 64, 33] * 30  # 150 x 64 = 9600 slots: above CUDA_PACKING_MIN_SLOTS
    tokens = batch_of(lengths).cuda()
    real = tokens.ne(PAD)
    packed, _ = features(model, tokens, strategy)
    masked, _ = features(model, tokens, "masked")
    torch.testing.assert_close(packed[real].float(), masked[real].float(), atol=3e-2, rtol=3e-2)
    assert F.cosine_similarity(packed[real].float(), masked[real].float(), dim=-1).min() > 0.999
    if strategy in ("varlen", "auto"):
        assert len(calls) == cfg.encoder_layers  # auto took the varlen kernel in every layer


# ------------------------------------------------------------------- edges a mutation run found


def packed_qkv(lengths: list[int], heads: int = 2, dim: int = 4) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(7)
    return tuple(torch.randn(sum(lengths), heads, dim, generator=generator) for _ in range(3))


def padding_of(lengths: list[int]) -> torch.Tensor:
    return torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]


@pytest.mark.parametrize(
    ("strategy", "window"),
    [
        ("per_sequence", None),
        ("per_sequence", 2),
        ("per_sequence", 1),
        ("padded", None),
        ("padded", 2),
        ("nested", None),
    ],
)
def test_every_packed_strategy_applies_its_attention_dropout(strategy, window):
    """Training's attention dropout reaches the attention call on every path: a plain run, a
    banded one (window 2 on rows of 5 and 8), a blockwise one (window 1: rows of at least 4)."""
    lengths = [5, 8]
    q, k, v = packed_qkv(lengths)
    packing = att.Packing.from_padding_mask(padding_of(lengths), strategy)
    attend = att.PACKED_ATTENTION[strategy]
    without = attend(q, k, v, packing, 0.0, window)
    torch.manual_seed(0)
    dropped = attend(q, k, v, packing, 0.5, window)
    assert not torch.allclose(dropped, without)
    torch.manual_seed(0)
    assert torch.equal(attend(q, k, v, packing, 0.5, window), dropped)  # the seed's masks, not noise


def test_local_attention_applies_its_dropout():
    q, k, v = torch.randn(3, 1, 2, 10, 4, generator=torch.Generator().manual_seed(1)).unbind(0)
    torch.manual_seed(0)
    assert not torch.allclose(att.local_attention(q, k, v, 2, dropout_p=0.5), att.local_attention(q, k, v, 2))


@pytest.mark.parametrize("window", [2, 3])
def test_a_sequence_one_past_the_window_gets_the_band(window):
    """A row of ``window + 2`` tokens is the shortest whose first and last are further apart than
    the window: the per-sequence path must mask that pair (one SDPA call with the band)."""
    lengths = [window + 2, window + 1, window]
    q, k, v = packed_qkv(lengths)
    packing = att.Packing.from_padding_mask(padding_of(lengths), "per_sequence")
    got = att.per_sequence_attention(q, k, v, packing, 0.0, window)
    expected = []
    for run_q, run_k, run_v, length in zip(q.split(lengths), k.split(lengths), v.split(lengths), lengths):
        band = att.window_mask(torch.arange(length), window)
        views = (t.transpose(0, 1)[None] for t in (run_q, run_k, run_v))
        expected.append(F.scaled_dot_product_attention(*views, attn_mask=band)[0].transpose(0, 1))
    torch.testing.assert_close(got, torch.cat(expected))


def test_rows_of_documents_keep_a_packed_strategy_and_take_auto_for_the_others():
    padding = padding_of([6, 4])
    starts = torch.zeros_like(padding)
    starts[:, 0] = True
    starts[0, 3] = True
    for strategy in att.PACKED_STRATEGIES:
        assert att.packing_for(strategy, padding, starts).strategy == strategy
    assert att.packing_for("masked", padding, starts).strategy == "auto"
    assert att.packing_for("auto", padding, starts).strategy == "auto"


def test_a_batch_without_real_tokens_packs_to_nothing():
    packing = att.Packing.from_padding_mask(torch.zeros(0, 5, dtype=torch.bool))
    assert (packing.seq_lens, packing.max_len) == ([], 0)
    all_padding = torch.ones(2, 3, dtype=torch.bool)  # rows of documents without a real token: no run at all
    packing = att.Packing.from_padding_mask(all_padding, document_starts=torch.zeros_like(all_padding))
    assert (packing.seq_lens, packing.max_len) == ([], 0)


def test_the_gpu_thresholds_at_their_edges(monkeypatch):
    """On CUDA (faked: the checks read only ``is_cuda``, the size and the padding share), a batch of
    fewer than CUDA_PACKING_MIN_SLOTS slots is never packed and one of exactly that many is, from
    PACKING_MIN_PADDING's share of padding; varlen takes head sizes up to 256."""

    def mask(slots: int, padding: float, *, cuda: bool = True):
        values = torch.zeros(slots)
        values[: round(padding * slots)] = 1
        return SimpleNamespace(is_cuda=cuda, numel=lambda: slots, float=lambda: values)

    slots = att.CUDA_PACKING_MIN_SLOTS
    assert not att.should_pack(mask(slots - 10, 0.5))
    assert att.should_pack(mask(slots, 0.5)) and att.should_pack(mask(10, 0.5, cuda=False))
    assert att.should_pack(mask(1000, att.PACKING_MIN_PADDING, cuda=False))  # exactly the share: packed
    assert not att.should_pack(mask(1000, att.PACKING_MIN_PADDING - 0.001, cuda=False))
    monkeypatch.setattr(att, "_has_varlen", lambda: True)
    for head_dim, suits in ((256, True), (264, False), (8, True), (12, False)):
        q = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16, shape=(3, 2, head_dim))
        assert att.varlen_suits(q, 0.0) is suits, head_dim


def test_varlen_names_what_it_refuses_in_full():
    with pytest.raises(ValueError) as refused:
        tiny(attention_dropout=0.1, attention="varlen").train()(batch_of([5, 2]))
    assert str(refused.value) == (
        "the varlen attention kernel has no dropout, but attention dropout is 0.1 in training: "
        "use --attention-dropout 0, or another attention strategy"
    )
    model = tiny(attention="varlen").to(torch.bfloat16)
    head_dim = model.cfg.encoder_embed_dim // model.cfg.encoder_attention_heads
    with pytest.raises(ValueError) as refused:
        model(batch_of([5, 2]))
    assert f"; got cpu, torch.bfloat16, head size {head_dim} (" in str(refused.value)
