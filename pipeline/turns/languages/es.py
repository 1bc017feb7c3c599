"""Spanish cue words.

Spanish asks with an accented interrogative ("qué", "dónde", "por qué", "a qué hora"):
the same words unaccented are conjunctions and relatives ("que", "donde", "cuando"), so
only the accented ones open a question. A yes/no question has a statement's word order,
so only verbs that mostly open questions count as its form ("puedes…", "¿hay…",
"me podría…"), not before the words that make them statements ("hay que", "tienes
razón", "puede ser"). A "¿" opens a question whatever follows.
"""

from __future__ import annotations

from pipeline.turns.languages import CueWords, Opener, openers, phrases, words

_WH_WORDS = "qué cómo dónde adónde cuándo cuál cuáles quién quiénes cuánto cuánta cuántos cuántas"
_PIED = "a de en con para por desde hasta sobre"  # "a qué hora", "de dónde", "por qué"
# "¡qué bien!", "¡qué pena!", "¡cómo no!": exclamations, not questions.
_EXCLAIMED = words(
    "bien bonito bonita rico rica pena lástima suerte horror bueno buena guay raro rara "
    "maravilla asco fuerte increíble barbaridad miedo vergüenza alegría gracioso graciosa "
    "padre chido bárbaro genial lindo linda divertido interesante curioso sorpresa gusto "
    "emoción ilusión tontería desastre mal triste caro cara"
)
_WH = openers(
    [*_WH_WORDS.split(), *(f"{p} {w}" for p in _PIED.split() for w in _WH_WORDS.split())],
    Opener(never=_EXCLAIMED),
)
_WH.update(openers(["cómo"], Opener(never=_EXCLAIMED | words("no"))))
_ANY = Opener()
_INVERSIONS = {
    **openers(
        [
            "puedes", "pueden", "podría", "podrías", "podrían", "podemos", "conoces",
            "quieres", "es posible", "se puede",
            "me puedes", "me puede", "me podría", "me podrías", "nos puede", "nos puedes",
            "nos podría", "me dices", "me dice", "me da", "me das", "me trae", "me pasas",
            "me ayudas", "me ayuda",
        ],
        _ANY,
    ),
    **openers(["puede", "tiene", "sabe"], Opener(never=words("ser que razón"))),
}  # fmt: skip
_INVERSIONS.update(
    {
        p: Opener(never=words("que razón suerte ganas"))
        for p in phrases("hay", "tienes", "tienen", "sabes", "saben")
    }
)

_NO_NOT_AFTER = words(
    "que yo ya todavía aún aun eso esto pues no sí si tú él ella casi mejor también tampoco "
    "claro creo ahora bueno nunca porque por oh ah uy decir"
)
_TAGS = {
    ("no",): _NO_NOT_AFTER,
    ("verdad",): words("es la una de toda decir era sea sí muy mi tu su"),
    ("vale",): words("no que lo más eso esto cuánto cuanto ya bueno sí vale pues"),
    ("cierto",): words("es lo muy no eso por bien totalmente más"),
    ("sabes",): words("no lo ya tú que si ni me te y"),
    **dict.fromkeys(
        phrases("o no", "no es cierto", "no es verdad", "no crees", "a que sí", "me entiendes"),
        frozenset(),
    ),
}

PREFACES = (
    r"(?:la|mi) (?:cosa|pregunta|duda|idea|consulta) es",
    r"(?:el|mi) (?:problema|tema|asunto|caso) es",
    r"lo que (?:quiero|quería|necesito|quisiera)(?: (?:saber|decir|preguntar(?:te|le)?))? es",
    r"(?:me (?:preguntaba|pregunto)|estaba pensando)(?: (?:una cosa|algo))?",
    r"(?:tengo|tenía) una (?:pregunta|duda|consulta)(?: para (?:ti|usted))?",
    r"una (?:pregunta|duda|consulta)(?: rápida)?",
    r"(?:quería|quiero|quisiera|me gustaría|necesito) (?:saber|preguntar(?:te|le)?|"
    r"consultar(?:te|le)?)(?: (?:una cosa|algo))?",
    r"(?:te|le|os) (?:quería|quiero|quisiera) preguntar(?: (?:una cosa|algo))?",
    r"(?:déjame|dejame|déjeme|dejeme) (?:pensar|ver)",
    r"a ver",
)

_LEADS = phrases(
    "bueno", "pues", "entonces", "oye", "oiga", "mira", "mire", "y", "vale", "hola",
    "disculpa", "disculpe", "perdón", "perdona", "perdone", "a ver", "o sea", "ok", "okay",
    "buenos días", "buenas tardes", "buenas noches", "buenas", "por favor", "oiga usted",
)  # fmt: skip

_TAILS = phrases(
    "decir", "dime", "dígame", "digame", "explicar", "explícame", "recomendar",
    "enseñar", "mostrar",
)  # fmt: skip

_BACKCHANNELS = (
    "sí", "si", "vale", "ajá", "aja", "claro", "ya", "bueno", "de acuerdo", "mm", "mmm",
    "mhm", "ok", "okay", "entiendo", "exacto", "exactamente", "perfecto", "genial",
    "cierto", "ah", "oh", "eh", "claro que sí", "por supuesto", "ya veo", "entendido",
    "muy bien", "bien", "órale", "dale", "sale", "correcto", "gracias",
)  # fmt: skip

WORDS = CueWords(
    code="es",
    conjunctions=words("y e o u ni pero porque que si aunque sino mientras cuando donde"),
    prepositions=words(
        "a ante bajo con contra de desde durante en entre hacia hasta mediante para por según "
        "sin sobre tras al del"
    ),
    determiners=words(
        "el la los las un una unos unas mi mis tu tus su sus nuestro nuestra nuestros "
        "nuestras vuestro vuestra cada"
    ),
    fillers=words("eh ehm em emm este mmm mm hmm"),
    particles=frozenset(),
    prefaces=PREFACES,
    leads=_LEADS,
    wh=_WH,
    inversions=_INVERSIONS,
    subjects=words("yo tú él ella usted nosotros nosotras vosotros ellos ellas ustedes"),
    # Spanish drops its subjects: "¿dónde está?" is whole; only modals want a verb after.
    auxiliaries=words(
        "puedo puedes puede podemos pueden podría podrías podríamos podrían debo debes debe "
        "debemos deben debería deberías"
    ),
    embedders=words("qué que dónde donde cuándo cuando cómo como si cuál quién cuánto"),
    tags=_TAGS,
    # "creo que si" (a recognizer that drops the accent of "sí").
    completes={"si": words("que creo pues eso digo ya claro")},
    tails=_TAILS,
    backchannels=_BACKCHANNELS,
    number_nouns=words(
        "número numero teléfono telefono móvil movil celular código codigo postal pin cuenta "
        "tarjeta extensión extension dni referencia póliza poliza"
    ),
    digit_words=words("cero uno una dos tres cuatro cinco seis siete ocho nueve"),
)
