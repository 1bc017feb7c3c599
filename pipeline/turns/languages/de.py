"""German cue words.

German asks with a wh-word and the verb right after it ("wo ist…", "wie viel kostet…":
a pronoun or article after the wh-word is a subordinate clause, "wo ich wohne") or with
the verb first ("kannst du…", "gibt es…", "haben Sie…"). Many prepositions are also
separable particles that end finished sentences ("wann kommt der Zug an", "kommst du
mit"): those are particles here, no cue either way. "oder" at the end is a tag when
something marks it ("…, oder?"), else it may still go on ("Kaffee oder…"): no cue.
"""

from __future__ import annotations

from pipeline.turns.languages import CueWords, Opener, openers, phrases, words

_PRONOUNS = words("ich du er sie es wir ihr man")
_ARTICLES = words(
    "der die das den dem des ein eine einen einem einer mein meine dein deine ihre unser "
    "unsere euer eure sein seine dieser diese dieses jemand etwas"
)
_SUBJECTS = _PRONOUNS | _ARTICLES | words("hier da heute morgen noch")
_VERBS = (
    "kann kannst können könnte könntest könnten darf darfst dürfen dürfte soll sollte "
    "sollst sollen muss musst müssen will willst wollen möchte möchtest möchten würde "
    "würdest würden wird wirst werden bin bist ist sind seid war warst waren wäre wären "
    "habe hast hat haben habt hatte hattest hätte hätten gibt gab weißt weiß wissen kennst "
    "kennt brauche brauchst braucht fährt kommt kommst geht funktioniert stimmt passt "
    "kostet magst tust tut macht machst"
)
# "Kommen Sie rein", "gehen Sie", "fahren Sie": imperatives, so "Sie" is no subject there.
_IMPERATIVE_TOO = "kennen brauchen fahren kommen gehen machen"
_INVERSIONS = {
    **openers(_VERBS.split(), Opener(only=_SUBJECTS, more=1)),
    **openers(_IMPERATIVE_TOO.split(), Opener(only=_SUBJECTS - words("sie"), more=1)),
}
# "wie schön!": an exclamation.
_EXCLAIMED = words(
    "schön toll nett süß schade lieb furchtbar schrecklich herrlich wunderbar interessant "
    "cool blöd dumm peinlich auch immer"
)
_WH_WORDS = (
    "was wie wo wann warum wieso weshalb wer wen wem wessen welche welcher welches welchen "
    "welchem woher wohin wofür womit worüber wozu wieviel wieviele"
)
_PIED = "ab bis seit mit für an von zu um aus in bei nach über"
_WH = openers(
    [
        *_WH_WORDS.split(),
    "wie viel", "wie viele", "wie lange", "wie spät", "wie oft", "wie alt", "wie weit",
    "um wie viel uhr",
        *(f"{p} {w}" for p in _PIED.split() for w in "wann wem wen was welche welcher "
          "welches welchen welchem".split()),
    ],
    Opener(never=_PRONOUNS | _ARTICLES | _EXCLAIMED),
)  # fmt: skip
# "was für ein Tag!" exclaims; "was für ein Auto hast du" asks: a verb after the noun.
_WH.update(openers(["was für"], Opener(never=_EXCLAIMED, more=2)))

PREFACES = (
    r"die (?:sache|frage|idee) ist",
    r"das (?:ding|problem|thema) ist",
    r"mein (?:problem|punkt) ist",
    r"was ich (?:wissen|sagen|fragen) (?:will|wollte|möchte) ist",
    r"(?:ich )?(?:habe|hätte|hab) (?:mal )?(?:eine|ne) (?:kurze )?frage",
    r"(?:eine )?kurze frage",
    r"eine frage",
    r"ich (?:wollte|möchte|würde gerne|würde gern|will) (?:mal )?(?:fragen|wissen)",
    r"ich (?:frage|frag) mich",
    r"ich (?:habe|hab) mich gefragt",
    r"lass(?:en sie)? mich (?:mal )?(?:kurz )?(?:überlegen|nachdenken|sehen)",
    r"(?:moment|augenblick|warte|warten sie)(?: mal)?",
)

_TAGS = {
    ("richtig",): words("ist sehr nicht das war genau ganz völlig absolut so auch alles"),
    ("okay",): words("ist bin sind war das schon ganz alles auch ja nicht okay"),
    **dict.fromkeys(
        phrases("oder", "nicht wahr", "ne", "gell", "gelle", "gelt", "oder nicht",
                "stimmt's", "stimmts", "oder was", "nich"),
        frozenset(),
    ),
}  # fmt: skip

_LEADS = phrases(
    "also", "na", "ja", "und", "okay", "ok", "hallo", "entschuldigung", "entschuldigen sie",
    "sag mal", "sagen sie mal", "gut", "so", "nun", "guten tag", "hi", "hey", "moin",
    "servus", "grüß gott", "bitte", "übrigens", "ach", "na ja",
)  # fmt: skip

_TAILS = phrases(
    "sag mir", "sagen sie mir", "zeig mir", "zeigen sie mir", "erklär mir",
    "erklären sie mir", "mir sagen", "uns sagen", "mir zeigen", "mir erklären", "gib mir",
    "geben sie mir", "mir geben",
)  # fmt: skip

_BACKCHANNELS = (
    "ja", "jaja", "genau", "okay", "ok", "aha", "stimmt", "alles klar", "mhm", "hm", "mm",
    "verstehe", "ich verstehe", "klar", "gut", "richtig", "achso", "ach so", "jawohl",
    "jo", "jep", "super", "prima", "natürlich", "sicher", "in ordnung", "ah", "oh",
    "echt", "toll", "schön", "sehr gut", "na klar", "logisch", "eben", "exakt", "korrekt",
    "danke",
)  # fmt: skip

WORDS = CueWords(
    code="de",
    conjunctions=words(
        "und aber oder denn weil dass wenn ob obwohl als sondern sowie damit falls sodass "
        "nachdem bevor"
    ),
    prepositions=words(
        "für von zum zur im am ins beim vom gegen ohne seit bis zwischen neben hinter in "
        "wegen trotz statt während innerhalb außerhalb bei"
    ),
    # Not "das" (a pronoun as often: "was ist das"), "sein", "ihr", "es".
    determiners=words(
        "der die den dem des ein eine einen einem einer eines mein meine meinen meinem "
        "meiner dein deine deinen deinem ihre ihren ihrem unser unsere unseren unserem euer "
        "eure kein keine keinen keinem jeder jede jedes jeden jedem diese dieser diesen diesem"
    ),
    fillers=words("äh ähm öh öhm ehm hm hmm em"),
    # Separable particles: they end finished sentences ("kommst du mit", "mach es aus").
    particles=words(
        "an auf aus mit vor zu nach um durch über unter ab ein zurück weg los her hin vorbei "
        "fest fort weiter heim rein raus runter rauf hoch"
    ),
    prefaces=PREFACES,
    leads=_LEADS,
    wh=_WH,
    inversions=_INVERSIONS,
    subjects=_PRONOUNS,
    # Not "wollen", "möchten", "haben": main verbs as often ("was möchten Sie?").
    auxiliaries=words(
        "kann kannst können könnte könntest könnten darf darfst dürfen soll sollte sollst "
        "sollen muss musst müssen werde wirst wird werden würde würdest würden"
    ),
    copulas=words("bin bist ist sind seid war warst waren"),
    embedders=words("wo wann wie was warum wieso wer welche welcher welches ob dass wohin woher"),
    tags=_TAGS,
    completes={"und": words("na")},  # "na und?"
    tails=_TAILS,
    backchannels=_BACKCHANNELS,
    number_nouns=words(
        "nummer telefonnummer handynummer rufnummer code postleitzahl plz pin konto "
        "kontonummer karte kartennummer durchwahl kundennummer referenz"
    ),
    digit_words=words("null eins zwei zwo drei vier fünf sechs sieben acht neun"),
)
