"""roberta_ext: RoBERTa-family encoders for torch.hub and fairseq.

The hub side is plain PyTorch and never imports fairseq:

>>> import roberta_ext
>>> roberta = roberta_ext.from_pretrained("/path/to/roberta.large")   # doctest: +SKIP
>>> roberta.extract_features(roberta.encode("Hello world!")).shape    # doctest: +SKIP
torch.Size([1, 5, 1024])

The fairseq plugin lives in ``roberta_ext.fairseq_plugin`` and is loaded by
``fairseq-train --user-dir path/to/roberta_ext`` (or ``import roberta_ext.fairseq_plugin``);
importing ``roberta_ext`` in a process without fairseq does not import fairseq.
"""

import sys

from . import _moved
from .checkpoints import CheckpointError
from .errors import RobertaExtError
from .hub import RobertaHubInterface
from .loading import from_pretrained, from_transformers
from .modeling import EncoderConfig, EncoderModel, EncoderOutput, RobertaModel

__version__ = "0.1.0"

_moved.install()  # roberta_ext.inputs, roberta_ext.qa, ... still import (roberta_ext/_moved.py)

# fairseq imports a --user-dir as a package, after fairseq itself: register then. A process that
# has not loaded fairseq (the hub) never imports it from here; nor does one that made fairseq
# unimportable with sys.modules["fairseq"] = None (the key is there, the module is not).
if sys.modules.get("fairseq") is not None:
    from . import fairseq_plugin  # noqa: F401  (registers models, tasks, criteria)

__all__ = [
    "CheckpointError",
    "EncoderConfig",
    "EncoderModel",
    "EncoderOutput",
    "RobertaExtError",
    "RobertaHubInterface",
    "RobertaModel",
    "__version__",
    "from_pretrained",
    "from_transformers",
]
