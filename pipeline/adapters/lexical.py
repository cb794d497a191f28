"""An in-process BM25 index that is kept in step with every write (SPEC M1).

Why not a static BM25 library as the index: ``bm25s`` (and ``rank-bm25``)
precompute every (term, document) score from the corpus' statistics, so a
single add or delete means rebuilding the whole index. Memories and turns
change one at a time, and an erased or deleted one must be gone from the very
next search. :class:`LexicalIndex` therefore keeps plain postings that grow
with :meth:`~LexicalIndex.add` and shrink with :meth:`~LexicalIndex.remove`,
and scores a query from the live statistics at query time. Its scores are
Lucene's BM25 (the variant ``bm25s`` calls ``"lucene"``):

    idf(t)    = ln(1 + (N - df + 0.5) / (df + 0.5))
    score(d)  = Σ_t idf(t) · tf / (tf + k1 · (1 - b + b · |d| / avgdl))

over the query's distinct terms, with ``N``, ``df`` and ``avgdl`` counted over
live documents only; the unit tests check them against ``bm25s`` itself.

Tokens (:func:`tokenize`): lower-cased words (letters and digits, an inner
apostrophe kept: "don't" is one word), a possessive or contraction ending
dropped ("Jonas's" is "jonas", "I've" is "i"; "isn't" is a "not"), English stop words and
one-letter words left out (one-digit numbers kept), each stemmed with the
Snowball English stemmer (PyStemmer), so "flights" finds "flight" and "moved"
finds "moving". Without the ending rule "Jonas's" made a term "s" that matched
every "it's" and "Rosalind's".

Positions are the caller's: a row number that only grows (the memory index's
matrix row, a turn's slot). A removed position is masked and never reused
until the caller rebuilds (:meth:`LexicalIndex.rebuild`).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeAlias

import Stemmer

from mongomem.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_module("numpy", globals(), "np")  # loaded where a vector is first used

__all__ = ["STOP_WORDS", "LexicalIndex", "tokenize"]

Floats: TypeAlias = "np.ndarray[Any, np.dtype[np.float32]]"
Ints: TypeAlias = "np.ndarray[Any, np.dtype[np.int64]]"

#: Words too common to tell documents apart (the usual English list, as bm25s has it).
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves""".split()  # noqa: SIM905 (a word list reads better)
)

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")
_ENDING = re.compile(r"['’](?:s|ve|re|ll|d|m)$")
_NEGATION = re.compile(r"n['’]t$")


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    return Stemmer.Stemmer("english")


def tokenize(text: str) -> list[str]:
    """The terms of ``text`` (see the module docstring): lower-cased words and numbers,
    possessive/contraction endings, stop words and one-letter words out, stemmed."""
    words = []
    for found in _WORD.findall(text.lower()):
        if _NEGATION.search(found):  # "isn't", "can't": a "not", which is a stop word
            continue
        word = _ENDING.sub("", found).replace("'", "").replace("’", "")
        if word in STOP_WORDS or (len(word) < 2 and not word.isdigit()):
            continue
        words.append(word)
    return list(_stemmer().stemWords(words)) if words else []


class LexicalIndex:
    """BM25 over documents at caller-chosen, growing positions (see the module docstring)."""

    def __init__(self, *, k1: float = 1.5, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self._postings: dict[str, tuple[list[int], list[int]]] = {}
        self._arrays: dict[str, tuple[Ints, Floats]] = {}
        self._df: Counter[str] = Counter()
        self._terms: dict[int, Counter[str]] = {}
        self._length = np.zeros(0, dtype=np.float32)
        self._total = 0

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, position: int) -> bool:
        return position in self._terms

    def add(self, position: int, text: str) -> None:
        """Index ``text`` at ``position`` (replacing what was there)."""
        if position in self._terms:
            self.remove(position)
        counts = Counter(tokenize(text))
        if position >= len(self._length):
            grown = np.zeros(max(64, (position + 1) * 2), dtype=np.float32)
            grown[: len(self._length)] = self._length
            self._length = grown
        length = sum(counts.values())
        self._length[position] = length
        self._total += length
        self._terms[position] = counts
        for term, tf in counts.items():
            docs, tfs = self._postings.setdefault(term, ([], []))
            docs.append(position)
            tfs.append(tf)
            self._df[term] += 1
            self._arrays.pop(term, None)

    def remove(self, position: int) -> None:
        """Forget the document at ``position`` (a no-op for an unknown one)."""
        counts = self._terms.pop(position, None)
        if counts is None:
            return
        self._total -= int(self._length[position])
        self._length[position] = 0
        for term in counts:
            self._df[term] -= 1
            docs, tfs = self._postings[term]
            if self._df[term] == 0:
                del self._df[term], self._postings[term]
                self._arrays.pop(term, None)
                continue
            at = len(docs) - 1 - docs[::-1].index(position)
            del docs[at], tfs[at]
            self._arrays.pop(term, None)

    def rebuild(self, documents: Iterable[tuple[int, str]]) -> None:
        """Start again from ``documents`` (``(position, text)`` pairs)."""
        self.__init__(k1=self.k1, b=self.b)  # type: ignore[misc]
        for position, text in documents:
            self.add(position, text)

    def _posting(self, term: str) -> tuple[Ints, Floats]:
        found = self._arrays.get(term)
        if found is None:
            docs, tfs = self._postings[term]
            found = (np.asarray(docs, dtype=np.int64), np.asarray(tfs, dtype=np.float32))
            self._arrays[term] = found
        return found

    def scores(self, query: str | Sequence[str], size: int) -> Floats:
        """BM25 score of every position below ``size`` (0 where no query term occurs)."""
        terms = tokenize(query) if isinstance(query, str) else list(query)
        out = np.zeros(size, dtype=np.float32)
        n = len(self._terms)
        if n == 0 or size == 0:
            return out
        avgdl = self._total / n or 1.0
        norm = self.k1 * (1.0 - self.b + self.b * self._length[:size] / avgdl)
        for term in dict.fromkeys(terms):
            df = self._df.get(term, 0)
            if df == 0:
                continue
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            docs, tfs = self._posting(term)
            keep = docs < size
            docs, tfs = docs[keep], tfs[keep]
            out[docs] += np.float32(idf) * tfs / (tfs + norm[docs])
        return out

    def top(
        self, query: str | Sequence[str], size: int, limit: int, mask: Any = None
    ) -> list[tuple[int, float]]:
        """The ``limit`` best-scoring positions (score > 0, within ``mask`` if given)."""
        scores = self.scores(query, size)
        if mask is not None:
            scores = np.where(mask[:size], scores, np.float32(0))
        pool = np.flatnonzero(scores > 0)
        if len(pool) == 0 or limit <= 0:
            return []
        values = scores[pool]
        if limit < len(pool):
            part = np.argpartition(-values, limit - 1)[:limit]
            pool, values = pool[part], values[part]
        order = np.lexsort((pool, -values))
        return [(int(pool[i]), float(values[i])) for i in order]
