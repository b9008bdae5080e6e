"""Entry modules of ``roberta-ext`` subcommands whose code lives elsewhere: each exposes ``main(argv)``."""
