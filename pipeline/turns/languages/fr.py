"""French cue words.

Words are split at hyphens, so the inverted forms read as a verb and its subject
("pouvez-vous" → "pouvez vous", "y a-t-il" → "y a t il", the euphonic "t" skipped) and
"est-ce que" / "qu'est-ce que" as three words; an object pronoun joined by a hyphen
("prends-la") does not dangle. Spoken French also asks with the interrogative left in
place ("tu pars quand", "c'est quoi"), and with a flat tag ("…, non", "hein",
"n'est-ce pas").
"""

from __future__ import annotations

from pipeline.turns.languages import CueWords, Opener, openers, phrases, words

_SUBJECTS = words("je j tu il elle on nous vous ils elles ce")
_VERBS = (
    "avez as a ai avons ont pouvez peux peut pourriez pourrais pourrait puis pouvons "
    "voulez veux veut voudriez voudrais savez sais sait connaissez connais êtes es est "
    "sont suis sommes faut dois doit devez devrais devrait allez vas va faites fais fait "
    "prenez prends aimez aimes"
)
_INVERSIONS = {
    **openers([*_VERBS.split(), "y a"], Opener(only=_SUBJECTS, more=1)),
    # "n'est-ce pas" is a tag, "n'y a-t-il" a question.
    **openers(["n'y a"], Opener(only=_SUBJECTS, more=1)),
}
# "quelle chance !", "quel dommage !": exclamations.
_EXCLAIMED = words(
    "dommage chance horreur bonheur plaisir beau belle joie honte bazar galère surprise idée "
    "merveille catastrophe"
)
_WH = {
    **openers(
        [
            "pourquoi", "comment", "où", "quand", "combien", "quel", "quelle", "quels",
            "quelles", "lequel", "laquelle", "lesquels", "lesquelles", "qui", "quoi", "d'où",
            "à quelle", "à quel", "de quoi", "à qui", "avec qui", "pour qui", "de qui",
            "depuis quand", "jusqu'à quand", "à quoi", "par où", "qu'est ce qui",
        ],
        Opener(never=_EXCLAIMED),
    ),
    # "est-ce que" + a statement: a subject, then its verb ("qu'est-ce que c'est": both).
    **openers(["est ce que"], Opener(more=1)),
    **openers(["qu'est ce que"], Opener()),
    # The "que" elided before its subject: "est-ce qu'il y a…", "qu'est-ce qu'on mange".
    **openers(
        [f"{q} ce qu'{s}" for q in ("est", "qu'est") for s in ("il", "elle", "on", "ils",
                                                            "elles", "un", "une")],
        Opener(),
    ),
}  # fmt: skip

_NON_NOT_AFTER = words(
    "que mais oh ah bah ben moi toi lui alors donc si non pas pourquoi ou euh eh bien sûr"
)
_OK_NOT_AFTER = words("c'est est ok oui ah oh bon alors d'accord ça tout pas suis sont es être")
_TAGS = {
    ("non",): _NON_NOT_AFTER,
    ("d'accord",): words(
    "suis es est sommes êtes sont pas tout bien d'accord être ok oui ah oh bon alors"
    ),
    ("ok",): _OK_NOT_AFTER,
    **dict.fromkeys(
        phrases("n'est ce pas", "hein", "pas vrai", "c'est ça", "tu crois", "vous croyez",
                "ou pas", "ou quoi", "ou non", "tu vois", "vous voyez"),
        frozenset(),
    ),
}  # fmt: skip

PREFACES = (
    r"(?:la|ma) (?:chose|question|idée) (?:c'est|est)",
    r"le (?:truc|problème|souci|sujet|hic|point) (?:c'est|est)",
    r"ce que je (?:veux|voulais|voudrais|aimerais)(?: (?:savoir|dire|demander))? c'est",
    r"je me (?:demandais|demande)(?: (?:une chose|quelque chose))?",
    r"(?:j'ai|j'avais) une (?:petite )?question(?: pour (?:vous|toi))?",
    r"(?:une )?(?:petite )?question",
    r"je (?:voulais|voudrais|veux|aimerais) (?:savoir|demander|(?:vous|te) demander)"
    r"(?: (?:une chose|quelque chose))?",
    r"(?:laissez|laisse) moi (?:réfléchir|voir|penser)",
    r"(?:attendez|attends|voyons|voyons voir)",
    r"en fait",
)

_LEADS = phrases(
    "alors", "bon", "bah", "ben", "et", "donc", "dites", "dis", "écoutez", "écoute",
    "excusez moi", "excuse moi", "pardon", "bonjour", "bonsoir", "salut", "oui", "ok",
    "d'accord", "mais", "au fait", "s'il vous plaît", "s'il te plaît", "madame",
    "monsieur",
)  # fmt: skip

_BACKCHANNELS = (
    "oui", "ouais", "ouaip", "d'accord", "ok", "okay", "ah bon", "je vois", "mhm", "mmh",
    "mm", "hum", "bien sûr", "exactement", "c'est ça", "voilà", "entendu", "parfait",
    "super", "très bien", "ah oui", "bien", "ah", "oh", "ah d'accord", "tout à fait",
    "en effet", "absolument", "carrément", "effectivement", "génial", "merci",
)  # fmt: skip

_TAILS = phrases(
    "dire", "dites moi", "dis moi", "expliquer", "montrer", "indiquer", "recommander", "conseiller"
)  # fmt: skip

WORDS = CueWords(
    code="fr",
    # Not "quand": it ends questions ("tu pars quand") as often as it opens a clause.
    conjunctions=words("et mais ou donc car que qu si lorsque puisque comme ni parce"),
    prepositions=words(
        "à de en dans par pour sur sous avec sans chez vers entre contre depuis pendant "
        "envers malgré selon parmi jusqu'à jusqu'au"
    ),
    determiners=words(
        "le la les l un une des du au aux mon ma mes ton ta tes son sa ses notre nos votre "
        "vos leurs ce cet cette ces chaque quelques plusieurs"
    ),
    fillers=words("euh euhh heu hum hmm mmm em emm"),
    particles=words(
        "après avant dessus dessous dedans dehors derrière devant ensemble loin près partout"
    ),
    prefaces=PREFACES,
    leads=_LEADS,
    wh=_WH,
    inversions=_INVERSIONS,
    subjects=_SUBJECTS - words("ce"),
    auxiliaries=words(
        "peux peut pouvez pourriez pourrais pourrait puis pouvons dois doit devez devrais "
        "devrait devriez veux veut voulez voudrais voudriez faut"
    ),
    # French keeps its subjects: "où est" wants one ("où est la gare", "où est-il").
    copulas=words("est sont es êtes suis sommes"),
    embedders=words("où quand comment pourquoi si qui quel quelle quels quelles ce combien"),
    tags=_TAGS,
    completes={"si": words("mais ben bah que oh ah eh si")},  # "mais si" (yes, it is)
    tails=_TAILS,
    wh_final=words("quoi où quand comment combien pourquoi qui"),
    wh_final_not_after=words("pas sais sait importe n'importe voilà"),
    skipped=words("t"),
    backchannels=_BACKCHANNELS,
    number_nouns=words(
        "numéro numero téléphone telephone portable code postal pin compte carte poste "
        "référence reference dossier contrat"
    ),
    digit_words=words("zéro zero un une deux trois quatre cinq six sept huit neuf"),
)
