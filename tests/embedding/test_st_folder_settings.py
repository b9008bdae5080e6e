"""What :func:`read_sentence_transformers` reads from a sentence-transformers folder's JSON files,
on folders written here file by file (no model: it only reads JSON): where the transformer is,
every setting of :class:`SentenceEmbedding` and where it comes from, and the full message of
every refusal. test_sentence_transformers.py checks the same reading end to end against
``SentenceTransformer.encode`` on folders that sentence-transformers saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from roberta_ext.checkpoints import CheckpointError
from roberta_ext.embedding.pooling import POOLING_MODES, SentenceEmbedding
from roberta_ext.embedding.st_folder import (
    LEGACY_POOLING_FLAGS,
    MODULE_TYPES,
    is_sentence_transformers_dir,
    read_sentence_transformers,
)

TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"
NORMALIZE = "sentence_transformers.models.Normalize"
SUPPORTED = "roberta_ext reproduces sentence-transformers' own Transformer, Pooling and Normalize modules only"


def write(path: Path, content: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def entry(idx: int, kind_type: str, path: str = "", name: str | None = None) -> dict[str, Any]:
    return {"idx": idx, "name": str(idx) if name is None else name, "path": path, "type": kind_type}


def st_folder(
    root: Path,
    *,
    pooling: dict[str, Any] | None = None,
    normalize: bool = False,
    transformer_path: str = "",
    modules: list[dict[str, Any]] | None = None,
) -> Path:
    """A folder with modules.json (Transformer at ``transformer_path``, Pooling in 1_Pooling,
    Normalize in 2_Normalize) and the Pooling's config.json."""
    if modules is None:
        modules = [entry(0, TRANSFORMER, transformer_path), entry(1, POOLING, "1_Pooling")]
        if normalize:
            modules.append(entry(2, NORMALIZE, "2_Normalize"))
    write(root / "modules.json", modules)
    write(root / "1_Pooling" / "config.json", {"pooling_mode": "mean"} if pooling is None else pooling)
    return root


def refusal(folder: Path) -> str:
    with pytest.raises(CheckpointError) as caught:
        read_sentence_transformers(folder)
    return str(caught.value)


def test_is_sentence_transformers_dir(tmp_path):
    assert not is_sentence_transformers_dir(tmp_path)
    (tmp_path / "modules.json").mkdir()
    assert not is_sentence_transformers_dir(str(tmp_path))  # a folder of that name is not the file
    (tmp_path / "modules.json").rmdir()
    write(tmp_path / "modules.json", [])
    assert is_sentence_transformers_dir(tmp_path) and is_sentence_transformers_dir(str(tmp_path))


def test_a_minimal_folder_gives_the_defaults(tmp_path):
    folder = st_folder(tmp_path)
    transformer_dir, settings = read_sentence_transformers(str(folder))
    assert transformer_dir == folder
    assert settings == SentenceEmbedding()
    assert settings.include_prompt is True and settings.do_lower_case is False and settings.normalize is False


def test_every_setting_from_its_file(tmp_path):
    folder = st_folder(
        tmp_path,
        pooling={"pooling_mode": ["cls", "max"], "include_prompt": False},
        normalize=True,
        transformer_path="0_T",
    )
    write(folder / "0_T" / "sentence_bert_config.json", {"max_seq_length": 128.0, "do_lower_case": 1})
    write(folder / "2_Normalize" / "config.json", {"module_input_name": "sentence_embedding"})
    write(
        folder / "config_sentence_transformers.json",
        {"prompts": {"query": "query: ", "n": 7}, "default_prompt_name": "query", "similarity_fn_name": "dot"},
    )
    transformer_dir, settings = read_sentence_transformers(folder)
    assert transformer_dir == folder / "0_T"
    assert settings == SentenceEmbedding(
        pooling=("cls", "max"),
        normalize=True,
        include_prompt=False,
        max_length=128,
        do_lower_case=True,
        prompts={"query": "query: ", "n": "7"},
        default_prompt_name="query",
        similarity="dot",
    )
    assert type(settings.max_length) is int and type(settings.do_lower_case) is bool
    assert type(settings.include_prompt) is bool


def test_modules_are_taken_in_idx_order(tmp_path):
    modules = [entry(2, NORMALIZE, "2_Normalize"), entry(1, POOLING, "1_Pooling"), entry(0, TRANSFORMER, "0_T")]
    folder = st_folder(tmp_path, modules=modules)
    transformer_dir, settings = read_sentence_transformers(folder)
    assert transformer_dir == folder / "0_T" and settings.normalize
    # idx as a string, and a missing idx (0)
    modules = [{"type": POOLING, "idx": "1", "path": "1_Pooling"}, {"type": TRANSFORMER, "path": "0_T"}]
    assert read_sentence_transformers(st_folder(tmp_path / "b", modules=modules))[0] == tmp_path / "b" / "0_T"


def test_modules_without_a_path_are_at_the_root(tmp_path):
    folder = tmp_path
    write(folder / "modules.json", [{"idx": 0, "type": TRANSFORMER}, {"idx": 1, "type": POOLING}])
    write(folder / "config.json", {"pooling_mode": "max", "hidden_size": 8})  # the Pooling's and the model's
    transformer_dir, settings = read_sentence_transformers(folder)
    assert transformer_dir == folder and settings.pooling == ("max",)


@pytest.mark.parametrize("type_name", sorted(MODULE_TYPES))
def test_every_known_type_is_read_as_its_kind(tmp_path, type_name):
    kind = MODULE_TYPES[type_name]
    types = {"Transformer": TRANSFORMER, "Pooling": POOLING, "Normalize": NORMALIZE, kind: type_name}
    modules = [entry(0, types["Transformer"]), entry(1, types["Pooling"], "1_Pooling"), entry(2, types["Normalize"])]
    _, settings = read_sentence_transformers(st_folder(tmp_path, modules=modules))
    assert settings.normalize


@pytest.mark.parametrize(
    ("module", "shown"),
    [
        (
            {"idx": 1, "name": "dense", "type": "sentence_transformers.models.Dense"},
            "'dense' has type 'sentence_transformers.models.Dense'",
        ),
        ({"idx": 1, "type": "sentence_transformers.models.Dense"}, "1 has type 'sentence_transformers.models.Dense'"),
        ({"idx": 1, "name": "x"}, "'x' has type None"),
        ({"idx": 1, "name": "x", "type": ["Pooling"]}, "'x' has type ['Pooling']"),
        ({"name": "x", "type": "Pooling"}, "'x' has type 'Pooling', not sentence-transformers' own Pooling"),
        ({}, "None has type None"),
    ],
    ids=["named", "by-idx", "no-type", "a-list", "bare-name", "nothing"],
)
def test_an_unknown_module_is_refused_by_name_and_type(tmp_path, module, shown):
    folder = st_folder(tmp_path, modules=[entry(0, TRANSFORMER), module])
    expected = f"{str(folder / 'modules.json')!r}: module {shown}"
    if "not sentence-transformers' own" in shown:
        expected += (
            " ('sentence_transformers.models.Pooling'): sentence-transformers would import and run the class it names"
        )
    assert refusal(folder) == f"{expected}; {SUPPORTED}"


@pytest.mark.parametrize("kind", ["Transformer", "Pooling", "Normalize"])
def test_another_packages_module_of_a_known_name_is_refused_as_such(tmp_path, kind):
    types = {"Transformer": TRANSFORMER, "Pooling": POOLING, "Normalize": NORMALIZE, kind: f"evilpkg.models.{kind}"}
    modules = [entry(0, types["Transformer"]), entry(1, types["Pooling"], "1_Pooling"), entry(2, types["Normalize"])]
    folder = st_folder(tmp_path, modules=modules)
    index = ("Transformer", "Pooling", "Normalize").index(kind)
    assert refusal(folder) == (
        f"{str(folder / 'modules.json')!r}: module '{index}' has type 'evilpkg.models.{kind}', not "
        f"sentence-transformers' own {kind} ('sentence_transformers.models.{kind}'): sentence-transformers would "
        f"import and run the class it names; {SUPPORTED}"
    )


@pytest.mark.parametrize(
    "types",
    [
        [TRANSFORMER],
        [POOLING, TRANSFORMER],
        [TRANSFORMER, NORMALIZE],
        [TRANSFORMER, POOLING, NORMALIZE, NORMALIZE],
        [TRANSFORMER, POOLING, POOLING],
        [],
    ],
)
def test_modules_in_another_arrangement_are_refused(tmp_path, types):
    folder = st_folder(tmp_path, modules=[entry(i, t, "1_Pooling") for i, t in enumerate(types)])
    kinds = [MODULE_TYPES[t] for t in types]
    assert refusal(folder) == (
        f"{str(folder / 'modules.json')!r}: the modules are {kinds}; roberta_ext reproduces a Transformer followed "
        "by a Pooling (and optionally a Normalize)"
    )


@pytest.mark.parametrize("modules", [{"0": TRANSFORMER}, [entry(0, TRANSFORMER), "1_Pooling"], '"modules"'])
def test_modules_json_that_is_not_a_list_of_modules(tmp_path, modules):
    folder = st_folder(tmp_path, modules=modules)
    assert refusal(folder) == f"{str(folder / 'modules.json')!r}: expected a list of modules"


def test_missing_and_broken_files_are_named(tmp_path):
    assert refusal(tmp_path) == f"{str(tmp_path / 'modules.json')!r} is missing"
    write(tmp_path / "modules.json", "[{")
    message = refusal(tmp_path)
    assert message.startswith(f"{str(tmp_path / 'modules.json')!r} is not valid JSON (")
    assert message == f"{str(tmp_path / 'modules.json')!r} is not valid JSON ({_json_error('[{')})"
    folder = st_folder(tmp_path / "b")
    (folder / "1_Pooling" / "config.json").unlink()
    assert refusal(folder) == f"{str(folder / '1_Pooling' / 'config.json')!r} is missing"
    st_folder(folder)
    write(folder / "sentence_bert_config.json", "{max_seq_length: 3}")
    assert refusal(folder) == (
        f"{str(folder / 'sentence_bert_config.json')!r} is not valid JSON ({_json_error('{max_seq_length: 3}')})"
    )
    (folder / "sentence_bert_config.json").write_bytes(b"\xff{}")
    assert refusal(folder).startswith(f"{str(folder / 'sentence_bert_config.json')!r} is not valid JSON ('utf-8'")


def _json_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as error:
        return str(error)
    raise AssertionError(text)


def test_a_normalize_of_something_else_is_refused(tmp_path):
    folder = st_folder(tmp_path, normalize=True)
    assert read_sentence_transformers(folder)[1].normalize  # no config.json: the sentence embedding
    write(folder / "2_Normalize" / "config.json", {})
    assert read_sentence_transformers(folder)[1].normalize
    write(folder / "2_Normalize" / "config.json", {"module_input_name": "token_embeddings"})
    assert refusal(folder) == (
        f"{str(folder / '2_Normalize')!r}: a Normalize of 'token_embeddings' is not supported (only of the "
        "sentence embedding)"
    )


def test_a_normalize_without_a_path_is_read_at_the_root(tmp_path):
    modules = [entry(0, TRANSFORMER, "0_T"), entry(1, POOLING, "1_Pooling"), {"idx": 2, "type": NORMALIZE}]
    folder = st_folder(tmp_path, modules=modules)
    write(folder / "config.json", {"module_input_name": "token_embeddings"})
    assert refusal(folder) == (
        f"{str(folder)!r}: a Normalize of 'token_embeddings' is not supported (only of the sentence embedding)"
    )


@pytest.mark.parametrize("flag", sorted(LEGACY_POOLING_FLAGS))
def test_each_legacy_pooling_flag_alone(tmp_path, flag):
    flags = {other: other == flag for other in LEGACY_POOLING_FLAGS}
    _, settings = read_sentence_transformers(st_folder(tmp_path, pooling=flags))
    assert settings.pooling == (LEGACY_POOLING_FLAGS[flag],)


def test_legacy_pooling_flags_together_in_sentence_transformers_order(tmp_path):
    # the order of sentence-transformers' Pooling.get_pooling_mode_str and forward
    order = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
    assert tuple(LEGACY_POOLING_FLAGS.values()) == order
    every = dict.fromkeys(reversed(list(LEGACY_POOLING_FLAGS)), True)
    assert read_sentence_transformers(st_folder(tmp_path, pooling=every))[1].pooling == order
    none = dict.fromkeys(LEGACY_POOLING_FLAGS, False)
    assert read_sentence_transformers(st_folder(tmp_path / "b", pooling=none))[1].pooling == ("mean",)
    assert read_sentence_transformers(st_folder(tmp_path / "c", pooling={}))[1].pooling == ("mean",)
    mode_wins = {"pooling_mode": "cls", "pooling_mode_max_tokens": True}
    assert read_sentence_transformers(st_folder(tmp_path / "d", pooling=mode_wins))[1].pooling == ("cls",)


@pytest.mark.parametrize(
    ("modes", "problem"),
    [
        ("sum", f"unknown pooling mode 'sum'; supported: {', '.join(POOLING_MODES)}"),
        (["mean", "Mean"], f"unknown pooling mode 'Mean'; supported: {', '.join(POOLING_MODES)}"),
        ([], "no pooling mode given"),
    ],
)
def test_an_unknown_pooling_mode_is_refused_naming_the_config(tmp_path, modes, problem):
    folder = st_folder(tmp_path, pooling={"pooling_mode": modes})
    assert refusal(folder) == f"{folder / '1_Pooling' / 'config.json'}: {problem}"


def lengths_folder(root: Path, tokenizer: Any = None, positions: Any = None) -> Path:
    folder = st_folder(root)
    if tokenizer is not None:
        write(folder / "tokenizer_config.json", {"model_max_length": tokenizer})
    if positions is not None:
        write(folder / "config.json", {"max_position_embeddings": positions})
    return folder


@pytest.mark.parametrize(
    ("tokenizer", "positions", "expected"),
    [
        (None, None, None),
        (256, None, 256),
        (None, 514, 514),
        (512, 514, 512),
        (600, 514, 514),
        (int(1e30), 514, 514),  # transformers' VERY_LARGE_INTEGER: no length of its own
        (1e30, None, None),
        ((1 << 40) - 1, None, (1 << 40) - 1),
        (1 << 40, None, None),
        (1, 514, 1),
        (0, 514, 514),
        (-5, None, None),
        (128.0, None, 128),
        ("512", 514, 514),
    ],
)
def test_max_length_without_sentence_bert_config(tmp_path, tokenizer, positions, expected):
    _, settings = read_sentence_transformers(lengths_folder(tmp_path, tokenizer, positions))
    assert settings.max_length == expected
    assert expected is None or type(settings.max_length) is int


def test_max_seq_length_wins_over_the_tokenizers_length(tmp_path):
    folder = lengths_folder(tmp_path, 64, 514)
    write(folder / "sentence_bert_config.json", {"max_seq_length": 1000})
    assert read_sentence_transformers(folder)[1].max_length == 1000
    write(folder / "sentence_bert_config.json", {"max_seq_length": None, "do_lower_case": True})
    _, settings = read_sentence_transformers(folder)
    assert settings.max_length == 64 and settings.do_lower_case


@pytest.mark.parametrize(("given", "similarity"), [(None, "cosine"), ("", "cosine"), ("euclidean", "euclidean")])
def test_similarity_defaults_to_cosine(tmp_path, given, similarity):
    folder = st_folder(tmp_path)
    write(folder / "config_sentence_transformers.json", {"similarity_fn_name": given})
    assert read_sentence_transformers(folder)[1].similarity == similarity


def test_an_unknown_similarity_is_refused(tmp_path):
    folder = st_folder(tmp_path)
    write(folder / "config_sentence_transformers.json", {"similarity_fn_name": "jaccard"})
    assert refusal(folder) == (
        f"{str(folder / 'config_sentence_transformers.json')!r}: similarity_fn_name 'jaccard' is not supported; "
        "supported: cosine, dot, euclidean, manhattan"
    )


def test_a_default_prompt_must_be_one_of_the_prompts(tmp_path):
    folder = st_folder(tmp_path)
    write(
        folder / "config_sentence_transformers.json", {"prompts": {"q": "q: ", "p": "p: "}, "default_prompt_name": "x"}
    )
    assert refusal(folder) == (
        f"{str(folder / 'config_sentence_transformers.json')!r}: default_prompt_name 'x' is not one of its "
        "prompts ['p', 'q']"
    )
    write(folder / "config_sentence_transformers.json", {"prompts": None, "default_prompt_name": "x"})
    assert refusal(folder).endswith("default_prompt_name 'x' is not one of its prompts []")
    write(folder / "config_sentence_transformers.json", {"prompts": None, "default_prompt_name": None})
    _, settings = read_sentence_transformers(folder)
    assert settings.prompts == {} and settings.default_prompt_name is None


@pytest.mark.parametrize("include_prompt", [False, 0, None, True, 1])
def test_include_prompt(tmp_path, include_prompt):
    folder = st_folder(tmp_path, pooling={"pooling_mode": "mean", "include_prompt": include_prompt})
    assert read_sentence_transformers(folder)[1].include_prompt is bool(include_prompt)


@pytest.mark.parametrize(
    ("pooling", "hidden", "refused"),
    [
        ({"embedding_dimension": 48}, 32, 48),
        ({"word_embedding_dimension": 48}, 32, 48),
        ({"embedding_dimension": 32, "word_embedding_dimension": 48}, 32, None),
        ({"embedding_dimension": 48, "word_embedding_dimension": 32}, 32, 48),
        ({"embedding_dimension": "32"}, 32, None),
        ({"embedding_dimension": 32}, "32", None),
        ({}, 32, None),
        ({"embedding_dimension": 48}, None, None),
    ],
)
def test_the_poolings_width_must_be_the_models(tmp_path, pooling, hidden, refused):
    folder = st_folder(tmp_path, pooling={"pooling_mode": "mean", **pooling}, transformer_path="0_T")
    write(folder / "0_T" / "config.json", {} if hidden is None else {"hidden_size": hidden})
    if refused is None:
        assert read_sentence_transformers(folder)[0] == folder / "0_T"
    else:
        assert refusal(folder) == (
            f"{str(folder / '1_Pooling' / 'config.json')!r}: the pooling takes {refused}-wide token embeddings, but "
            f"the model in {str(folder / '0_T')!r} is {hidden} wide"
        )


def test_no_model_config_no_width_check(tmp_path):
    folder = st_folder(tmp_path, pooling={"pooling_mode": "mean", "embedding_dimension": 48}, transformer_path="0_T")
    assert read_sentence_transformers(folder)[0] == folder / "0_T"
