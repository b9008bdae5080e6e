"""Texts on which our hub and fairseq's are compared: ordinary prose, and the inputs
tokenizers get wrong (emoji and ZWJ sequences, CJK, combining marks, control characters,
runs of whitespace, the empty string, contractions)."""

TEXTS = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nand  double  spaces",
    "I'm sure they've said it's what we'd do, and you'll see: THEY'RE RIGHT.",
    "Emoji: 👍🏽 👨‍👩‍👧‍👦 🇯🇵 ✔️ and a 🦄.",
    "中文文本，日本語のテキスト、한국어 텍스트.",
    "Ünïcödé combining: e\u0301 a\u0308 n\u0303, Zalgo: Z\u0351\u0352a\u0353l\u0354g\u0355o",
    "Control \x00 \x07 \x1b[0m chars and \u200b zero width \ufeff BOM",
    "Numbers 1234567890 3.14159 -42 1e10 and ½ ⅓ ٣",
    "العربية और हिन्दी and Ελληνικά",
    "\n\n\n",
    " ",
    "a" * 40,
]
PAIRS = [
    ("Hello world!", "How are you?"),
    ("A man sleeps.", ""),
    ("中文", "👍🏽 emoji"),
]
FILL_MASK_INPUTS = [
    "The first Star wars movie came out in <mask>",
    "<mask> is the capital of France.",
    "Hello <mask>!",
]
