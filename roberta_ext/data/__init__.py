"""Data preparation for pretraining: masking."""
