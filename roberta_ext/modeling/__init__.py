"""Encoder models in plain PyTorch: configs, the shared transformer core and heads.

Every family (RoBERTa, BERT, ALBERT, ...) is the same :class:`RobertaModel` built from a
different :class:`EncoderConfig`; each family's file holds its presets and what is truly its own.
"""

from . import albert, bert, electra, spanbert
from .config import PRESETS, EncoderConfig
from .encoder import TransformerEncoder, TransformerEncoderLayer
from .heads import ClassificationHead, LMHead, PooledClassificationHead, Pooler, TokenClassificationHead
from .roberta import RobertaModel

for _family in (bert, albert, electra, spanbert):
    PRESETS.update(_family.PRESETS)

EncoderModel = RobertaModel
"""The family-neutral name of the model class."""

__all__ = [
    "ClassificationHead",
    "EncoderConfig",
    "EncoderModel",
    "LMHead",
    "PooledClassificationHead",
    "Pooler",
    "RobertaModel",
    "TokenClassificationHead",
    "TransformerEncoder",
    "TransformerEncoderLayer",
]
