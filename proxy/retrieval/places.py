"""Places a question names ("in chapter 3", "Table 2", "at the very end", "the last sheet"),
read from its words in English, German, French, Spanish, Italian, Dutch and Russian."""

from __future__ import annotations

import re
from dataclasses import dataclass

LAST = -1
"""`Place.number` of "the last chapter", "the final sheet"."""

UNITS: dict[str, str] = {
    "chapter": r"chapters?|ch\.|kapitel[ns]?|chapitres?|cap[ií]tulos?|capitol[oi]|hoofdstuk(?:ken)?"
    r"|глав\w*",
    "section": r"sections?|sec\.|§|abschnitt\w*|sektion(?:en)?|secci[oó]n(?:es)?|apartados?"
    r"|sezion[ei]|paragrafo|sectie|paragraaf|раздел\w*|пункт\w*",
    "part": r"parts?|teil[es]?|partie|parte|deel|част\w*",
    "appendix": r"appendix|appendices|annex|anhang|annexe|appendice|ap[eé]ndice|anexo|allegato"
    r"|bijlage|приложени\w*",
    "table": r"tables?|tab\.|tabellen?|tableaux?|tablas?|tabell[ae]|tabel(?:len)?|таблиц\w*",
    "figure": r"figures?|figs?\.|abbildung(?:en)?|abb\.|figuras?|figur[ae]|figuur|рисун\w*|рис\.",
    "page": r"pages?|pp?\.|seiten?|p[aá]ginas?|страниц\w*|стр\.",
    "sheet": r"sheets?|worksheets?|tabs?|tabellenbl[aä]tt(?:er)?|bl[aä]tt(?:er)?|arbeitsbl[aä]tt"
    r"|feuilles?|onglets?|hojas?|pesta[ñn]as?|fogli[oi]?|schede?|blad(?:en)?|werkblad|лист\w*",
    "slide": r"slides?|folien?|diapositives?|diapositivas?|dia's?|слайд\w*",
    "contribution": r"contributions?|beitr[aä]g\w*|contribuci[oó]n(?:es)?|contribut[oi]"
    r"|bijdrage[n]?|вклад\w*",
}
"""Names of the units a question counts ("the third chapter", "Tabelle 2"), by kind."""

ORDINALS: dict[int, str] = {
    1: r"first|1st|erst\w*|premi[eè]re?|primer[oa]?|prim[oa]|eerste|перв\w+",
    2: r"second|2nd|zweit\w*|deuxi[eè]me|seconde?|segund[oa]|second[oa]|tweede|втор\w+",
    3: r"third|3rd|dritt\w*|troisi[eè]me|tercer[oa]?|terz[oa]|derde|трет\w+",
    4: r"fourth|4th|viert\w*|quatri[eè]me|cuart[oa]|quart[oa]|vierde|четв[её]рт\w+",
    5: r"fifth|5th|f[uü]nft\w*|cinqui[eè]me|quint[oa]|vijfde|пят\w+",
    6: r"sixth|6th|sechst\w*|sixi[eè]me|sext[oa]|sest[oa]|zesde|шест\w+",
    7: r"seventh|7th|siebt\w*|septi[eè]me|s[eé]ptim[oa]|settim[oa]|zevende|седьм\w+",
    8: r"eighth|8th|acht(?:e[nmrs]?)|huiti[eè]me|octav[oa]|ottav[oa]|achtste|восьм\w+",
    9: r"ninth|9th|neunt\w*|neuvi[eè]me|noven[oa]|non[oa]|negende|девят\w+",
    10: r"tenth|10th|zehnt\w*|dixi[eè]me|d[eé]cim[oa]|tiende|десят\w+",
    LAST: r"last|final|letzt\w*|derni[eè]re?|[uú]ltim[oa]|laatste|последн\w+",
}
"""Ordinal words, their endings left open (German, Russian and Romance adjectives decline)."""

NUMBER_WORDS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
}  # fmt: skip
"""Number words after a unit ("Chapter Three"), English only: other languages write digits."""

_ROMAN = re.compile(r"^(?=[ivxlc])(c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})$", re.IGNORECASE)

PHRASES: dict[str, str] = {
    "end": r"at the (?:very |far )?end|towards? the end|near the end|the (?:very )?end of the"
    r" (?:book|document|story|novel|text|report|paper|file|article)|the ending"
    r"|am (?:ganz(?:en)? |äußersten )?ende|gegen ende|zum schluss"
    r"|à la (?:toute |tout )?fin|vers la fin|al final|hacia el final|alla fine|verso la fine"
    r"|aan het (?:einde?|eind)|helemaal aan het eind|в (?:самом )?конце|под конец"
    r"|ближе к концу",
    "start": r"at the (?:very )?(?:beginning|start|outset)|the (?:very )?beginning of the"
    r" (?:book|document|story|novel|text|report|paper|file|article)"
    r"|the opening (?:lines|pages|paragraph)"
    r"|am (?:ganz(?:en)? )?anfang|zu beginn|au (?:tout )?d[ée]but|al (?:principio|comienzo|inicio)"
    r"|all'inizio|al principio|aan het begin|в (?:самом )?начале",
    "conclusion": r"(?:in|from) the conclusions?|(?:does|do) the conclusions?"
    r"|the conclusions? (?:section|chapter)|concluding (?:section|remarks|chapter)"
    r"|(?:in|from) the summary|im fazit|in der (?:zusammenfassung|schlussfolgerung)"
    r"|im schluss(?:teil|wort)|dans (?:la|les) conclusions?|en (?:la|las) conclusi[oó]n(?:es)?"
    r"|nelle? conclusion[ei]|in de (?:conclusie|samenvatting)|в заключении|в выводах",
    "introduction": r"(?:in|from|does|do) the (?:introduction|intro)|in der einleitung"
    r"|dans l'introduction|en la introducci[oó]n|nell'introduzione|in de inleiding"
    r"|во введении",
    "abstract": r"(?:in|from|does) the abstract|in der kurzfassung|im abstract|dans le r[ée]sum[ée]"
    r"|en el resumen|nel sommario|in het abstract|в аннотации",
}
"""Places named by a phrase rather than a unit and a number."""


@dataclass(frozen=True)
class Place:
    """A place a question names: a kind of unit or region, which one, and the question's words
    that named it.

    `number` counts from 1 (LAST: the last one); `label` is a number or letter as written
    ("4.2", "B") when the unit is numbered that way; both None for a region ("end") or a unit
    named by its title ("the Currencies sheet", told apart where the document is known)."""

    kind: str
    number: int | None = None
    label: str | None = None
    phrase: str = ""

    def describe(self) -> str:
        """`chapter 3`, `the last sheet`, `table B`, `the end`."""
        if self.label is not None:
            return f"{self.kind} {self.label}"
        if self.number == LAST:
            return f"the last {self.kind}"
        if self.number is not None:
            return f"{self.kind} {self.number}"
        return f"the {self.kind}"


_UNIT = "|".join(f"(?P<{kind}>{words})" for kind, words in UNITS.items())
_ORDINAL = "|".join(f"(?P<o{n if n > 0 else 'last'}>{words})" for n, words in ORDINALS.items())
_LABEL = (
    r"(?P<label>\d{1,3}(?:\.\d{1,3}){0,3}|[ivxlc]{1,6}|[a-zа-я]|" + "|".join(NUMBER_WORDS) + r")"
)
_BOUND_L = r"(?<![\w.])"
_BOUND_R = r"(?!\w)"
UNIT_THEN_LABEL = re.compile(
    rf"{_BOUND_L}(?:{_UNIT})\s*(?:no\.?\s*|nr\.?\s*|n[°º]\s*|№\s*)?{_LABEL}{_BOUND_R}",
    re.IGNORECASE,
)
""""chapter 3", "Table II", "Anhang B", "§ 4.2", "глава 3"."""
ORDINAL_THEN_UNIT = re.compile(
    rf"{_BOUND_L}(?:{_ORDINAL})\s+(?:\w+\s+)?(?:{_UNIT}){_BOUND_R}", re.IGNORECASE
)
""""the third chapter", "the last sheet", "im dritten Kapitel", "в последней главе" (one word
may stand between: "the first main contribution")."""
UNIT_THEN_ORDINAL = re.compile(rf"{_BOUND_L}(?:{_UNIT})\s+(?:{_ORDINAL}){_BOUND_R}", re.IGNORECASE)
""""capítulo tercero", "глава первая"."""
PHRASE = re.compile(
    "|".join(f"(?P<{kind}>{_BOUND_L}(?:{words}){_BOUND_R})" for kind, words in PHRASES.items()),
    re.IGNORECASE,
)
NAMED_UNIT = re.compile(
    rf"{_BOUND_L}(?:{UNITS['sheet']}|{UNITS['slide']}){_BOUND_R}", re.IGNORECASE
)
"""A sheet or slide named by its title: which one is told where the document's are known."""

# A unit counted by a letter only where letters count it (appendices), and a roman numeral
# or a lone letter only right after its unit ("Table II", "Appendix B"); "a" and "i" would
# otherwise read "the table a user..." and "part i of".
_LETTERED = {"appendix", "part", "section"}
_ROMAN_OK = {"chapter", "part", "section", "table", "figure", "appendix"}


def parse_place(question: str) -> Place | None:
    """The place the question names, if it names one: a numbered unit first ("chapter 3"),
    then a counted one ("the third chapter", "the last sheet"), then a named region ("at the
    very end", "in the conclusion"), then a sheet or slide named by its title."""
    for match in UNIT_THEN_LABEL.finditer(question):
        place = _numbered(match)
        if place is not None:
            return place
    for pattern in (ORDINAL_THEN_UNIT, UNIT_THEN_ORDINAL):
        counted = pattern.search(question)
        if counted is not None:
            kind = _group(counted, UNITS)
            number = next(
                (LAST if key == "olast" else int(key[1:]))
                for key, value in counted.groupdict().items()
                if value and key.startswith("o")
            )
            return Place(kind, number, None, counted.group(0))
    region = PHRASE.search(question)
    if region is not None:
        return Place(_group(region, PHRASES), phrase=region.group(0))
    named = NAMED_UNIT.search(question)
    if named is not None:
        word = named.group(0).casefold()
        kind = "slide" if re.fullmatch(UNITS["slide"], word, re.IGNORECASE) else "sheet"
        return Place(kind, phrase=named.group(0))
    return None


def _group(match: re.Match[str], kinds: dict[str, str]) -> str:
    return next(kind for kind in kinds if match.group(kind))


def _numbered(match: re.Match[str]) -> Place | None:
    kind = _group(match, UNITS)
    label = match.group("label")
    lowered = label.casefold()
    if lowered in NUMBER_WORDS:
        return Place(kind, NUMBER_WORDS[lowered], None, match.group(0))
    if lowered[0].isdigit():
        number = int(lowered.split(".")[0]) if "." not in lowered else None
        return Place(kind, number, label if "." in lowered else None, match.group(0))
    roman = _ROMAN.match(lowered)
    if roman is not None and kind in _ROMAN_OK and (len(lowered) > 1 or label.isupper()):
        return Place(kind, roman_value(lowered), None, match.group(0))
    if len(lowered) == 1 and kind in _LETTERED and label.isupper():
        return Place(kind, None, label.upper(), match.group(0))
    return None


def roman_value(text: str) -> int:
    """`iv` → 4 (a valid roman numeral, lower case)."""
    values = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}
    total = 0
    for here, after in zip(text, [*text[1:], ""], strict=True):
        value = values[here]
        total += -value if after and values[after] > value else value
    return total
