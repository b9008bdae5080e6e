"""The encoder core in plain PyTorch: the config, the transformer (written once) and its heads.

Every family (RoBERTa, BERT, ALBERT, ...) is the same :class:`RobertaModel` built from a
different :class:`EncoderConfig`; what each family adds lives in :mod:`roberta_ext.families`.
"""

from .config import EncoderConfig
from .encoder import TransformerEncoder, TransformerEncoderLayer
from .heads import ClassificationHead, LMHead, PooledClassificationHead, Pooler, TokenClassificationHead
from .model import RobertaModel

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
