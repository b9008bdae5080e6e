"""What the hub, the library and the server do with a loaded model: inputs made and checked
(:mod:`.inputs`), heads' outputs (:mod:`.head_outputs`), word alignment, question answering,
prediction over files and compiled inference. Nothing is imported here: each module is imported
by name."""
