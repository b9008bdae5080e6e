"""The character tables of HF ``tokenizers``' BERT normalizer and pre-tokenizer, which transformers 5's
``BertTokenizer`` runs (``BertNormalizer``, ``BertPreTokenizer``), for :mod:`.wordpiece`.

The Rust library does not ask Python's ``unicodedata`` (Unicode 14.0 on Python 3.11) what a
character is; it has tables of its own, of three ages:

* the ``unicode_categories`` crate, **Unicode 8.0**: which characters ``clean_text`` deletes
  (:data:`OTHER`: categories Cc, Cf, Co, Cs), which the pre-tokenizer splits off besides ASCII
  punctuation (:data:`PUNCTUATION`: P*), and which marks ``strip_accents`` deletes
  (:data:`NONSPACING_MARKS`: Mn). A character assigned since 8.0 is in none of them, so
  ``clean_text`` keeps format characters such as U+08E2, and a few characters keep the category
  they had then (U+166D is still punctuation, U+1734 still a nonspacing mark);
* the ``unicode-normalization-alignments`` crate, **Unicode 9.0**: NFD, which ``strip_accents``
  runs first. :data:`NFD_KNOWN` lists the characters it decomposes or reorders; a mark assigned
  later (U+0898) is a starter there and a decomposition added later (U+11938) is not applied;
* Rust's standard library, **Unicode 17.0** in the tokenizers 0.23.3 wheels: whitespace
  (:data:`WHITESPACE`, White_Space, the same in every version) and lowercasing, which knows
  capitals newer than Python's tables (:data:`LOWERCASE`, ``Ɤ`` U+A7CB -> ``ɤ``).

A code point no table lists is kept and treated as a letter: so are the code points that Unicode
has not assigned (Cn, noncharacters such as U+FFFF included), while private use (Co) is deleted.
The tables are written as ranges of code points, read off tokenizers 0.23.3 by
``tests/tokenizers/bert_unicode_probe.py``; the tests check them on every code point against the
installed library.

>>> 0x200B in OTHER, 0x08E2 in OTHER, 0x166D in PUNCTUATION, 0x1734 in NONSPACING_MARKS
(True, False, True, True)
"""

from __future__ import annotations

from bisect import bisect_right

__all__ = ["LOWERCASE", "NFD_KNOWN", "NONSPACING_MARKS", "OTHER", "PUNCTUATION", "WHITESPACE"]


class _Ranges:
    """A set of code points given as ``"0300-036F 0483 ..."`` (hexadecimal, inclusive ranges).

    >>> marks = _Ranges("0300-036F 0483")
    >>> 0x301 in marks, 0x483 in marks, 0x484 in marks, marks.ranges()
    (True, True, False, [(768, 879), (1155, 1155)])
    >>> marks.flags()[0x483], marks.flags()[0x484]
    (1, 0)
    """

    def __init__(self, text: str) -> None:
        self._flags: bytearray | None = None
        self._firsts: list[int] = []
        self._lasts: list[int] = []
        for item in text.split():
            first, _, last = item.partition("-")
            self._firsts.append(int(first, 16))
            self._lasts.append(int(last or first, 16))

    def __contains__(self, cp: object) -> bool:
        if not isinstance(cp, int):
            return False
        i = bisect_right(self._firsts, cp) - 1
        return i >= 0 and cp <= self._lasts[i]

    def ranges(self) -> list[tuple[int, int]]:
        """The inclusive ``(first, last)`` ranges, in order."""
        return list(zip(self._firsts, self._lasts))

    def flags(self) -> bytearray:
        """One byte per code point, 1 where the set holds it: ``flags()[cp]`` is the fastest test
        (built on the first call, 1.1 MB)."""
        if self._flags is None:
            flags = bytearray(0x110000)
            for first, last in zip(self._firsts, self._lasts):
                flags[first : last + 1] = b"\x01" * (last + 1 - first)
            self._flags = flags
        return self._flags


def _lowercase(text: str) -> dict[int, int]:
    """``"10D50-10D65>10D70 ..."`` -> ``{0x10D50: 0x10D70, ..., 0x10D65: 0x10D85}``.

    >>> _lowercase("A7CB>0264 0041-0042>0061")
    {42955: 612, 65: 97, 66: 98}
    """
    table: dict[int, int] = {}
    for item in text.split():
        source, _, target = item.partition(">")
        first, _, last = source.partition("-")
        start, end = int(first, 16), int(last or first, 16)
        for cp in range(start, end + 1):
            table[cp] = int(target, 16) + cp - start
    return table


WHITESPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B)])
WHITESPACE |= {0x2028, 0x2029, 0x202F, 0x205F, 0x3000}
"""Rust's ``char::is_whitespace``: Unicode's White_Space property (Python's ``str.isspace`` also
takes U+001C..U+001F, which BERT deletes anyway as control characters)."""


OTHER = _Ranges(
    "0001-0008 000B-000C 000E-001F 007F-009F 00AD 0600-0605 061C 06DD 070F 180E 200B-200F 202A-202E "
    "2060-2064 2066-206F E000-F8FF FEFF FFF9-FFFB 110BD 1BCA0-1BCA3 1D173-1D17A E0001 E0020-E007F "
    "F0000-FFFFD 100000-10FFFD "
)
"""What ``clean_text`` deletes as control characters (its ``is_control``): the crate's ``is_other``
(Cc, Cf, Co, Cs of Unicode 8.0) but ``\\t \\n \\r``, which it treats as whitespace. NUL and U+FFFD
are deleted by a rule of their own and not listed."""

PUNCTUATION = _Ranges(
    "0021-002F 003A-0040 005B-0060 007B-007E 00A1 00A7 00AB 00B6-00B7 00BB 00BF 037E 0387 055A-055F "
    "0589-058A 05BE 05C0 05C3 05C6 05F3-05F4 0609-060A 060C-060D 061B 061E-061F 066A-066D 06D4 "
    "0700-070D 07F7-07F9 0830-083E 085E 0964-0965 0970 0AF0 0DF4 0E4F 0E5A-0E5B 0F04-0F12 0F14 "
    "0F3A-0F3D 0F85 0FD0-0FD4 0FD9-0FDA 104A-104F 10FB 1360-1368 1400 166D-166E 169B-169C 16EB-16ED "
    "1735-1736 17D4-17D6 17D8-17DA 1800-180A 1944-1945 1A1E-1A1F 1AA0-1AA6 1AA8-1AAD 1B5A-1B60 "
    "1BFC-1BFF 1C3B-1C3F 1C7E-1C7F 1CC0-1CC7 1CD3 2010-2027 2030-2043 2045-2051 2053-205E 207D-207E "
    "208D-208E 2308-230B 2329-232A 2768-2775 27C5-27C6 27E6-27EF 2983-2998 29D8-29DB 29FC-29FD "
    "2CF9-2CFC 2CFE-2CFF 2D70 2E00-2E2E 2E30-2E42 3001-3003 3008-3011 3014-301F 3030 303D 30A0 30FB "
    "A4FE-A4FF A60D-A60F A673 A67E A6F2-A6F7 A874-A877 A8CE-A8CF A8F8-A8FA A8FC A92E-A92F A95F "
    "A9C1-A9CD A9DE-A9DF AA5C-AA5F AADE-AADF AAF0-AAF1 ABEB FD3E-FD3F FE10-FE19 FE30-FE52 FE54-FE61 "
    "FE63 FE68 FE6A-FE6B FF01-FF03 FF05-FF0A FF0C-FF0F FF1A-FF1B FF1F-FF20 FF3B-FF3D FF3F FF5B FF5D "
    "FF5F-FF65 10100-10102 1039F 103D0 1056F 10857 1091F 1093F 10A50-10A58 10A7F 10AF0-10AF6 "
    "10B39-10B3F 10B99-10B9C 11047-1104D 110BB-110BC 110BE-110C1 11140-11143 11174-11175 111C5-111C9 "
    "111CD 111DB 111DD-111DF 11238-1123D 112A9 114C6 115C1-115D7 11641-11643 1173C-1173E 12470-12474 "
    "16A6E-16A6F 16AF5 16B37-16B3B 16B44 1BC9F 1DA87-1DA8B "
)
"""``BertPreTokenizer``'s ``is_bert_punc``: ASCII punctuation and ``is_punctuation`` (P* of Unicode 8.0)."""

NONSPACING_MARKS = _Ranges(
    "0300-036F 0483-0487 0591-05BD 05BF 05C1-05C2 05C4-05C5 05C7 0610-061A 064B-065F 0670 06D6-06DC "
    "06DF-06E4 06E7-06E8 06EA-06ED 0711 0730-074A 07A6-07B0 07EB-07F3 0816-0819 081B-0823 0825-0827 "
    "0829-082D 0859-085B 08E3-0902 093A 093C 0941-0948 094D 0951-0957 0962-0963 0981 09BC 09C1-09C4 "
    "09CD 09E2-09E3 0A01-0A02 0A3C 0A41-0A42 0A47-0A48 0A4B-0A4D 0A51 0A70-0A71 0A75 0A81-0A82 0ABC "
    "0AC1-0AC5 0AC7-0AC8 0ACD 0AE2-0AE3 0B01 0B3C 0B3F 0B41-0B44 0B4D 0B56 0B62-0B63 0B82 0BC0 0BCD "
    "0C00 0C3E-0C40 0C46-0C48 0C4A-0C4D 0C55-0C56 0C62-0C63 0C81 0CBC 0CBF 0CC6 0CCC-0CCD 0CE2-0CE3 "
    "0D01 0D41-0D44 0D4D 0D62-0D63 0DCA 0DD2-0DD4 0DD6 0E31 0E34-0E3A 0E47-0E4E 0EB1 0EB4-0EB9 "
    "0EBB-0EBC 0EC8-0ECD 0F18-0F19 0F35 0F37 0F39 0F71-0F7E 0F80-0F84 0F86-0F87 0F8D-0F97 0F99-0FBC "
    "0FC6 102D-1030 1032-1037 1039-103A 103D-103E 1058-1059 105E-1060 1071-1074 1082 1085-1086 108D "
    "109D 135D-135F 1712-1714 1732-1734 1752-1753 1772-1773 17B4-17B5 17B7-17BD 17C6 17C9-17D3 17DD "
    "180B-180D 18A9 1920-1922 1927-1928 1932 1939-193B 1A17-1A18 1A1B 1A56 1A58-1A5E 1A60 1A62 "
    "1A65-1A6C 1A73-1A7C 1A7F 1AB0-1ABD 1B00-1B03 1B34 1B36-1B3A 1B3C 1B42 1B6B-1B73 1B80-1B81 "
    "1BA2-1BA5 1BA8-1BA9 1BAB-1BAD 1BE6 1BE8-1BE9 1BED 1BEF-1BF1 1C2C-1C33 1C36-1C37 1CD0-1CD2 "
    "1CD4-1CE0 1CE2-1CE8 1CED 1CF4 1CF8-1CF9 1DC0-1DF5 1DFC-1DFF 20D0-20DC 20E1 20E5-20F0 2CEF-2CF1 "
    "2D7F 2DE0-2DFF 302A-302D 3099-309A A66F A674-A67D A69E-A69F A6F0-A6F1 A802 A806 A80B A825-A826 "
    "A8C4 A8E0-A8F1 A926-A92D A947-A951 A980-A982 A9B3 A9B6-A9B9 A9BC A9E5 AA29-AA2E AA31-AA32 "
    "AA35-AA36 AA43 AA4C AA7C AAB0 AAB2-AAB4 AAB7-AAB8 AABE-AABF AAC1 AAEC-AAED AAF6 ABE5 ABE8 ABED "
    "FB1E FE00-FE0F FE20-FE2F 101FD 102E0 10376-1037A 10A01-10A03 10A05-10A06 10A0C-10A0F 10A38-10A3A "
    "10A3F 10AE5-10AE6 11001 11038-11046 1107F-11081 110B3-110B6 110B9-110BA 11100-11102 11127-1112B "
    "1112D-11134 11173 11180-11181 111B6-111BE 111CA-111CC 1122F-11231 11234 11236-11237 112DF "
    "112E3-112EA 11300-11301 1133C 11340 11366-1136C 11370-11374 114B3-114B8 114BA 114BF-114C0 "
    "114C2-114C3 115B2-115B5 115BC-115BD 115BF-115C0 115DC-115DD 11633-1163A 1163D 1163F-11640 116AB "
    "116AD 116B0-116B5 116B7 1171D-1171F 11722-11725 11727-1172B 16AF0-16AF4 16B30-16B36 16F8F-16F92 "
    "1BC9D-1BC9E 1D167-1D169 1D17B-1D182 1D185-1D18B 1D1AA-1D1AD 1D242-1D244 1DA00-1DA36 1DA3B-1DA6C "
    "1DA75 1DA84 1DA9B-1DA9F 1DAA1-1DAAF 1E8D0-1E8D6 E0100-E01EF "
)
"""What ``strip_accents`` deletes after NFD: ``is_mark_nonspacing`` (Mn of Unicode 8.0)."""

NFD_KNOWN = _Ranges(
    "00C0-00C5 00C7-00CF 00D1-00D6 00D9-00DD 00E0-00E5 00E7-00EF 00F1-00F6 00F9-00FD 00FF-010F "
    "0112-0125 0128-0130 0134-0137 0139-013E 0143-0148 014C-0151 0154-0165 0168-017E 01A0-01A1 "
    "01AF-01B0 01CD-01DC 01DE-01E3 01E6-01F0 01F4-01F5 01F8-021B 021E-021F 0226-0233 0300-034E "
    "0350-036F 0374 037E 0385-038A 038C 038E-0390 03AA-03B0 03CA-03CE 03D3-03D4 0400-0401 0403 0407 "
    "040C-040E 0419 0439 0450-0451 0453 0457 045C-045E 0476-0477 0483-0487 04C1-04C2 04D0-04D3 "
    "04D6-04D7 04DA-04DF 04E2-04E7 04EA-04F5 04F8-04F9 0591-05BD 05BF 05C1-05C2 05C4-05C5 05C7 "
    "0610-061A 0622-0626 064B-065F 0670 06C0 06C2 06D3 06D6-06DC 06DF-06E4 06E7-06E8 06EA-06ED 0711 "
    "0730-074A 07EB-07F3 0816-0819 081B-0823 0825-0827 0829-082D 0859-085B 08D4-08E1 08E3-08FF 0929 "
    "0931 0934 093C 094D 0951-0954 0958-095F 09BC 09CB-09CD 09DC-09DD 09DF 0A33 0A36 0A3C 0A4D "
    "0A59-0A5B 0A5E 0ABC 0ACD 0B3C 0B48 0B4B-0B4D 0B5C-0B5D 0B94 0BCA-0BCD 0C48 0C4D 0C55-0C56 0CBC "
    "0CC0 0CC7-0CC8 0CCA-0CCB 0CCD 0D4A-0D4D 0DCA 0DDA 0DDC-0DDE 0E38-0E3A 0E48-0E4B 0EB8-0EB9 "
    "0EC8-0ECB 0F18-0F19 0F35 0F37 0F39 0F43 0F4D 0F52 0F57 0F5C 0F69 0F71-0F76 0F78 0F7A-0F7D "
    "0F80-0F84 0F86-0F87 0F93 0F9D 0FA2 0FA7 0FAC 0FB9 0FC6 1026 1037 1039-103A 108D 135D-135F 1714 "
    "1734 17D2 17DD 18A9 1939-193B 1A17-1A18 1A60 1A75-1A7C 1A7F 1AB0-1ABD 1B06 1B08 1B0A 1B0C 1B0E "
    "1B12 1B34 1B3B 1B3D 1B40-1B41 1B43-1B44 1B6B-1B73 1BAA-1BAB 1BE6 1BF2-1BF3 1C37 1CD0-1CD2 "
    "1CD4-1CE0 1CE2-1CE8 1CED 1CF4 1CF8-1CF9 1DC0-1DF5 1DFB-1E99 1E9B 1EA0-1EF9 1F00-1F15 1F18-1F1D "
    "1F20-1F45 1F48-1F4D 1F50-1F57 1F59 1F5B 1F5D 1F5F-1F7D 1F80-1FB4 1FB6-1FBC 1FBE 1FC1-1FC4 "
    "1FC6-1FD3 1FD6-1FDB 1FDD-1FEF 1FF2-1FF4 1FF6-1FFD 2000-2001 20D0-20DC 20E1 20E5-20F0 2126 "
    "212A-212B 219A-219B 21AE 21CD-21CF 2204 2209 220C 2224 2226 2241 2244 2247 2249 2260 2262 "
    "226D-2271 2274-2275 2278-2279 2280-2281 2284-2285 2288-2289 22AC-22AF 22E0-22E3 22EA-22ED "
    "2329-232A 2ADC 2CEF-2CF1 2D7F 2DE0-2DFF 302A-302F 304C 304E 3050 3052 3054 3056 3058 305A 305C "
    "305E 3060 3062 3065 3067 3069 3070-3071 3073-3074 3076-3077 3079-307A 307C-307D 3094 3099-309A "
    "309E 30AC 30AE 30B0 30B2 30B4 30B6 30B8 30BA 30BC 30BE 30C0 30C2 30C5 30C7 30C9 30D0-30D1 "
    "30D3-30D4 30D6-30D7 30D9-30DA 30DC-30DD 30F4 30F7-30FA 30FE A66F A674-A67D A69E-A69F A6F0-A6F1 "
    "A806 A8C4 A8E0-A8F1 A92B-A92D A953 A9B3 A9C0 AAB0 AAB2-AAB4 AAB7-AAB8 AABE-AABF AAC1 AAF6 ABED "
    "AC00-D7A3 F900-FA0D FA10 FA12 FA15-FA1E FA20 FA22 FA25-FA26 FA2A-FA6D FA70-FAD9 FB1D-FB1F "
    "FB2A-FB36 FB38-FB3C FB3E FB40-FB41 FB43-FB44 FB46-FB4E FE20-FE2F 101FD 102E0 10376-1037A 10A0D "
    "10A0F 10A38-10A3A 10A3F 10AE5-10AE6 11046 1107F 1109A 1109C 110AB 110B9-110BA 11100-11102 "
    "1112E-1112F 11133-11134 11173 111C0 111CA 11235-11236 112E9-112EA 1133C 1134B-1134D 11366-1136C "
    "11370-11374 11442 11446 114BB-114BC 114BE 114C2-114C3 115BA-115BB 115BF-115C0 1163F 116B6-116B7 "
    "1172B 11C3F 16AF0-16AF4 16B30-16B36 1BC9E 1D15E-1D169 1D16D-1D172 1D17B-1D182 1D185-1D18B "
    "1D1AA-1D1AD 1D1BB-1D1C0 1D242-1D244 1E000-1E006 1E008-1E018 1E01B-1E021 1E023-1E024 1E026-1E02A "
    "1E8D0-1E8D6 1E944-1E94A 2F800-2FA1D "
)
"""Characters that the library's NFD decomposes or reorders (a canonical decomposition or a nonzero
combining class in Unicode 9.0). Any other character is a starter that NFD leaves as it is."""

LOWERCASE = _lowercase(
    "1C89>1C8A A7CB>0264 A7CC>A7CD A7CE>A7CF A7D2>A7D3 A7D4>A7D5 A7DA>A7DB A7DC>019B "
    "10D50-10D65>10D70 16EA0-16EB8>16EBB "
)
"""``{code point: lowercase}`` where Rust's ``char::to_lowercase`` (Unicode 17.0) differs from
Python 3.11's ``str.lower`` (Unicode 14.0): capitals assigned since, which Python leaves alone."""
