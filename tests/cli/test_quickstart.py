"""roberta_ext/cli/quickstart.py: ``roberta-ext quickstart``'s command-line layer in-process. Its
parser (options, their defaults against :class:`roberta_ext.quickstart.Options`, help, usage
errors) and the ``Options`` it hands to ``roberta_ext.quickstart.run``, replaced by a recorder
(the training itself takes minutes: tests/test_quickstart.py runs it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roberta_ext.cli import quickstart as command
from roberta_ext.quickstart import Options
from tests.cli.test_arguments import helps

PROG = "roberta-ext quickstart"


@pytest.fixture
def ran(monkeypatch) -> list[Options]:
    """The options ``run`` was called with, recorded instead of training; it returns 0."""
    calls: list[Options] = []

    def record(options: Options) -> int:
        calls.append(options)
        return 0

    monkeypatch.setattr(command, "run", record)
    return calls


def test_the_defaults_are_the_library_s_options(ran, capsys):
    parser = command.build_parser()
    assert parser.prog == PROG
    assert vars(parser.parse_args([])) == {
        "out": Path("quickstart_out"),
        "family": "roberta",
        "merges": 3000,
        "layers": 4,
        "dim": 128,
        "tokens_per_sample": 128,
        "pretrain_updates": 800,
        "finetune_updates": 200,
        "batch_size": 32,
        "lr": 0.001,
        "workers": 2,
        "seed": 1,
        "progress": None,
    }
    assert command.main([]) == 0
    assert ran == [Options()]  # progress: stderr is no terminal here
    assert capsys.readouterr() == ("", "")


def test_every_option_reaches_run(ran):
    argv = (
        "--out runs/q --family modernbert --merges 500 --layers 2 --dim 64 --tokens-per-sample 32 "
        "--pretrain-updates 8 --finetune-updates 4 --batch-size 16 --lr 5e-4 --workers 1 --seed 7 --progress"
    )
    assert command.main(argv.split()) == 0
    assert ran == [
        Options(
            out=Path("runs/q"), family="modernbert", merges=500, layers=2, dim=64, tokens_per_sample=32,
            pretrain_updates=8, finetune_updates=4, batch_size=16, lr=5e-4, workers=1, seed=7, progress=True,
        )
    ]  # fmt: skip
    assert command.main(["--seed", "-3", "--no-progress", "--lr", "2"]) == 0
    assert ran[1] == Options(seed=-3, lr=2.0, progress=False)


def test_run_s_exit_status_is_the_command_s(monkeypatch):
    monkeypatch.setattr(command, "run", lambda options: 3)
    assert command.main(["--layers", "1"]) == 3


def test_the_help_says_what_each_option_does_with_its_default(capsys):
    parser = command.build_parser()
    assert parser.description == (
        "Pretrain and fine-tune a small RoBERTa with fairseq-train --user-dir roberta_ext on the standard "
        "library's docstrings, then use both checkpoints through torch.hub."
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--out": "working folder (default: %(default)s)",
        "--family": "the model pretrained and fine-tuned: a RoBERTa on fairseq's recipe, or a ModernBERT on its own "
        "(30%% masking, StableAdamW, warmup-stable-decay) (default: %(default)s)",
        "--merges": "BPE merges to learn (default: %(default)s)",
        "--layers": "encoder layers (default: %(default)s)",
        "--dim": "model width; heads = dim/32, FFN 4x (RoBERTa) or a GeGLU of 1.5x (ModernBERT) (default: %(default)s)",
        "--tokens-per-sample": "pretraining block length (default: %(default)s)",
        "--pretrain-updates": "pretraining updates (default: %(default)s)",
        "--finetune-updates": "fine-tuning updates (default: %(default)s)",
        "--batch-size": "sentences per batch (default: %(default)s)",
        "--lr": "peak pretraining learning rate (default: %(default)s)",
        "--workers": "processes for bpe-encode/preprocess (default: %(default)s)",
        "--seed": "seed of the train/valid/test split, of the label balancing and of both fairseq-train runs "
        "(default: %(default)s)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal; the progress is "
        "fairseq-train's log lines, shown as they come)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext quickstart [-h] [--out DIR] [--family {roberta,modernbert}] [--merges N] [--layers N] "
        "[--dim N] [--tokens-per-sample N] [--pretrain-updates N] [--finetune-updates N] [--batch-size N] [--lr X] "
        "[--workers N] [--seed N] [--progress | --no-progress]"
    )
    with pytest.raises(SystemExit) as exit_:
        command.main(["--help"])
    assert exit_.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for text in (
        "--out DIR working folder (default: quickstart_out)",
        "a ModernBERT on its own (30% masking, StableAdamW, warmup-stable-decay) (default: roberta)",
        "--merges N BPE merges to learn (default: 3000)",
        "--tokens-per-sample N pretraining block length (default: 128)",
        "--lr X peak pretraining learning rate (default: 0.001)",
        "--workers N processes for bpe-encode/preprocess (default: 2)",
        "both fairseq-train runs (default: 1)",
    ):
        assert text in shown, text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--family", "bert"], "argument --family: invalid choice: bert (choose from roberta, modernbert)"),
        *(
            ([flag, "0"], f"argument {flag}: must be >= 1, got 0")
            for flag in (
                "--merges",
                "--layers",
                "--dim",
                "--tokens-per-sample",
                "--pretrain-updates",
                "--finetune-updates",
                "--batch-size",
                "--workers",
            )
        ),
        (["--lr", "fast"], "argument --lr: invalid float value: fast"),
        (["--seed", "1.5"], "argument --seed: invalid int value: 1.5"),
        (["--updates", "3"], "unrecognized arguments: --updates 3"),
    ],
    ids=lambda value: value[0].lstrip("-") if isinstance(value, list) else "",
)
def test_usage_errors_exit_2_with_argparse_s_line(argv, message, capsys, ran):
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert line.replace("'", "") == f"{PROG}: error: {message}"  # argparse quotes the choices or not, by version
    assert ran == []
