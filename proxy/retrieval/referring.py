"""The words by which a follow-up points back at its conversation, in the index's languages."""

from __future__ import annotations

import re
import unicodedata

# Pronouns, possessives and demonstratives, "the other one", "the second", "the last one", "so
# one" (German "so eine"), "davon", "also". Words that are also articles or a common verb, in
# that language or another ("le", "det", German "sein", Dutch "die", "zijn" and "dit", French
# "ce" of "est-ce que" and the "il" of "il faut" and of Italian, Danish "der", Swedish "dem")
# are left out: they would make every question point back. English, German and Russian were
# measured on the tuning half's follow-ups (docs/retrieval.md, Conversations); the others are
# the same classes of words, written for each language.
POINTING_WORDS: dict[str, str] = {
    "english": """it its itself they them their theirs themselves he him his himself she her
        hers herself this that these those one ones other others another former latter same
        such second third last previous above earlier""",
    "german": """es er sie ihn ihm ihr ihre ihren ihrem ihrer seine seinen seinem seiner
        dies diese dieser dieses diesem diesen jene jener jenes davon dafür damit daraus
        darauf dabei dazu daran darüber darin dadurch dort so andere anderen anderer anderes
        anderem letzte letzten zweite zweiten selbe derselbe dieselbe dasselbe""",
    "russian": """он она оно они его её ее их ему ей им него неё нее них нему ней ним это этот
        эта эти этого этой этом этим этих тот та те того той тем тех там туда такой такая
        такое такие другой другая другое другие другого второй вторая второе последний
        последняя последнее тоже также""",
    "french": """ils elle elles lui leur leurs eux sa ses cet cette ces celui celle
        ceux celles cela ça ceci autre autres même mêmes second seconde deuxième dernier
        dernière aussi alors pourquoi""",
    "spanish": """él ella ellos ellas ello su sus suyo suya este esta estos estas esto ese esa
        esos esas eso aquel aquella aquellos aquellas aquello otro otra otros otras mismo
        misma segundo segunda último última también entonces""",
    "italian": """esso essa essi esse lui lei loro suo sua suoi questo questa questi
        queste quello quella quelli quelle ciò altro altra altri altre stesso stessa secondo
        seconda ultimo ultima anche allora perché""",
    "portuguese": """ele ela eles elas dele dela deles delas seu sua seus suas este esta
        estes estas isto esse essa esses essas isso aquele aquela aquilo outro outra outros
        outras mesmo mesma segundo segunda último última também então""",
    "dutch": """hij zij ze hem haar hun deze dat daar daarvan daarmee daarbij
        daarin daarop ervan ermee erbij erin erop ander andere zelfde tweede laatste ook""",
    "swedish": """han hon deras hans hennes dess denna detta dessa andra samma
        sista också därför där""",
    "danish": """han hun deres hans hendes dens dets denne dette disse anden andet andre
        samme sidste også derfor""",
    "norwegian": """han hun deres hans hennes dens dets denne dette disse annen annet
        andre samme siste også derfor""",
    "turkish": """onu onun ona onda ondan onlar onları onların bu bunu bunun buna bunda
        bundan bunlar şu şunu şunun diğer öbür aynı ikinci sonuncu""",
}
REFERRING = frozenset(word for words in POINTING_WORDS.values() for word in words.split())
"""A question holding one of these points back at what was said."""

HINTS = frozenset(["first", "also", "else", "then", "there", "why", "das", "так"])
"""Words that often point back but open questions of their own as often ("Is there a tool
for ...?"): the history search counts them (the last answer costs nothing to search), the
model is not asked to rewrite a question for them."""

DEFINITE_WORDS: dict[str, str] = {
    "english": "the",
    "german": "der die das den dem des",
    "russian": """этот эта это эти этого этой этим этих этом эту тот та то те того той тем тех
        том ту""",
    "french": "le la les l",
    "spanish": "el la los las",
    "italian": "il lo la gli l",
    "portuguese": "o os",
    "dutch": "de het",
}
"""Definite articles and demonstratives: "the tokens", "die Funktion", "этот флаг", "les
jetons" point back when their noun was said in the last turn. Articles that are English words
too ("a", "i", "as") are left out; the Scandinavian languages mark a definite noun by its
ending, Turkish has no articles."""
DEFINITE = frozenset(word for words in DEFINITE_WORDS.values() for word in words.split())

ASKING_WORDS: dict[str, str] = {
    "english": "which",
    "german": "welche welcher welches welchen welchem",
    "russian": """какой какая какое какие какого каким каких какую который которая которое
        которые""",
    "french": "quel quelle quels quelles",
    "spanish": "cuál cuáles",
    "italian": "quale quali",
    "portuguese": "qual quais",
    "dutch": "welk welke",
}
"""Interrogative determiners: "Which keys exactly?", "Quelles touches ?" ask to pick among
things the last answer named, when their noun is one of them (`pointed_at`)."""
ASKING = frozenset(word for words in ASKING_WORDS.values() for word in words.split())

CLITIC = re.compile(
    r"\b(?:je|tu|il|elle|on|nous|vous|ils|elles|ne)\s+(?:le|la|les|l)\b"
    r"|(?:^|[¿\s])(?:cómo|dónde|cuándo|no)\s+(?:lo|la|los|las)\s+\w"
    r"|\b(?:come|dove|quando|non)\s+(?:lo|la|li|le)\s+\w",
    re.IGNORECASE,
)
"""An object pronoun before its verb: French "je la change", "on les installe", "je l'ai";
Spanish "¿cómo lo cambio?"; Italian "come la cambio?". After a subject pronoun or an
interrogative the article reading is rare: these point back at what was said."""

CONTINUING = re.compile(
    r"^\s*(?:and|but|so|also|or|then|what about|how about"
    r"|und|aber|also|oder|dann|was ist mit|wie ist es mit"
    r"|и|а|но|или|ну|так|тогда"
    r"|et|mais|alors|donc|ou|qu'en est-il|¿\s*y|pero|entonces|ma|allora|oppure|mas|então"
    r"|maar|dus|och|eller|og|peki)\b",
    re.IGNORECASE,
)
"""A question opening like the rest of a sentence ("And Rhino?", "What about PAC?", "А если
памяти меньше?", "Et pour les appels ?") continues the one before it. Words that open other
questions too in another language are left out ("e", "o", "y", "en", "of", "men")."""

SHIFT = re.compile(
    r"^\W*(separate|different|unrelated|another (question|thing|topic|problem)"
    r"|new (question|topic)|switching|changing|something else|by the way|btw"
    r"|andere|anderes|etwas anderes|neue frage|übrigens"
    r"|другой|другая|другое|кстати"
    r"|autre|nouvelle question|autre chose|au fait|sinon"
    r"|otra pregunta|otra cosa|cambiando de tema|por cierto"
    r"|altra domanda|un'altra cosa|cambiando argomento|a proposito"
    r"|outra pergunta|outra coisa|mudando de assunto|a propósito"
    r"|andere vraag|iets anders|ander onderwerp|trouwens"
    r"|en annan fråga|något annat|förresten|et andet spørgsmål|et annet spørsmål|noget andet"
    r"|noe annet|forresten|başka bir soru|bu arada)"
    r"\b[^:?.!]{0,40}[:\-—–]",
    re.IGNORECASE,
)
"""A question opening by saying it changes the subject ("Separate problem: ...", "Different
question: ...", "Andere Frage: ...", "Autre question : ...")."""


READ_SCRIPTS = ("LATIN", "CYRILLIC")
"""The scripts the index's twelve languages are written in."""


def unread_script(question: str) -> bool:
    """Whether most of the question's letters are of a script none of the index's languages
    is written in (Han, kana, Hangul, Greek, Arabic, ...): its pointing words are not known, so
    whether it points back cannot be told."""
    letters = [char for char in question if char.isalpha()]
    other = sum(1 for char in letters if not unicodedata.name(char, "").startswith(READ_SCRIPTS))
    return other * 2 > len(letters)
