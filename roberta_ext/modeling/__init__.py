"""Encoder models in plain PyTorch: configs, the shared transformer core and heads."""

from .config import EncoderConfig
from .encoder import TransformerEncoder, TransformerEncoderLayer
from .heads import ClassificationHead, LMHead
from .roberta import RobertaModel

__all__ = [
    "ClassificationHead",
    "EncoderConfig",
    "LMHead",
    "RobertaModel",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]
