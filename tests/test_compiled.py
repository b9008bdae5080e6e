"""The compiled inference path (roberta_ext/inference/compiled.py): inputs padded up to buckets, outputs
sliced back, equal to the eager path; at most one compilation per bucket. Compiled here with
torch.compile's ``eager`` backend behind a counting wrapper (dynamo traces and guards exactly as
with inductor, without building kernels, which would take minutes on this CPU)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

import roberta_ext
from roberta_ext.families import preset
from roberta_ext.inference.compiled import (
    BucketedForward,
    bucket,
    compile_model,
    has_cpp_compiler,
    own_code,
    uncompile_model,
)
from roberta_ext.modeling import RobertaModel
from tests.test_hub import make_model_dir

PAD = 1
LENGTH_BUCKETS = (8, 16, 32)
BATCH_BUCKETS = (2, 4)


class CountingBackend:
    """A ``torch.compile`` backend that runs the captured graph eagerly and counts captures."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs: list, **options) -> object:
        self.graphs += 1
        return graph_module.forward


def tiny(family: str = "roberta", **overrides) -> RobertaModel:
    torch.manual_seed(0)
    name = "tiny" if family == "roberta" else f"{family}-tiny"
    return RobertaModel(preset(name, **overrides)).eval()


def tokens_of(lengths: list[int], *, width: int | None = None, left: bool = False, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), width or max(lengths)), PAD)
    for i, n in enumerate(lengths):
        row = torch.randint(4, 60, (n,), generator=generator)
        row[0] = 0
        if left:
            tokens[i, tokens.size(1) - n :] = row
        else:
            tokens[i, :n] = row
    return tokens


def compiled(model: RobertaModel, backend: CountingBackend) -> BucketedForward:
    return compile_model(model, backend=backend, length_buckets=LENGTH_BUCKETS, batch_buckets=BATCH_BUCKETS)


def both(model: RobertaModel, tokens: torch.Tensor, **kwargs):
    """(eager, compiled) outputs of ``model`` on ``tokens``."""
    encoder = model.encoder.sentence_encoder
    path = encoder.inference_forward
    encoder.inference_forward = None
    with torch.no_grad():
        eager = model(tokens, features_only=True, **kwargs)
    encoder.inference_forward = path
    return eager, model(tokens, features_only=True, **kwargs)


SHAPES = [
    ([5], {}),
    ([8, 3], {}),
    ([1, 16, 9], {}),
    ([12, 12, 12, 12], {}),
    ([7, 2, 30], {"left": True}),
    ([4, 4, 4, 4, 4, 4, 4, 4, 4], {}),  # more rows than the largest batch bucket: chunks of 4
    ([20], {"width": 25}),  # a row that is all real tokens up to 20, then padding the user gave
]


@pytest.mark.parametrize(("lengths", "options"), SHAPES)
def test_bucketed_outputs_equal_the_eager_path(lengths, options):
    model = tiny()
    path = compiled(model, CountingBackend())
    tokens = tokens_of(lengths, **options)
    real = tokens.ne(PAD)
    (eager, eager_extra), (out, extra) = both(model, tokens, return_all_hiddens=True)
    assert out.shape == eager.shape and len(extra["inner_states"]) == len(eager_extra["inner_states"])
    torch.testing.assert_close(out[real], eager[real], atol=1e-5, rtol=1e-5)
    for h, e in zip(extra["inner_states"], eager_extra["inner_states"], strict=True):
        assert h.shape == e.shape
        torch.testing.assert_close(h[real], e[real], atol=1e-5, rtol=1e-5)
    assert path.calls  # the compiled path served it
    assert not out.requires_grad


@pytest.mark.parametrize("family", ["bert", "albert"])
def test_segments_and_absolute_positions(family):
    model = tiny(family)
    compiled(model, CountingBackend())
    tokens = tokens_of([6, 11, 3])
    segments = (torch.arange(tokens.size(1)) >= 4).long().expand_as(tokens) * tokens.ne(PAD)
    real = tokens.ne(PAD)
    (eager, _), (out, _) = both(model, tokens, segment_labels=segments)
    torch.testing.assert_close(out[real], eager[real], atol=1e-5, rtol=1e-5)


def test_compilations_are_bounded_by_the_buckets():
    model = tiny()
    backend = CountingBackend()
    path = compiled(model, backend)
    generator = torch.Generator().manual_seed(1)
    used = set()
    for _ in range(25):
        batch = int(torch.randint(1, 5, (1,), generator=generator))
        lengths = torch.randint(1, 33, (batch,), generator=generator).tolist()
        tokens = tokens_of(lengths, seed=len(used))
        used.add((bucket(batch, BATCH_BUCKETS), bucket(max(lengths), LENGTH_BUCKETS)))
        with torch.no_grad():
            model(tokens, features_only=True)
    assert backend.graphs == len(used) <= len(LENGTH_BUCKETS) * len(BATCH_BUCKETS)
    assert {key[:2] for key in path.calls} == used
    assert sum(path.calls.values()) == 25 and set(path.compile_seconds) == set(path.calls)
    with torch.no_grad():  # a shape seen before: no new graph
        model(tokens_of([3, 3]), features_only=True)
    assert backend.graphs == len(used)


def test_more_buckets_than_dynamos_default_recompile_limit():
    """dynamo stops compiling a function after 8 shapes by default (and runs it eagerly after
    that, silently): every one of 12 buckets is still compiled and served."""
    model = tiny()
    backend = CountingBackend()
    compile_model(model, backend=backend, length_buckets=(8, 16, 32, 64), batch_buckets=(1, 2, 4))
    with torch.no_grad():
        for batch in (1, 2, 4):
            for length in (8, 16, 32, 64):
                model(tokens_of([length] * batch), features_only=True)
    assert backend.graphs == 12


def test_every_compiled_model_has_its_own_cache():
    """dynamo counts recompilations per code object: nine models compiled in one process (one
    bucket each, a limit of 8 graphs per path) would share ``forward_masked``'s and fail."""
    backend = CountingBackend()
    for seed in range(9):
        torch.manual_seed(seed)
        model = RobertaModel(preset("tiny")).eval()
        compile_model(model, backend=backend, length_buckets=(8,), batch_buckets=(2,))
        with torch.no_grad():
            model(tokens_of([5, 3]), features_only=True)
    assert backend.graphs == 9


def test_added_rows_and_positions_do_not_change_real_outputs():
    """A row's features are the same alone (bucket 2 x 8) and among others in a larger bucket
    (4 x 32), whatever fills the rest."""
    model = tiny()
    compiled(model, CountingBackend())
    row = tokens_of([6], seed=3)
    others = tokens_of([6, 25, 2], seed=4)
    with torch.no_grad():
        alone = model(row, features_only=True)[0][0]
        among = model(torch.cat([row, others[:, :6]]), features_only=True)[0][0]
        wide = model(torch.cat([torch.cat([row, torch.full((1, 19), PAD)], 1), others]), features_only=True)[0][0]
    torch.testing.assert_close(among, alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(wide[:6], alone, atol=1e-5, rtol=1e-5)


def test_training_mode_runs_eagerly_with_gradients():
    model = tiny()
    path = compiled(model, CountingBackend())
    model.train()
    out, _ = model(tokens_of([5, 3]), features_only=True)
    out.sum().backward()
    assert not path.calls
    assert model.encoder.sentence_encoder.layers[0].fc1.weight.grad is not None


def test_uncompile_and_bad_arguments():
    model = tiny()
    compiled(model, CountingBackend())
    uncompile_model(model)
    assert model.encoder.sentence_encoder.inference_forward is None
    assert model.state_dict().keys() == tiny().state_dict().keys()
    with pytest.raises(ValueError, match="exceeds the model's 64 positions"):
        compile_model(model, backend="eager", length_buckets=[128])
    with pytest.raises(TypeError, match="compile_model takes a hub"):
        compile_model(torch.nn.Linear(2, 2))


def test_inductor_without_a_cpp_compiler_says_so(monkeypatch):
    import roberta_ext.inference.compiled as compiled_module

    monkeypatch.setattr(compiled_module, "has_cpp_compiler", lambda: False)
    model = tiny()
    compile_model(model)  # inductor, the default
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler was found"), torch.no_grad():
        model(tokens_of([3]), features_only=True)


def test_from_pretrained_compile_serves_the_hub(tmp_path, bpe_files):
    model_dir = make_model_dir(tmp_path / "model", bpe_files)
    eager = roberta_ext.from_pretrained(str(model_dir))
    hub = roberta_ext.from_pretrained(str(model_dir), compile=True)
    path = hub.model.encoder.sentence_encoder.inference_forward
    assert isinstance(path, BucketedForward) and path.backend == "inductor" and path.mode_for(hub.device) is None
    path.backend = CountingBackend()  # not compiled yet: compile lazily, without building C++ kernels
    tokens, _ = hub.encode_batch(["Hello world!", "A longer sentence, with a few more tokens in it."])
    real = tokens.ne(hub.dictionary.pad())
    torch.testing.assert_close(hub.extract_features(tokens)[real], eager.extract_features(tokens)[real].detach())
    assert path.backend.graphs == 1
    with pytest.raises(ValueError, match="do not combine"):
        roberta_ext.from_pretrained(str(model_dir), compile=True, dtype="int8")


def fake_encoder(padding_idx: int = PAD, vocab: int = 100, positions: int = 64) -> SimpleNamespace:
    """What :class:`BucketedForward` reads of an encoder before it runs one."""
    return SimpleNamespace(
        padding_idx=padding_idx, embed_tokens=SimpleNamespace(num_embeddings=vocab), max_positions=lambda: positions
    )


@pytest.mark.parametrize("name", ["g++", "clang++", "c++"])
def test_a_cpp_compiler_is_found_by_any_of_its_names_on_the_path(tmp_path, monkeypatch, name):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert not has_cpp_compiler()  # an empty folder
    (tmp_path / name).write_text("#!/bin/sh\n")
    (tmp_path / name).chmod(0o755)
    assert has_cpp_compiler()


def test_a_cpp_compiler_named_by_cxx_is_found(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    compiler = tmp_path / "my-cxx"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    assert has_cpp_compiler()
    monkeypatch.setenv("CXX", "")
    assert not has_cpp_compiler()


def test_defaults_mode_and_the_filler_token():
    path = BucketedForward(fake_encoder())
    assert (path.backend, path.mode, path.filler) == ("inductor", None, PAD + 1)
    assert path.length_buckets == (16, 32, 64) and path.batch_buckets == (1, 2, 4, 8, 16, 32, 64)
    assert path.mode_for(torch.device("cpu")) is None
    assert path.mode_for(torch.device("cuda")) == "reduce-overhead"  # CUDA graphs on a GPU
    given = BucketedForward(fake_encoder(), mode="max-autotune-no-cudagraphs")
    assert given.mode_for(torch.device("cuda")) == given.mode_for(torch.device("cpu")) == "max-autotune-no-cudagraphs"
    # the filler of the added rows is a real token next to the padding id, inside the vocabulary
    assert BucketedForward(fake_encoder(padding_idx=98)).filler == 99
    assert BucketedForward(fake_encoder(padding_idx=99)).filler == 98


@pytest.mark.parametrize(("lengths", "batches"), [((0, 8), (1, 2)), ((8, 16), (0, 2)), ((-8, 16), (1,))])
def test_buckets_must_be_positive(lengths, batches):
    expected = f"buckets must be positive: lengths {tuple(sorted(lengths))}, batches {tuple(sorted(batches))}"
    with pytest.raises(ValueError) as error:
        BucketedForward(fake_encoder(), length_buckets=lengths, batch_buckets=batches)
    assert str(error.value) == expected
    BucketedForward(fake_encoder(), length_buckets=(1, 8), batch_buckets=(1,))


def test_torch_compile_is_asked_for_one_static_graph_per_shape(monkeypatch):
    import roberta_ext.inference.compiled as compiled_module

    asked = []
    monkeypatch.setattr(compiled_module.torch, "compile", lambda function, **options: asked.append(options) or function)
    monkeypatch.setattr(compiled_module, "has_cpp_compiler", lambda: True)
    model = tiny()
    for mode in (None, "max-autotune"):
        path = compile_model(model, mode=mode)
        assert path.mode == mode
        path.compiled(torch.device("cpu"))
        path.compiled(torch.device("cpu"))  # once per device
    assert asked == [
        {"backend": "inductor", "mode": None, "fullgraph": True, "dynamic": False},
        {"backend": "inductor", "mode": "max-autotune", "fullgraph": True, "dynamic": False},
    ]


def test_only_inductor_on_the_cpu_needs_a_cpp_compiler(monkeypatch):
    import roberta_ext.inference.compiled as compiled_module

    monkeypatch.setattr(compiled_module, "has_cpp_compiler", lambda: False)
    model = tiny()
    compiled(model, CountingBackend())  # another backend compiles without one
    with torch.no_grad():
        model(tokens_of([3]), features_only=True)
    path = compile_model(model)
    with pytest.raises(RuntimeError) as error:
        path.compiled(torch.device("cpu"))
    assert str(error.value) == (
        "compiled inference on the CPU: torch.compile's inductor backend builds C++ kernels, and no C++ "
        "compiler was found (looked for $CXX, g++, clang++, c++ on the PATH). Install one (apt-get "
        "install g++), or compile with backend='aot_eager' (no speed-up), or load without compile=True"
    )
    monkeypatch.setattr(compiled_module, "has_cpp_compiler", lambda: True)
    assert callable(compile_model(model).compiled(torch.device("cpu")))  # built lazily: nothing compiled yet


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_longer_than_every_bucket_runs_eagerly_with_everything_passed_on(family):
    model = tiny(family)
    path = compiled(model, CountingBackend())
    tokens = tokens_of([40, 33])  # past the largest length bucket, 32
    segments = (torch.arange(tokens.size(1)) >= 20).long().expand_as(tokens) * tokens.ne(PAD)
    kwargs = {"segment_labels": segments} if family == "bert" else {}
    (eager, eager_extra), (out, extra) = both(model, tokens, return_all_hiddens=True, **kwargs)
    assert not path.calls
    torch.testing.assert_close(out, eager, atol=0, rtol=0)
    for h, e in zip(extra["inner_states"], eager_extra["inner_states"], strict=True):
        torch.testing.assert_close(h, e, atol=0, rtol=0)
    with torch.no_grad():  # called directly: without hidden states unless asked
        features, hiddens = path(tokens, segment_labels=segments if family == "bert" else None)
        _, short_hiddens = path(tokens[:, :20])
    assert hiddens == [] and short_hiddens == []
    torch.testing.assert_close(features, eager, atol=0, rtol=0)


def test_chunks_of_the_largest_batch_bucket_keep_each_rows_segments():
    model = tiny("bert")
    path = compiled(model, CountingBackend())
    tokens = tokens_of([6, 9, 4, 12, 7, 3, 10, 5, 8], seed=2)  # 9 rows: chunks of 4, 4 and 1
    segments = torch.stack([(torch.arange(tokens.size(1)) >= i % 5 + 1).long() for i in range(9)]) * tokens.ne(PAD)
    real = tokens.ne(PAD)
    (eager, _), (out, _) = both(model, tokens, segment_labels=segments)
    assert sum(path.calls.values()) == 3
    torch.testing.assert_close(out[real], eager[real], atol=1e-5, rtol=1e-5)


def test_cuda_graph_steps_are_marked_on_a_gpu_only(monkeypatch):
    """On the CPU the compiled outputs are returned as they are, whatever the mode: CUDA graphs'
    step marks and output copies are for a GPU."""
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    model = tiny()
    path = compile_model(model, backend=CountingBackend(), mode="reduce-overhead", length_buckets=LENGTH_BUCKETS)
    start = time.perf_counter()
    with torch.no_grad():
        model(tokens_of([5, 3]), features_only=True)
    elapsed = time.perf_counter() - start
    assert marks == []
    ((signature, seconds),) = path.compile_seconds.items()
    assert signature == (2, 8, False, False, "cpu") and 0 < seconds <= elapsed


def test_own_code_keeps_defaults_keyword_defaults_closure_and_names():
    offset = 100

    class Box:
        def get(self, x=1, *, y=2):
            return offset + x + y

    box = Box()
    copied = own_code(box.get)
    assert copied() == 103 and copied(10, y=20) == 130
    assert copied.__func__.__code__ is not Box.get.__code__
    assert (copied.__name__, copied.__qualname__) == ("get", Box.get.__qualname__)
    assert copied.__self__ is box


def test_compile_model_names_what_it_cannot_compile():
    with pytest.raises(TypeError) as error:
        compile_model(torch.nn.Linear(2, 2))
    assert str(error.value) == "compile_model takes a hub, an EncoderModel or a TransformerEncoder, not Linear"
