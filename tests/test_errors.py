"""One error hierarchy (issue 33): every layer's error derives from ``RobertaExtError`` and keeps
the builtin its callers catch; the command line's exit statuses and the server's HTTP statuses
each come from one table keyed by class, where a subclass finds its nearest listed ancestor.

That every exception class of the package derives from the base is a rule of
``tests/test_architecture.py``."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from starlette.requests import Request

import roberta_ext
from roberta_ext.checkpoints import CheckpointError
from roberta_ext.cli.running import EXIT_STATUS, CommandError, exit_status, run_command
from roberta_ext.corpus.reading import CorpusError
from roberta_ext.corpus.rows import BadRow
from roberta_ext.download import ArchiveError, DownloadError, StoreError
from roberta_ext.embedding.locking import OutputBusy
from roberta_ext.embedding.stream import EmbedError
from roberta_ext.errors import RobertaExtError, lookup
from roberta_ext.export import ExportCheckError, ExportError
from roberta_ext.inference.head_outputs import HeadError
from roberta_ext.inference.inputs import InputError, InputTooLong
from roberta_ext.serve.app import Server
from roberta_ext.serve.errors import ERROR_STATUS, answer_for
from roberta_ext.serve.metrics import ServerMetrics
from roberta_ext.serve.validation import RequestError
from roberta_ext.serve.worker import Overloaded, ShuttingDown
from roberta_ext.tokenizers import (
    DictionaryFormatError,
    GPT2BPEFormatError,
    SentencePieceFormatError,
    WordPieceFormatError,
)
from roberta_ext.tokenizers.errors import TokenizerError
from tests.test_architecture import MODULES

LIBRARY_LAYERS = (
    CheckpointError,
    StoreError,
    TokenizerError,
    CorpusError,
    HeadError,
    InputError,
    OutputBusy,
    ExportError,
)
"""The library's layer errors: what the doors call into may raise them."""

DOOR_ERRORS = {
    CommandError: "the command line's own",
    RequestError: "the server's own: it carries its HTTP status",
    Overloaded: "the server's worker: Server.refusal answers it 429 before any handler runs",
    ShuttingDown: "the server's worker: Server.refusal answers it 503 before any handler runs",
    "MultipleChoiceDataError": "the fairseq plugin's: raised under fairseq-train, which reports it",
    "DictionaryError": "the fairseq plugin's (a task's dict.txt): raised under fairseq-train, which reports it",
}
"""The other direct subclasses of the base, and why they are not in both tables."""

NOT_SERVED = {
    OutputBusy: "the server writes no files",
    ExportError: "the server exports nothing",
}
"""Library layers no handler of the server calls into: the fallback entry would answer them."""


def instance(cls: type[BaseException]) -> BaseException:
    """An instance of ``cls`` without its constructor's arguments (enough for a class lookup)."""
    return cls.__new__(cls)


# ------------------------------------------------------------------------------ the hierarchy


@pytest.mark.parametrize(
    ("error", "layer", "builtin"),
    [
        (CheckpointError, CheckpointError, ValueError),
        (DownloadError, StoreError, OSError),
        (ArchiveError, StoreError, ValueError),
        (DictionaryFormatError, TokenizerError, ValueError),
        (GPT2BPEFormatError, TokenizerError, ValueError),
        (WordPieceFormatError, TokenizerError, ValueError),
        (SentencePieceFormatError, TokenizerError, ValueError),
        (CorpusError, CorpusError, ValueError),
        (BadRow, CorpusError, ValueError),
        (EmbedError, CorpusError, ValueError),
        (HeadError, HeadError, ValueError),
        (InputError, InputError, ValueError),
        (InputTooLong, InputError, ValueError),
        (OutputBusy, OutputBusy, ValueError),
        (ExportCheckError, ExportError, RuntimeError),
        (CommandError, CommandError, Exception),
        (RequestError, RequestError, Exception),
    ],
)
def test_each_error_derives_from_its_layers_and_keeps_the_builtin_callers_catch(error, layer, builtin):
    assert issubclass(error, layer) and issubclass(layer, RobertaExtError) and issubclass(error, builtin)


def test_the_lock_and_the_heads_have_their_own_errors_not_the_corpus_one():
    assert not issubclass(HeadError, CorpusError) and not issubclass(OutputBusy, CorpusError)


def test_the_old_import_places_still_work():
    from roberta_ext.checkpoints.safe_load import CheckpointError as from_safe_load

    assert from_safe_load is CheckpointError is roberta_ext.CheckpointError
    assert str(DownloadError("https://x/y", Path("/c/y"), "offline")) == "cannot download https://x/y to /c/y: offline"


def test_the_plugins_error_derives_from_the_base():
    from tests.peers import require

    require("fairseq", "the plugin's modules import fairseq")
    from roberta_ext.fairseq_plugin.multiple_choice import MultipleChoiceDataError

    assert issubclass(MultipleChoiceDataError, RobertaExtError) and issubclass(MultipleChoiceDataError, ValueError)


def layer_classes() -> set[type]:
    """The direct subclasses of the base defined in the package, the plugin's left out (it
    imports fairseq; its error is checked above)."""
    for name in MODULES:
        if not name.startswith("roberta_ext.fairseq_plugin") and name != "roberta_ext.__main__":
            importlib.import_module(name)
    return {
        cls
        for cls in RobertaExtError.__subclasses__()
        # a class a doctest defines is no attribute of its module: not the package's
        if getattr(sys.modules[cls.__module__], cls.__name__, None) is cls
    }


def test_every_layer_class_is_known_to_these_tests():
    """A new layer's error needs a decision: an entry in the tables (LIBRARY_LAYERS), or a reason not to."""
    known = {*LIBRARY_LAYERS, *(key for key in DOOR_ERRORS if isinstance(key, type))}
    unknown = {cls for cls in layer_classes() - known if cls.__name__ not in DOOR_ERRORS}
    assert not unknown, f"add these to LIBRARY_LAYERS (and the tables) or DOOR_ERRORS: {unknown}"


# ------------------------------------------------------------------------------ the two tables


def test_every_layer_has_an_entry_in_the_command_lines_table():
    missing = [cls.__name__ for cls in (*LIBRARY_LAYERS, CommandError, RobertaExtError) if cls not in EXIT_STATUS]
    assert not missing


def test_every_layer_the_server_calls_into_has_an_entry_in_its_table():
    served = [cls for cls in LIBRARY_LAYERS if cls not in NOT_SERVED]
    missing = [cls.__name__ for cls in (*served, RobertaExtError) if cls not in ERROR_STATUS]
    assert not missing
    assert RequestError not in ERROR_STATUS  # it carries its own status


@pytest.mark.parametrize("table", [EXIT_STATUS, ERROR_STATUS], ids=["exit status", "http status"])
@pytest.mark.parametrize(
    ("error", "entry"),
    [
        (DownloadError, StoreError),
        (ArchiveError, StoreError),
        (WordPieceFormatError, TokenizerError),
        (DictionaryFormatError, TokenizerError),
        (BadRow, CorpusError),
        (EmbedError, CorpusError),
        (ExportCheckError, ExportError),
        (type("SomeNewHeadError", (HeadError,), {}), HeadError),
        (type("SomeNewLayerError", (RobertaExtError,), {}), RobertaExtError),
    ],
)
def test_a_subclass_finds_its_nearest_listed_ancestors_entry(table, error, entry):
    if entry not in table:  # a layer the server does not call into: the base's entry
        entry = RobertaExtError
    assert lookup({cls: cls for cls in table}, instance(error)) is entry


def test_what_is_not_in_a_table_is_a_bug():
    assert exit_status(KeyError("x")) is None and lookup(ERROR_STATUS, KeyError("x")) is None


# ------------------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    "error",
    [
        HeadError("the model has no classification head: predict needs a fine-tuned model"),
        CorpusError("a.tsv:3: no column 2"),
        WordPieceFormatError("vocab.txt: the vocabulary is empty"),  # a traceback before the table
        SentencePieceFormatError("spiece.model: not a SentencePiece model"),  # likewise
        ExportCheckError("model.onnx differs from the hub by 0.1"),  # likewise
        DownloadError("https://x/y", Path("/c/y"), "offline"),
        OutputBusy("emb.npy is being written by pid 7", holder={"pid": 7}),
        CommandError("refusing to overwrite out.tsv (use --force)"),
        FileNotFoundError("no such file: a.tsv"),
    ],
)
def test_a_command_reports_a_project_error_in_one_line_with_its_exit_status(error, capsys):
    def body() -> int:
        raise error

    assert run_command("roberta-ext demo", body) == 1
    assert capsys.readouterr().err == f"roberta-ext demo: error: {error}\n"


def test_a_command_shows_a_bug_as_a_traceback():
    def body() -> int:
        raise KeyError("not a project error")

    with pytest.raises(KeyError, match="not a project error"):
        run_command("roberta-ext demo", body)


def raising(error: BaseException):
    def body() -> int:
        raise error

    return body


def test_ctrl_c_is_one_line_saying_what_was_left_and_exit_130(capsys):
    assert run_command("roberta-ext demo", raising(KeyboardInterrupt())) == 130
    assert capsys.readouterr().err == "\nroberta-ext demo: interrupted; no output file was written or changed\n"
    assert run_command("roberta-ext demo", raising(KeyboardInterrupt()), interrupted="out.npy is as it was") == 130
    assert capsys.readouterr().err == "\nroberta-ext demo: interrupted; out.npy is as it was\n"


def test_a_commands_threads_hold_while_it_runs_and_the_callers_come_back():
    before = torch.get_num_threads()
    other = before + 1  # (test workers run on one thread: a setting that differs from theirs)
    seen = []
    for threads in (other, None):
        assert run_command("roberta-ext demo", lambda: seen.append(torch.get_num_threads()) or 0, threads=threads) == 0
        assert torch.get_num_threads() == before
    assert seen == [other, before]
    with pytest.raises(KeyError):
        run_command("roberta-ext demo", raising(KeyError("bug")), threads=other)
    assert torch.get_num_threads() == before  # given back after a bug too


def test_a_broken_pipe_exits_1_quietly_and_sends_what_follows_to_devnull(capfd):
    """``bpe-encode ... | head``: the reader went away; no message, and Python's own flush of stdout at
    exit (which would fail again) writes to /dev/null instead."""
    assert run_command("roberta-ext demo", raising(BrokenPipeError())) == 1
    os.write(1, b"after the pipe broke\n")
    assert capfd.readouterr() == ("", "")


def test_a_broken_pipe_on_a_stdout_without_a_file_descriptor_still_exits_1_quietly(capsys):
    assert run_command("roberta-ext demo", raising(BrokenPipeError())) == 1  # (capsys: sys.stdout has no fileno)
    assert capsys.readouterr() == ("", "")


# ------------------------------------------------------------------------------ the server


def answered(error: Exception, *, openai: bool = False) -> tuple[int, dict]:
    """What ``Server.route`` answers for a handler that raises ``error``: the route's error
    handling alone, around a stand-in server (no model, no worker: the route does not queue)."""
    stand_in = SimpleNamespace(metrics=ServerMetrics(), error_response=Server.error_response)

    async def handler(request: Request):
        raise error

    route = Server.route(stand_in, "/demo", handler, openai=openai)
    response = asyncio.run(route(Request({"type": "http", "method": "POST", "path": "/demo", "headers": []})))
    return response.status_code, json.loads(response.body)


def test_the_server_answers_a_head_error_422_with_the_librarys_message():
    message = "the model has 2 classification heads, ['a', 'b']: choose one with --head"
    assert answered(HeadError(message)) == (422, {"error": message, "error_type": "Validation"})
    status, body = answered(HeadError(message), openai=True)
    assert status == 422 and body["error"] == {"message": message, "type": "Validation", "param": None, "code": 422}


def test_the_server_answers_a_broken_model_file_500_as_any_failure():
    assert answered(CheckpointError("'model.pt' is empty")) == (
        500,
        {"error": "CheckpointError: 'model.pt' is empty", "error_type": "Backend"},
    )
    assert answered(WordPieceFormatError("vocab.txt: empty")) == (
        500,
        {"error": "WordPieceFormatError: vocab.txt: empty", "error_type": "Backend"},
    )
    assert answered(RuntimeError("boom")) == (500, {"error": "RuntimeError: boom", "error_type": "Backend"})


def test_a_request_error_keeps_its_own_status():
    refused = RequestError(413, "the body is too large", field="body")
    assert answer_for(refused) is refused
    assert answered(refused) == (413, {"error": "the body is too large", "error_type": "Validation", "field": "body"})


def test_a_request_error_reads_as_its_message_and_owns_its_headers():
    given = {"Retry-After": "3"}
    refused = RequestError(429, "the server is busy", kind="Overloaded", headers=given)
    assert str(refused) == "the server is busy" and refused.args == ("the server is busy",)
    assert refused.headers == given and refused.headers is not given  # a copy: the caller's dict stays its own
    assert RequestError(400, "no").headers == {}


def test_the_field_is_the_one_given_else_the_input_an_input_error_names():
    named = InputError("inputs[2] is longer than the model takes", where="inputs[2]")
    assert answer_for(named).field == "inputs[2]"
    assert answer_for(named, field="inputs[5]").field == "inputs[5]"  # the caller's own path wins
    assert answer_for(HeadError("no head 'x'"), field="head").field == "head"
    assert answer_for(HeadError("no head 'x'")).field is None
