"""The data layer, without fairseq: masked-LM corruption of a batch (:mod:`.masking`), BERT/ALBERT
sentence pairs (:mod:`.sentence_pairs`), token-classification examples (:mod:`.tagging`), word
starts for whole-word masking (:mod:`.word_starts`) and padding rows into a batch
(:mod:`.batching`). The fairseq plugin wraps these in fairseq datasets; nothing here imports fairseq."""
