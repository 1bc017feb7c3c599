"""Word error rate, on text normalised so that only what was heard counts, not how it is
written.

Normalisation (applied to the reference and the transcript alike):

- lower case; ``&`` becomes ``and``; hyphens, dashes and slashes separate words; every
  other punctuation mark is dropped, inside words too (``what's`` → ``whats``,
  ``p.m.`` → ``pm``, ``o'clock`` → ``oclock``);
- numbers are compared as words, the way they are said: whisper writes most numbers as
  digits, the evaluation sentences spell them out. ``$20`` → ``twenty dollars``,
  ``10%`` → ``ten percent``, ``7:30`` → ``seven thirty``, ``3rd`` → ``third``,
  ``2.5`` → ``two point five``, ``1,500`` → ``one thousand five hundred``, and a bare
  four-digit number from 1100 to 2099 is read as a year (``1990`` → ``nineteen ninety``,
  ``2005`` → ``two thousand five``). Cardinals have no "and" (``three hundred twenty``);
  Times may be written ``7:30`` or ``7.30`` (whisper writes both). A day before a
  month is a date: ``12 March`` and ``the 12th of March`` both become ``the twelfth of
  march``;
- common contractions are expanded: ``I'm`` → ``i am``, ``can't`` and ``cannot`` →
  ``can not``, ``n't`` → ``not``, ``what's`` → ``what is`` (for a few such words);
- a few spellings are made one: ``mr`` → ``mister``, ``ok`` → ``okay`` and the like.
"""

from __future__ import annotations

import re

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((1_000_000_000, "billion"), (1_000_000, "million"), (1000, "thousand"))
_ORDINAL_WORDS = {
    "one": "first", "two": "second", "three": "third", "five": "fifth",
    "eight": "eighth", "nine": "ninth", "twelve": "twelfth",
}  # fmt: skip
_SPELLINGS = {
    "mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint", "ok": "okay",
    "alright": "all right",
}  # fmt: skip

_MONEY = re.compile(r"\$(\d[\d,]*)")
_PERCENT = re.compile(r"(\d)\s*%")
_TIME = re.compile(r"\b(\d{1,2})[:.]([0-5]\d)\b")
_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
_DAY_MONTH = re.compile(rf"\b(?:the )?(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTHS})\b")
_CONTRACTIONS = (
    (re.compile(r"\b(can)'t\b|\b(can)not\b"), r"\1\2 not"),
    (re.compile(r"\bwon't\b"), "will not"),
    (re.compile(r"n't\b"), " not"),
    (re.compile(r"'m\b"), " am"),
    (re.compile(r"'re\b"), " are"),
    (re.compile(r"'ll\b"), " will"),
    (re.compile(r"'ve\b"), " have"),
    (re.compile(r"\b(what|where|who|how|it|that|there|here|he|she)'s\b"), r"\1 is"),
)
_ORDINAL = re.compile(r"\b(\d+)(st|nd|rd|th)\b")
_DECIMAL = re.compile(r"\b(\d+)\.(\d+)\b")
_NUMBER = re.compile(r"\d[\d,]*")


def cardinal(n: int) -> str:
    """``n`` in words, without "and": 320 → "three hundred twenty"."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f" {_ONES[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_ONES[hundreds]} hundred" + (f" {cardinal(rest)}" if rest else "")
    for scale, name in _SCALES:
        if n >= scale:
            high, rest = divmod(n, scale)
            return f"{cardinal(high)} {name}" + (f" {cardinal(rest)}" if rest else "")
    raise AssertionError("unreachable")


def ordinal(n: int) -> str:
    words = cardinal(n).split()
    last = words[-1]
    if last in _ORDINAL_WORDS:
        words[-1] = _ORDINAL_WORDS[last]
    elif last.endswith("y"):
        words[-1] = last[:-1] + "ieth"
    else:
        words[-1] = last + "th"
    return " ".join(words)


def _number(digits: str) -> str:
    if "," not in digits and len(digits) == 4 and 1100 <= int(digits) <= 2099:
        year = int(digits)
        high, low = divmod(year, 100)
        if 2000 <= year < 2010:
            return cardinal(year)
        if low == 0:
            return f"{cardinal(high)} hundred"
        return f"{cardinal(high)} " + (f"oh {cardinal(low)}" if low < 10 else cardinal(low))
    return cardinal(int(digits.replace(",", "")))


def _time(match: re.Match[str]) -> str:
    hour, minutes = int(match[1]), int(match[2])
    if minutes == 0:
        return cardinal(hour)  # "7:00" is said "seven"
    return f"{cardinal(hour)} " + (f"oh {cardinal(minutes)}" if minutes < 10 else cardinal(minutes))


def _decimal(match: re.Match[str]) -> str:
    return f"{_number(match[1])} point " + " ".join(_ONES[int(d)] for d in match[2])


def normalise(text: str) -> list[str]:
    """The words of ``text`` in the canonical form described in the module docstring."""
    text = text.lower().replace("&", " and ").replace("\u2019", "'")
    for pattern, replacement in _CONTRACTIONS:
        text = pattern.sub(replacement, text)
    text = _DAY_MONTH.sub(lambda m: f"the {m[1]}th of {m[2]}", text)
    text = _MONEY.sub(lambda m: f"{m[1]} dollars", text)
    text = _PERCENT.sub(r"\1 percent", text)
    text = _TIME.sub(_time, text)
    text = _ORDINAL.sub(lambda m: ordinal(int(m[1])), text)
    text = _DECIMAL.sub(_decimal, text)
    text = _NUMBER.sub(lambda m: f" {_number(m[0].rstrip(','))} ", text)
    text = re.sub("[-/\u2013\u2014]", " ", text)
    text = re.sub(r"[^\w\s]", "", text)
    words: list[str] = []
    for word in text.split():
        words.extend(_SPELLINGS.get(word, word).split())
    return words


def edit_distance(reference: list[str], hypothesis: list[str]) -> int:
    """Substitutions + deletions + insertions turning ``reference`` into ``hypothesis``."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, 1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ref_word != hyp_word))
            )
        previous = current
    return previous[-1]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(errors, reference words) after normalising both."""
    ref = normalise(reference)
    return edit_distance(ref, normalise(hypothesis)), len(ref)


def wer(pairs: list[tuple[str, str]]) -> float:
    """Corpus word error rate over (reference, transcript) pairs: all errors over all
    reference words, so a long sentence weighs more than a short one."""
    errors = words = 0
    for reference, hypothesis in pairs:
        e, n = word_errors(reference, hypothesis)
        errors += e
        words += n
    return errors / words if words else 0.0
