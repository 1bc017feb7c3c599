"""How a transcript ends in Spanish, French and German: questions with and without their
marks, unfinished endings, prefaces, tags, particles and false questions."""

from __future__ import annotations

import pytest

from pipeline.turns.languages import CUE_LANGUAGES, backchannels, canonical, cue_words
from pipeline.turns.text_cues import Ending, ending

Q, S, U = Ending.QUESTION, Ending.STATEMENT, Ending.UNFINISHED

SPANISH = [
    ("¿Puedes ayudarme con la reserva?", Q),
    ("puedes ayudarme con la reserva", Q),  # no marks at all
    ("¿Tienes tiempo mañana", Q),  # the opening "¿" alone
    ("qué hora es", Q),
    ("a qué hora abre el museo", Q),
    ("por qué no vienes", Q),
    ("dónde está", Q),  # Spanish drops the subject: whole
    ("hay un banco cerca del hotel", Q),
    ("oye cuánto cuesta esto", Q),  # a lead-in
    ("me puedes decir dónde está el baño", Q),
    ("sabes dónde está el banco", Q),
    ("es caro, ¿verdad?", Q),  # tags
    ("es caro verdad", Q),
    ("es caro no", Q),
    ("mañana a las seis vale", Q),
    ("que hora es", S),  # unaccented "que" is a conjunction, not "qué"
    ("cuando llegues llámame", S),
    ("qué bien", S),  # exclamations
    ("cómo no", S),
    ("hay que esperar", S),  # statements that open like questions
    ("tienes razón", S),
    ("puede ser", S),
    ("sabes que te quiero", S),
    ("es verdad", S),  # tags that end the statement itself
    ("creo que no", S),
    ("no vale", S),
    ("cómo puedo", S),  # no body yet
    ("quiero pedir una pizza grande", S),
    ("dime un chiste", S),
    ("creo que si", S),  # "si" completes "creo que" (the accent dropped)
    ("me puedes decir", U),  # the thing is to come
    ("quiero un café con", U),
    ("voy a la", U),
    ("necesito un taxi para", U),
    ("quiero reservar una mesa para dos, este", U),  # a filler
    ("eh", U),
    ("la cosa es", U),  # prefaces
    ("bueno, lo que quiero saber es", U),
    ("tengo una pregunta", U),
    ("quería preguntarte algo", U),
    ("déjame pensar", U),
]

FRENCH = [
    ("Pouvez-vous m'aider ?", Q),
    ("pouvez-vous m'aider", Q),
    ("est-ce que vous avez une chambre", Q),
    ("qu'est-ce que c'est", Q),
    ("y a-t-il un bus pour l'aéroport", Q),
    ("à quelle heure ouvre le musée", Q),
    ("où est la gare", Q),
    ("comment allez-vous", Q),
    ("quelle heure est-il", Q),
    ("c'est quoi", Q),  # the interrogative left in place
    ("tu pars quand", Q),
    ("savez-vous où se trouve la pharmacie", Q),
    ("bonjour, avez-vous une table pour deux", Q),
    ("c'est loin, non", Q),  # tags
    ("c'est loin non", Q),
    ("c'est bon hein", Q),
    ("c'est bien ça, n'est-ce pas", Q),
    ("on se voit demain d'accord", Q),
    ("pouvez-vous", S),  # no body yet
    ("où est", S),
    ("y a-t-il", S),
    ("qu'est-ce que vous", S),
    ("quel dommage", S),  # exclamations
    ("quelle chance", S),
    ("je sais pas quoi", S),  # not a question in place
    ("je pense que non", S),
    ("je suis d'accord", S),
    ("allez-y", S),  # imperatives
    ("prends-la", S),  # a joined pronoun does not dangle
    ("raconte-moi une blague", S),
    ("je voudrais réserver une table pour deux personnes", S),
    ("on se retrouve après", S),  # a particle
    ("pouvez-vous me dire", U),
    ("dites-moi", U),
    ("est-ce que", U),
    ("je voudrais un café et", U),
    ("je vais à la", U),
    ("je voudrais, euh", U),
    ("la chose c'est", U),  # prefaces
    ("je me demandais", U),
    ("alors j'ai une question", U),
    ("je voudrais savoir", U),
]

GERMAN = [
    ("Kannst du mir helfen?", Q),
    ("kannst du mir helfen", Q),
    ("können sie mir sagen wo der bahnhof ist", Q),  # the copula ends the embedded clause
    ("gibt es hier eine Apotheke", Q),
    ("ist das richtig", Q),
    ("hast du Zeit", Q),
    ("haben Sie einen Tisch frei", Q),
    ("weißt du wo der Bahnhof ist", Q),
    ("weisst du wo der bahnhof ist", Q),  # Swiss spelling
    ("wie spät ist es", Q),
    ("wie viel kostet das", Q),
    ("wo ist der Bahnhof", Q),
    ("was für ein Auto hast du", Q),
    ("entschuldigung, wo ist die Toilette", Q),
    ("das ist gut, oder?", Q),  # tags
    ("das ist gut, oder", Q),
    ("das stimmt, nicht wahr", Q),
    ("das ist teuer gell", Q),
    ("kannst du", S),  # no body yet
    ("gibt es", S),
    ("wo ist", S),
    ("wo kann ich", S),
    ("wo ich wohne ist es ruhig", S),  # a subordinate clause
    ("wie schön", S),  # exclamations
    ("was für ein Tag", S),
    ("kommen Sie rein", S),  # an imperative
    ("wann kommt der Zug an", S),  # separable particles: no cue either way
    ("kommst du mit", S),
    ("das ist gut oder", S),  # "oder" bare may go on: no cue either way
    ("ich hätte gerne eine große Pizza", S),
    ("erzähl mir einen Witz", S),
    ("können Sie mir sagen", U),
    ("sag mir", U),
    ("Kaffee oder", U),
    ("möchtest du Kaffee oder", U),
    ("ich möchte einen Tisch für", U),
    ("ich fahre mit dem", U),
    ("ich hätte gern, ähm", U),
    ("die Sache ist", U),  # prefaces
    ("also ich habe eine Frage", U),
    ("ich wollte fragen", U),
    ("lass mich überlegen", U),
]


@pytest.mark.parametrize(("text", "expected"), SPANISH)
def test_spanish(text: str, expected: Ending) -> None:
    assert ending(text, "es") is expected


@pytest.mark.parametrize(("text", "expected"), FRENCH)
def test_french(text: str, expected: Ending) -> None:
    assert ending(text, "fr") is expected


@pytest.mark.parametrize(("text", "expected"), GERMAN)
def test_german(text: str, expected: Ending) -> None:
    assert ending(text, "de") is expected


def test_the_words_are_the_languages_own() -> None:
    # The same bare words ask in one language and not in another.
    assert ending("puedes ayudarme con la reserva", "en") is Ending.STATEMENT
    assert ending("kannst du mir helfen", "es") is Ending.STATEMENT
    # A Spanish "con" dangles; read as English it is no cue.
    assert ending("quiero un café con", "en") is Ending.STATEMENT


@pytest.mark.parametrize(
    ("code", "expected"),
    [("es", "es"), ("ES", "es"), ("es-MX", "es"), ("fr_CA", "fr"), ("German", "de"),
     ("français", "fr"), ("it", None), ("", None), (None, None)],
)  # fmt: skip
def test_language_codes(code: str | None, expected: str | None) -> None:
    assert canonical(code) == expected


@pytest.mark.parametrize("language", CUE_LANGUAGES)
def test_every_language_has_backchannels_in_its_words(language: str) -> None:
    words = cue_words(language)
    assert words is not None and words.backchannels == backchannels(language)
    assert len(words.backchannels) >= 8
    assert backchannels("it") == backchannels("en")  # no list of its own: English
