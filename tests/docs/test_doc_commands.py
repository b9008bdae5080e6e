"""Every shell command in docs/ runs, page by page, as a reader following the page would run it.

A page's ``sh`` and ``bash`` blocks run in page order in one fresh temporary folder, each with
``bash -euo pipefail``, so later blocks find the files earlier ones made. The environment is
what docs/pretraining.md's first block sets up: ``REPO`` is this checkout (the test also puts
it in place of that block's ``/path/to/roberta_ext``) and ``PATH`` starts with this Python's
``bin`` folder (``roberta-ext``, ``fairseq-preprocess``, ``fairseq-train``). ``PYTHONPATH`` is
unset, as that page says it need not be set, and the hub's downloads are off.

A block that is not run says why in its first line, ``# not run: <reason>`` (a GPU-sized
training, a download, ``make``); a block without that line is run, so a page cannot hold a
command that is neither. Where a skipped block makes what later blocks need, or is a command
worth checking, the test runs a stand-in (:data:`STAND_INS`): the page's own command with
small-size options appended (fairseq's argparse keeps the last of a repeated option), so its
other options are still parsed and used. What a reader brings (a corpus, a vocabulary, CoNLL
or QA data) is made up small by the test (:data:`READER_BRINGS`); pages that continue from
docs/pretraining.md start with what its run made (:data:`FROM_PRETRAINING`), and pages that
continue from docs/fine-tuning.md with what that page's run made (:data:`FROM_FINE_TUNING`).

Checked: every block exits 0; a ``fairseq-train`` run in the foreground logs ``done training``;
no training a block runs in the foreground resumes a checkpoint an earlier block left (each
needs a save dir of its own: :data:`RESUMED`); the files a page says it writes exist
(:data:`PROMISES`). docs/pretraining.md's small run
(``--sample-break-mode complete``, 64 positions, whole-word masking), which once crashed with an
IndexError after 20-40 updates, trains its 60 updates on 3,000 English sentences.

About 2 minutes on 2 cores: every training is a few updates of a 2-layer, 64-wide model.
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import forkserver
from tests.conftest import REPO
from tests.docs.markdown import Block, code_blocks
from tests.peers import needs

DOCS = REPO / "docs"
SHELL = ("sh", "bash")
BIN = Path(sys.executable).parent
NOT_RUN = re.compile(r"# not run: (?P<reason>\S.*)")
BLOCK_TIMEOUT_S = 300


def shell_blocks(page: str) -> list[Block]:
    return code_blocks(DOCS / page, SHELL)


def not_run_reason(block: Block) -> str | None:
    """The reason given by a ``# not run: <reason>`` first line, or None."""
    match = NOT_RUN.fullmatch(block.text.split("\n", 1)[0].strip())
    return match["reason"] if match else None


# ------------------------------------------------------------------ stand-ins for skipped blocks

SMALL_MODEL = (
    "--encoder-layers 2 --encoder-embed-dim 64 --encoder-ffn-embed-dim 128 --encoder-attention-heads 4 "
    "--max-positions 64"
)
BRIEF_ON_CPU = "--batch-size 8 --update-freq 1 --max-update 5 --cpu --num-workers 0"
PRETRAIN_SMALL = f"{SMALL_MODEL} --tokens-per-sample 64 {BRIEF_ON_CPU}"
FINETUNE_SMALL = f"{SMALL_MODEL} {BRIEF_ON_CPU}"  # the fine-tuning tasks have no --tokens-per-sample


@dataclass(frozen=True)
class StandIn:
    """What runs in place of one block marked ``# not run``: the shell commands ``prepare``, then
    the block's command without the options ``drop`` and with ``append`` added at its end."""

    page: str
    key: str  # a string in that block and in no other block of the page
    append: str
    drop: tuple[str, ...] = ()
    prepare: str = ""

    def script(self, block: Block) -> str:
        command = block.text.rstrip()
        for option in self.drop:
            command, found = re.subn(rf"(?<=\s){re.escape(option)}(?=\s|$)", "", command)
            assert found == 1, f"{block.where}: {option} is not in the block once"
        return f"{self.prepare}\n{command} \\\n    {self.append}\n"


STAND_INS = (
    # RoBERTa base's recipe, small. fairseq's fp16 optimizer needs CUDA, so no --fp16 (the page
    # says: on GPUs, drop --cpu and add --fp16). It saves to its own checkpoints-base/, so that
    # checkpoints/ stays the page's small run, which the later blocks and pages continue from.
    StandIn("pretraining.md", "--total-num-update 125000", drop=("--fp16",), append=PRETRAIN_SMALL),
    # fairseq's pretraining tutorial through hydra's multirun (-m), small, with the save dir the
    # page says to add beside step 5's run.
    StandIn(
        "pretraining.md",
        "fairseq-hydra-train -m",
        append=(
            "checkpoint.save_dir=checkpoints-base-hydra common.fp16=false common.cpu=true dataset.num_workers=0 "
            "dataset.batch_size=8 'optimization.update_freq=[1]' optimization.max_update=3 "
            "task.tokens_per_sample=64 dataset.skip_invalid_size_inputs_valid_test=true model.encoder_layers=2 "
            "model.encoder_embed_dim=64 model.encoder_ffn_embed_dim=128 model.encoder_attention_heads=4 "
            "model.max_positions=64"
        ),
    ),
    # GLUE's RTE recipe, on the page's own classification data, from the pretraining page's
    # small model in place of the released roberta.base.
    StandIn(
        "fine-tuning.md",
        "fairseq-train RTE-bin",
        drop=("--fp16",),
        append=FINETUNE_SMALL,
        prepare="cp -r cls-bin RTE-bin\nmkdir -p roberta.base\ncp checkpoints/checkpoint_best.pt roberta.base/model.pt",
    ),
    # fairseq's IMDB recipe (RoBERTa large), from the pretraining page's small model in place of
    # roberta.large; the page's later blocks find it in checkpoints/ as the recipe leaves it.
    StandIn(
        "custom-classification.md",
        "--classification-head-name $HEAD_NAME",
        drop=("--fp16",),
        append=FINETUNE_SMALL,
        prepare="mkdir -p roberta.large\ncp my_model/model.pt roberta.large/model.pt",
    ),
    # BERT and ALBERT pretraining: token classification restores checkpoints/bert.
    # ModernBERT's recipe (StableAdamW, warmup-stable-decay), small, on the page's data; its own save dir.
    StandIn("pretraining.md", "--arch modernbert_ext_base", append=PRETRAIN_SMALL),
    StandIn(
        "pretraining.md",
        "--config-name modernbert_base ",  # the space: not modernbert_base_extend
        append=(
            "common.cpu=true dataset.num_workers=0 dataset.batch_size=8 'optimization.update_freq=[1]' "
            "optimization.max_update=3 lr_scheduler.warmup_updates=1 lr_scheduler.decay_updates=1 "
            "task.tokens_per_sample=64 model.encoder_layers=2 model.encoder_embed_dim=64 "
            "model.encoder_ffn_embed_dim=128 model.encoder_attention_heads=4 model.max_positions=64"
        ),
    ),
    StandIn("bert-albert.md", "--save-dir checkpoints/bert", drop=("--fp16",), append=PRETRAIN_SMALL),
    StandIn("bert-albert.md", "--save-dir checkpoints/albert", drop=("--fp16",), append=PRETRAIN_SMALL),
    StandIn("bert-albert.md", "--save-dir checkpoints/ner", append=FINETUNE_SMALL),
    # ELECTRA and SpanBERT pretraining, then QA from each.
    StandIn(
        "electra-spanbert-qa.md", "--task roberta_ext_electra --criterion roberta_ext_electra", append=PRETRAIN_SMALL
    ),
    StandIn("electra-spanbert-qa.md", "--save-dir checkpoints/electra-qa", append=FINETUNE_SMALL),
    StandIn(
        "electra-spanbert-qa.md", "--task roberta_ext_spanbert --criterion roberta_ext_spanbert", append=PRETRAIN_SMALL
    ),
    StandIn("electra-spanbert-qa.md", "--save-dir checkpoints/qa", append=FINETUNE_SMALL),
    # XLM-R: language identification from xlmr.base, the small one the test puts in its place.
    StandIn("xlmr.md", "--save-dir checkpoints/langid", drop=("--fp16",), append=FINETUNE_SMALL),
    # GLUE: the pretraining page's BPE in place of OpenAI's, which the test cannot download; then
    # the RTE config on CPU, from the pretraining page's small model in place of roberta.base, with
    # the overrides the page gives for a model of another shape. The BPE goes beside the
    # fine-tuned checkpoint, where the page's inference snippet finds it (a reader's OpenAI BPE is
    # in the cache, where glue-preprocess put it).
    StandIn("glue.md", "roberta-ext glue-preprocess glue_data RTE", append="--bpe-dir gpt2_bpe"),
    StandIn(
        "glue.md",
        "checkpoint.restore_file=$ROBERTA_PATH",
        append="common.fp16=false common.cpu=true common.log_interval=1 dataset.num_workers=0 "
        "optimization.max_update=5 optimization.max_epoch=1 dataset.max_tokens=1000 task.max_positions=64 "
        "++model.encoder_layers=2 ++model.encoder_embed_dim=64 ++model.encoder_ffn_embed_dim=128 "
        "++model.encoder_attention_heads=4",
        prepare="mkdir -p roberta.base checkpoints\ncp my_model/model.pt roberta.base/model.pt\n"
        "cp gpt2_bpe/encoder.json gpt2_bpe/vocab.bpe checkpoints/",
    ),
    # README.race.md's and commonsense_qa/README.md's commands, swapped, from the pretraining
    # page's small model in place of roberta.large, each with the save dir the page says to add;
    # CommonsenseQA on the page's BPE files.
    StandIn(
        "multiple-choice.md",
        "--update-freq $UPDATE_FREQ",
        drop=("--fp16",),
        append=f"--arch roberta_ext_base {FINETUNE_SMALL} --max-option-length 32 --save-dir checkpoints-race-large",
        prepare="mkdir -p roberta.large\ncp my_model/model.pt roberta.large/model.pt",
    ),
    StandIn(
        "multiple-choice.md",
        "FAIRSEQ_USER_DIR=",
        drop=("--fp16",),
        append=(
            "--gpt2-encoder-json gpt2_bpe/encoder.json --gpt2-vocab-bpe gpt2_bpe/vocab.bpe --arch roberta_ext_base "
            f"{FINETUNE_SMALL} --warmup-updates 1 --total-num-update 5 --save-dir checkpoints-cqa-large"
        ),
        prepare="mkdir -p roberta.large\ncp my_model/model.pt roberta.large/model.pt",
    ),
)


def stand_in_for(block: Block) -> StandIn | None:
    found = [s for s in STAND_INS if s.page == block.page.name and s.key in block.text]
    assert len(found) <= 1, f"{block.where}: {len(found)} stand-ins match"
    return found[0] if found else None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def placeholders() -> dict[str, str]:
    """Values the pages leave to the reader, and the test's choice of each."""
    return {
        "/path/to/roberta_ext": str(REPO),  # docs/pretraining.md: "your checkout of this repository"
        "PORT=29517": f"PORT={free_port()}",  # docs/pretraining.md: "any free TCP port"
    }


# ------------------------------------------------------------------ what a reader brings


@functools.cache
def docstring_documents() -> tuple[tuple[str, ...], ...]:
    """The standard library's docstrings as documents of English sentences, shuffled."""
    from roberta_ext.quickstart import stdlib_docstrings

    docs = [text for text, _ in stdlib_docstrings()]
    random.Random(0).shuffle(docs)
    return tuple(tuple(s.strip() for s in doc.split(". ") if 20 < len(s.strip()) < 160) for doc in docs)


def sentences(count: int) -> list[str]:
    found = [s for doc in docstring_documents() for s in doc]
    assert len(found) >= count, len(found)
    return found[:count]


def write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def raw_corpus(folder: Path) -> None:
    """docs/pretraining.md, docs/tokenizers.md: ``train.raw`` (3,000 sentences), ``valid.raw`` (300)."""
    lines = sentences(3300)
    write_lines(folder / "train.raw", lines[:3000])
    write_lines(folder / "valid.raw", lines[3000:])


def classification_data(folder: Path) -> None:
    """docs/fine-tuning.md: sentences labelled 1 (they mention returning something) or 0, and a
    score per sentence for regression."""
    lines = sentences(1200)
    for split, rows in (("train", lines[:1000]), ("valid", lines[1000:])):
        write_lines(folder / f"{split}.input0", rows)
        write_lines(folder / f"{split}.label", [str(int(" return" in f" {s.lower()}")) for s in rows])
        write_lines(folder / f"{split}.score", [f"{len(s) / 40:.2f}" for s in rows])


def tagged(words: list[str]) -> list[str]:
    """CoNLL lines: capitalised words are entities, numbers NUM, the rest O."""
    return [f"{w}\t{'B-ENT' if w[0].isupper() else 'NUM' if w.isdigit() else 'O'}" for w in words]


def bert_albert_inputs(folder: Path) -> None:
    """docs/bert-albert.md: ``train.txt``/``valid.txt`` (a sentence per line, an empty line after
    each document), the ``vocab.txt`` and ``spiece.model`` its Python blocks learn from them,
    and ``train.conll``/``valid.conll``."""
    from roberta_ext.tokenizers import train_sentencepiece, train_wordpiece_vocab, write_vocab

    docs = [doc for doc in docstring_documents() if len(doc) >= 2]
    for split, chosen in (("train", docs[:600]), ("valid", docs[600:660])):
        write_lines(folder / f"{split}.txt", [line for doc in chosen for line in (*doc, "")])
    text = [line for doc in docs[:600] for line in doc]
    write_vocab(train_wordpiece_vocab(text, vocab_size=30522), folder / "vocab.txt")
    train_sentencepiece(text, folder / "spiece", vocab_size=30000, hard_vocab_limit=False)
    lines = sentences(350)
    for split, rows in (("train", lines[:300]), ("valid", lines[300:])):
        write_lines(folder / f"{split}.conll", [line for s in rows for line in (*tagged(s.split()), "")])


def qa_data(folder: Path) -> None:
    """docs/electra-spanbert-qa.md: ``qa-data/`` with the pretrained model's ``dict.txt``, the
    BPE files and made-up SQuAD-like ``train.json``/``valid.json``."""
    from tests.test_qa import make_qa_records

    qa = folder / "qa-data"
    qa.mkdir()
    shutil.copy(folder / "data-bin" / "dict.txt", qa)
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(folder / "gpt2_bpe" / name, qa)
    (qa / "train.json").write_text(json.dumps(make_qa_records(random.Random(0), 400)), encoding="utf-8")
    (qa / "valid.json").write_text(json.dumps(make_qa_records(random.Random(1), 50)), encoding="utf-8")


def imdb_data(folder: Path) -> None:
    """docs/custom-classification.md: ``aclImdb/{train,test}/{pos,neg}/<id>_<rating>.txt``, one
    review per file as in IMDB; a review is positive when it mentions returning something."""
    lines = sentences(1200)
    for split, rows in (("train", lines[:1000]), ("test", lines[1000:])):
        for i, text in enumerate(rows):
            label = "pos" if " return" in f" {text.lower()}" else "neg"
            (folder / "aclImdb" / split / label).mkdir(parents=True, exist_ok=True)
            review = folder / "aclImdb" / split / label / f"{i}_{8 if label == 'pos' else 2}.txt"
            review.write_text(text)  # no final newline, as in IMDB


def multiple_choice_data(folder: Path) -> None:
    """docs/multiple-choice.md: a made-up ``RACE/`` folder, SWAG-style ``swag/{train,valid}.jsonl``
    (learnable: the right choice names the thing the context names) and CommonsenseQA's
    ``data/CommonsenseQA/{train,valid,test}.jsonl`` of the same task."""
    from tests.corpus.test_multiple_choice import write_race
    from tests.fairseq_plugin.test_multiple_choice import choice_rows, cqa_rows, write_jsonl

    write_race(folder / "RACE")
    (folder / "swag").mkdir()
    write_jsonl(folder / "swag" / "train.jsonl", choice_rows(400, 1))
    write_jsonl(folder / "swag" / "valid.jsonl", choice_rows(100, 2))
    cqa = folder / "data" / "CommonsenseQA"
    cqa.mkdir(parents=True)
    write_jsonl(cqa / "train.jsonl", cqa_rows(200, 1))
    write_jsonl(cqa / "valid.jsonl", cqa_rows(50, 2))
    write_jsonl(cqa / "test.jsonl", cqa_rows(20, 3, answers=False))


def glue_data(folder: Path) -> None:
    """docs/glue.md: a small ``glue_data/`` laid out as ``download_glue_data.py`` writes it
    (every task, its real columns; short sentences, for the small model's 64 positions)."""
    from tests.corpus.test_glue import write_glue_data

    write_glue_data(folder / "glue_data", rows=64, short=True)


LANGUAGES = {"en": 0, "fr": 1, "de": 2, "ru": 4}  # language -> its sentence in tests.xlmr_reference.MULTILINGUAL


def xlmr_inputs(folder: Path) -> None:
    """docs/xlmr.md: ``train.txt``/``valid.txt`` (sentences in 14 languages, as their words
    shuffled), ``langid/{train,valid}.{txt,label}`` (four languages) and ``xlmr.base/``: a small
    XLM-R in fairseq's layout (2 x 64, 64 positions: the stand-ins' size) over a SentencePiece
    model of that text, with XLM-R's ``dict.txt``, in place of the 1.1 GB download."""
    import sentencepiece as spm

    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel
    from roberta_ext.tokenizers.sentencepiece_tokenizer import train_xlmr_sentencepiece
    from tests.xlmr_reference import MULTILINGUAL

    rng = random.Random(0)

    def shuffled(sentence: str) -> str:
        words = sentence.split()
        rng.shuffle(words)
        return " ".join(words)

    lines = [shuffled(rng.choice(MULTILINGUAL[:14])) for _ in range(3300)]
    write_lines(folder / "train.txt", lines[:3000])
    write_lines(folder / "valid.txt", lines[3000:])
    (folder / "langid").mkdir()
    for split, count in (("train", 400), ("valid", 40)):
        chosen = [rng.choice(sorted(LANGUAGES)) for _ in range(count)]
        write_lines(folder / "langid" / f"{split}.txt", [shuffled(MULTILINGUAL[LANGUAGES[lang]]) for lang in chosen])
        write_lines(folder / "langid" / f"{split}.label", chosen)
    base = folder / "xlmr.base"
    base.mkdir()
    model = train_xlmr_sentencepiece(lines, base / "sentencepiece.bpe", vocab_size=1000, hard_vocab_limit=False)
    (base / "sentencepiece.bpe.vocab").unlink()  # the archive holds the model only
    sp = spm.SentencePieceProcessor(model_file=str(model))
    write_lines(base / "dict.txt", [f"{sp.id_to_piece(i)} 1" for i in range(3, sp.get_piece_size())])
    cfg = preset("xlmr-tiny", vocab_size=sp.get_piece_size() + 2, encoder_embed_dim=64)
    cfg = cfg.replace(encoder_ffn_embed_dim=128, encoder_attention_heads=4, encoder_layers=2, max_positions=64)
    save_roberta_checkpoint(RobertaModel(cfg), base / "model.pt")


def embedding_inputs(folder: Path) -> None:
    """docs/embeddings.md: ``my-model/``, a sentence-transformers folder (a tiny RoBERTa exported
    as a transformers folder, mean pooling, normalised), and ``texts.txt``, ``questions.jsonl``,
    ``pairs.tsv``."""
    import roberta_ext
    from tests.bpe_fixtures import build_bpe_files
    from tests.test_hub import make_model_dir

    fairseq_dir = make_model_dir(folder / "fairseq-model", build_bpe_files(folder / "bpe"), max_positions=64)
    model = roberta_ext.from_pretrained(str(fairseq_dir)).save_transformers(folder / "my-model")
    (model / "modules.json").write_text(
        json.dumps(
            [
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
            ]
        )
    )
    (model / "1_Pooling").mkdir()
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": "mean"}))
    (model / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 64, "do_lower_case": False}))
    shutil.rmtree(folder / "fairseq-model")
    shutil.rmtree(folder / "bpe")
    lines = sentences(300)
    write_lines(folder / "texts.txt", lines)
    write_lines(folder / "questions.jsonl", [json.dumps({"id": i, "question": s}) for i, s in enumerate(lines)])
    rows = [f"{i}\t{a}\t{b}" for i, (a, b) in enumerate(zip(lines, lines[1:] + lines[:1]))]
    write_lines(folder / "pairs.tsv", ["id\tsentence1\tsentence2", *rows])


READER_BRINGS: dict[str, Callable[[Path], None]] = {
    "custom-classification.md": imdb_data,
    "embeddings.md": embedding_inputs,
    "pretraining.md": raw_corpus,
    "tokenizers.md": raw_corpus,
    "fine-tuning.md": classification_data,
    "bert-albert.md": bert_albert_inputs,
    "electra-spanbert-qa.md": qa_data,
    "glue.md": glue_data,
    "multiple-choice.md": multiple_choice_data,
    "xlmr.md": xlmr_inputs,
}

# What a page takes from docs/pretraining.md's run, as the page says it does.
FROM_PRETRAINING: dict[str, tuple[str, ...]] = {
    "custom-classification.md": ("gpt2_bpe", "my_model"),
    "fine-tuning.md": ("gpt2_bpe", "checkpoints/checkpoint_best.pt"),
    "bert-albert.md": ("gpt2_bpe",),
    "electra-spanbert-qa.md": ("gpt2_bpe", "data-bin"),
    "glue.md": ("gpt2_bpe", "my_model"),
    "multiple-choice.md": ("gpt2_bpe", "my_model"),
    "export.md": ("my_model",),
}

# What a page takes from docs/fine-tuning.md's run (which continues from docs/pretraining.md's),
# as the page says it does: the fine-tuned model folder, and the labelled text it started from.
FROM_FINE_TUNING: dict[str, tuple[str, ...]] = {
    "predict.md": (
        "my_classifier",
        "checkpoints-cls/checkpoint_best.pt",
        "cls-bin",
        "gpt2_bpe",
        "valid.input0",
        "valid.label",
    ),
}

# Files a page says its commands write, with a text each must hold ("": it exists).
PROMISES: dict[str, list[tuple[str, str]]] = {
    "export.md": [(name, "") for name in ("model.onnx", "embeddings.onnx", "model.pt2", "ids-only.pt2")],
    "custom-classification.md": [
        *((f"aclImdb/{split}.{kind}", "") for split in ("train", "dev") for kind in ("input0", "label", "input0.bpe")),
        *(
            (f"IMDB-bin/{column}/{name}", "")
            for column in ("input0", "label")
            for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx")
        ),
        ("checkpoints/checkpoint_best.pt", ""),
    ],
    "pretraining.md": [
        *((f"gpt2_bpe/{name}", "") for name in ("encoder.json", "vocab.bpe", "dict.txt")),
        *(
            (f"data-bin/{name}", "")
            for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx", "encoder.json", "vocab.bpe")
        ),
        ("checkpoints/checkpoint_best.pt", ""),
        ("checkpoints/checkpoint_last.pt", ""),
        ("checkpoints-hydra/checkpoint_last.pt", ""),
        ("checkpoints-modernbert/checkpoint_last.pt", ""),
        ("checkpoints-modernbert-hydra/checkpoint_last.pt", ""),
        ("checkpoints-base/checkpoint_last.pt", ""),
        ("checkpoints-base-hydra/checkpoint_last.pt", ""),
        ("train.rank0.log", "distributed init (rank 0)"),
        ("train.rank1.log", "distributed init (rank 1)"),
        ("train.rank0.log", "done training"),
        ("checkpoints-2ranks/checkpoint_last.pt", ""),
        *((f"my_model/{name}", "") for name in ("model.pt", "dict.txt", "encoder.json", "vocab.bpe")),
    ],
    "tokenizers.md": [(f"gpt2_bpe/{name}", "") for name in ("encoder.json", "vocab.bpe", "dict.txt")],
    "fine-tuning.md": [
        *(
            (f"cls-bin/{column}/{name}", "")
            for column in ("input0", "label")
            for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx")
        ),
        ("checkpoints-cls/checkpoint_best.pt", ""),
        ("reg-bin/label/train.label", ""),
        ("reg-bin/label/valid.label", ""),
        *(
            (f"my_classifier/{name}", "")
            for name in ("model.pt", "input0/dict.txt", "label/dict.txt", "encoder.json", "vocab.bpe")
        ),
    ],
    "bert-albert.md": [
        ("bert-bin/dict.txt", ""),
        ("albert-bin/dict.txt", ""),
        *(
            (f"{data}/{column}/{name}", "")
            for data in ("ner-bin", "ner-bin-albert", "ner-bin-roberta")
            for column in ("input0", "label")
            for name in ("dict.txt", "train.bin", "valid.bin")
        ),
        ("ner-bin/text/train.input0", ""),
        ("ner-bin/text/train.label", ""),
        ("ner-bin/text/label.dict.txt", ""),
        ("checkpoints/ner/checkpoint_best.pt", ""),
    ],
    "electra-spanbert-qa.md": [
        (f"checkpoints/{name}/checkpoint_best.pt", "") for name in ("electra", "electra-qa", "spanbert", "qa")
    ],
    "embeddings.md": [
        *((name, "") for name in ("emb.npy", "questions.safetensors", "pairs.npy", "sharded.npy", "ranks.npy")),
        ("emb.npy.json", '"rows": 300'),
        ("ranks.shard-1-of-2.npy.json", '"shard": ['),
    ],
    "glue.md": [
        *(
            (f"RTE-bin/{column}/{name}", "")
            for column in ("input0", "input1")
            for name in ("dict.txt", "train.bin", "valid.bin", "test.bin")
        ),
        *((f"RTE-bin/label/{name}", "") for name in ("dict.txt", "train.bin", "valid.bin")),
        ("checkpoints/checkpoint_best.pt", ""),
        ("checkpoints-rte-small/checkpoint_best.pt", ""),
    ],
    "multiple-choice.md": [
        *(
            (f"RACE-bin/input{i}/{split}.{kind}", "")
            for i in range(5)
            for split in ("train", "valid", "test", "test1")
            for kind in ("bin", "idx")
        ),
        *((f"RACE-bin/label/{split}.label", "") for split in ("train", "valid", "test", "test1")),
        ("swag-bin/input4/valid.bin", ""),
        *(
            (f"{name}/checkpoint_best.pt", "")
            for name in ("checkpoints-race", "checkpoints-race-large", "checkpoints-swag", "checkpoints-cqa")
        ),
        ("checkpoints-cqa-large/checkpoint_best.pt", ""),
        ("preds.tsv", "\t"),
    ],
    "xlmr.md": [
        ("dict.txt", "▁"),
        *((f"{data}/{name}", "") for data in ("xlmr-bin", "langid-bin/input0") for name in ("train.bin", "valid.bin")),
        ("checkpoints/langid/checkpoint_best.pt", ""),
        ("checkpoints/xlmr/checkpoint_best.pt", ""),
        ("my_xlmr_hf/config.json", '"model_type": "xlm-roberta"'),
        ("my_xlmr_hf/sentencepiece.bpe.model", ""),
    ],
    "predict.md": [
        ("SST-2.dev.tsv", "index\tprediction\n0\t"),
        ("submission/SST-2.tsv", "\n199\t"),
        ("dev.metrics.json", '"accuracy"'),
        ("valid.predictions.jsonl", '{"index": 0, "prediction": '),
        ("valid.predictions.tsv", "index\tprediction\n"),
    ],
}


# ------------------------------------------------------------------ running a page

PAGES = sorted(path.name for path in DOCS.glob("*.md") if shell_blocks(path.name))
RUN_PAGES = [page for page in PAGES if any(not_run_reason(b) is None or stand_in_for(b) for b in shell_blocks(page))]
needs_fairseq = needs("fairseq", "the pages' commands use fairseq-train")


def reader_env() -> dict[str, str]:
    # fairseq's scripts as shims of the tests' fork server (tests/forkserver.py), which starting
    # sets its socket in this process's environment.
    shims = forkserver.shim_dir()
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env.update(
        REPO=str(REPO),
        PATH=os.pathsep.join((str(shims), str(BIN), env["PATH"])),
        ROBERTA_EXT_OFFLINE="1",
        OMP_NUM_THREADS="1",  # tiny models: one thread each is as fast, and two ranks share 2 cores
    )
    return env


RESUMED = re.compile(r"Loaded checkpoint (?P<path>\S+) \(epoch \d+ @ (?P<updates>\d+) updates\)")
"""fairseq's log line for a checkpoint it continues from. A restore for fine-tuning
(``--reset-optimizer``) logs 0 updates; more means the run resumed another's ``checkpoint_last.pt``
from its ``--save-dir`` (docs/pretraining.md's bf16 example once resumed step 5's run, 60 updates
past its ``--max-update 10``, and stopped at once)."""


def run_block(block: Block, script: str, folder: Path, env: dict[str, str]) -> None:
    """Run ``script`` (the block, or its stand-in) in ``folder``; fail with its output if it
    fails, if a ``fairseq-train`` it ran in the foreground did not log ``done training``, or if a
    training it ran resumed an earlier block's checkpoint (:data:`RESUMED`)."""
    begun = time.monotonic()
    with subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=folder,
        env=env,
        text=True,
        errors="replace",
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    ) as process:
        try:
            output, _ = process.communicate(timeout=BLOCK_TIMEOUT_S)
            status = f"exited {process.returncode}"
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the block's own processes: background ranks too
            output, _ = process.communicate()
            status = f"ran past {BLOCK_TIMEOUT_S} s"
    print(f"{block.where}: {time.monotonic() - begun:.1f} s")  # shown by pytest -s
    if process.returncode != 0:
        pytest.fail(
            f"the block at docs/{block.where} {status}; it ran:\n{script}\nlast lines of its output:\n{output[-6000:]}",
            pytrace=False,
        )
    if re.search(r"^fairseq-train ", script, re.M):
        assert "done training" in output, f"docs/{block.where}: no 'done training':\n{output[-6000:]}"
    for resumed in RESUMED.finditer(output):
        assert resumed["updates"] == "0", (
            f"docs/{block.where} resumed {resumed['path']} at {resumed['updates']} updates, a checkpoint an earlier "
            "command left: give it a save dir of its own"
        )


def run_page(page: str, folder: Path) -> Path:
    """Write what the reader brings into ``folder``, then run the page's blocks there in order."""
    if page in READER_BRINGS:
        READER_BRINGS[page](folder)
    env = reader_env()
    values = placeholders()
    for block in shell_blocks(page):
        stand_in = stand_in_for(block)
        if not_run_reason(block) is None:
            script = block.text
        elif stand_in is not None:
            script = stand_in.script(block)
        else:
            continue
        for placeholder, value in values.items():
            script = script.replace(placeholder, value)
        run_block(block, script, folder, env)
    return folder


@pytest.fixture(scope="module")
def pretraining_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/pretraining.md, run once: what the pages that continue from it start with."""
    return run_page("pretraining.md", tmp_path_factory.mktemp("pretraining"))


@pytest.fixture(scope="module")
def fine_tuning_folder(pretraining_folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """docs/fine-tuning.md, run once from docs/pretraining.md's run: what the pages that
    continue from it start with."""
    folder = tmp_path_factory.mktemp("fine-tuning")
    copy_into(folder, pretraining_folder, FROM_PRETRAINING["fine-tuning.md"])
    return run_page("fine-tuning.md", folder)


def copy_into(folder: Path, source: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (source / name).is_dir() else shutil.copy
        copy(source / name, folder / name)


# ------------------------------------------------------------------ the tests


def test_every_shell_block_is_run_or_says_why_not():
    """A block is run unless its first line is ``# not run: <reason>``; a note anywhere else (the
    old ``# on GPUs; not run for this page`` in the middle of a block) would hide commands."""
    assert {
        "pretraining.md",
        "fine-tuning.md",
        "bert-albert.md",
        "electra-spanbert-qa.md",
        "tokenizers.md",
        "getting-started.md",
        "benchmarks.md",
    } <= set(PAGES)
    for page in PAGES:
        for block in shell_blocks(page):
            rest = block.text.split("\n", 1)[1] if not_run_reason(block) else block.text
            assert not re.search(r"not run", rest, re.I), (
                f"docs/{block.where}: a block that is not run says so in its first line, '# not run: <reason>'"
            )


def test_stand_ins_placeholders_and_inputs_name_what_the_pages_hold():
    """When a page changes, the test's stand-ins, placeholders and inputs must follow: each stand-in
    replaces exactly one block, a skipped one, and each placeholder is still on a page."""
    for stand_in in STAND_INS:
        blocks = [b for b in shell_blocks(stand_in.page) if stand_in.key in b.text]
        assert len(blocks) == 1, f"stand-in {stand_in.key!r}: {len(blocks)} blocks of {stand_in.page} hold it"
        assert not_run_reason(blocks[0]), f"docs/{blocks[0].where} is run as written: it needs no stand-in"
    texts = [b.text for page in PAGES for b in shell_blocks(page)]
    for placeholder in placeholders():
        assert any(placeholder in text for text in texts), f"no block holds the placeholder {placeholder!r}"
    assert set(READER_BRINGS) | set(FROM_PRETRAINING) | set(FROM_FINE_TUNING) | set(PROMISES) <= set(RUN_PAGES)


@needs_fairseq
@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_commands_run(page: str, request: pytest.FixtureRequest, tmp_path: Path):
    """The page's blocks (a skipped one's stand-in in its place) run in order as a reader would,
    from the files a reader brings, and write the files the page says they write."""
    if page == "pretraining.md":
        folder = request.getfixturevalue("pretraining_folder")
    elif page == "fine-tuning.md":
        folder = request.getfixturevalue("fine_tuning_folder")
    elif page in FROM_FINE_TUNING:
        folder = tmp_path / "reader"
        folder.mkdir()
        copy_into(folder, request.getfixturevalue("fine_tuning_folder"), FROM_FINE_TUNING[page])
        run_page(page, folder)
    else:
        folder = tmp_path / "reader"
        folder.mkdir()
        if page in FROM_PRETRAINING:
            pretraining = request.getfixturevalue("pretraining_folder")
            for name in FROM_PRETRAINING[page]:
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                copy = shutil.copytree if (pretraining / name).is_dir() else shutil.copy
                copy(pretraining / name, folder / name)
        run_page(page, folder)
    for name, text in PROMISES.get(page, []):
        path = folder / name
        assert path.is_file(), f"docs/{page}: {name} was not written"
        assert not text or text in path.read_text(encoding="utf-8"), f"docs/{page}: {name} lacks {text!r}"
