"""The checkpoints layer's error: what every way of reading model files (fairseq checkpoints,
transformers directories, sentence-transformers folders) raises for a file it cannot use."""

from __future__ import annotations

from ..errors import RobertaExtError

__all__ = ["CheckpointError"]


class CheckpointError(RobertaExtError, ValueError):
    """A checkpoint file is missing, damaged, not a checkpoint, or unsafe to load.

    A ``ValueError`` too, as it always was, for callers that catch that."""
