"""Number words: the one table of English cardinals the package reads.

Both readers of numbers written as words use it: :mod:`mongomem.time_expressions`
("three weeks ago") and :mod:`mongomem.ltm.values` ("twenty-one", compared with
"21" when the judge's evidence is checked). Each adds the words only it accepts
("a couple of", "a dozen", "twice").
"""

from __future__ import annotations

from types import MappingProxyType

__all__ = ["CARDINALS"]

#: zero … nineteen, the words a number below twenty is written with.
CARDINALS = MappingProxyType(
    {
        word: value
        for value, word in enumerate(
            [
                "zero",
                "one",
                "two",
                "three",
                "four",
                "five",
                "six",
                "seven",
                "eight",
                "nine",
                "ten",
                "eleven",
                "twelve",
                "thirteen",
                "fourteen",
                "fifteen",
                "sixteen",
                "seventeen",
                "eighteen",
                "nineteen",
            ]
        )
    }
)
