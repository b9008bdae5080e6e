"""Tokenizers that turn text into fairseq dictionary indices. Pure Python: no torch needed."""
