"""Reading checkpoints: safe unpickling, fairseq layouts, and the download cache."""

from .errors import CheckpointError
from .fairseq import LoadedCheckpoint, load_roberta_checkpoint, save_roberta_checkpoint, upgrade_state_dict
from .safe_load import load_checkpoint_file

__all__ = [
    "CheckpointError",
    "LoadedCheckpoint",
    "load_checkpoint_file",
    "load_roberta_checkpoint",
    "save_roberta_checkpoint",
    "upgrade_state_dict",
]
