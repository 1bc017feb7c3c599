"""Turn clips in Spanish, French and German (``bench/turn_taking.py --language``): the
same kinds as :mod:`testkit.turn_clips`' English set, spoken by espeak-ng's voice for
each language. Mostly questions, some requests; pauses after a dangling word, a preface
and a filler.
"""

from __future__ import annotations

from testkit.turn_clips import COMPLETE, PAUSED, VOICES

SPANISH_COMPLETE = (
    "¿A qué hora abre el museo?",
    "¿Puedes decirme qué tiempo hará mañana?",
    "¿Dónde está la estación de tren más cercana?",
    "¿Cuánto cuesta un billete a Madrid?",
    "¿Hay una farmacia abierta cerca de aquí?",
    "¿Tienes una mesa libre para dos personas?",
    "¿Cómo puedo cambiar mi contraseña?",
    "¿Por qué no funciona la calefacción?",
    "¿Me puedes recordar llamar a mi hermana?",
    "¿Cuál es la capital de Australia?",
    "Pon una alarma para las siete de la mañana.",
    "Quiero pedir una pizza grande con champiñones.",
)
SPANISH_PAUSED = (
    ("unfinished", "¿Puedes reservar una mesa para dos personas el viernes?", "para"),
    ("unfinished", "Quiero un café con leche y un cruasán.", "con"),
    ("unfinished", "Necesito llegar al aeropuerto y no sé qué autobús tomar.", "y"),
    ("preface", "La cosa es que mi paquete nunca llegó.", "es"),
    ("preface", "Tengo una pregunta, ¿a qué hora cierra la tienda?", "pregunta"),
    ("hesitation", "Quería pedir, eh, una pizza con champiñones.", "eh"),
)
FRENCH_COMPLETE = (
    "À quelle heure ouvre le musée?",
    "Pouvez-vous me dire quel temps il fera demain?",
    "Où est la gare la plus proche?",
    "Combien coûte un billet pour Lyon?",
    "Est-ce qu'il y a une pharmacie ouverte près d'ici?",
    "Avez-vous une table libre pour deux personnes?",
    "Comment puis-je changer mon mot de passe?",
    "Pourquoi le chauffage ne marche pas?",
    "Peux-tu me rappeler d'appeler ma sœur?",
    "Quelle est la capitale de l'Australie?",
    "Mets une alarme pour sept heures du matin.",
    "Je voudrais commander une grande pizza aux champignons.",
)
FRENCH_PAUSED = (
    ("unfinished", "Pouvez-vous réserver une table pour deux personnes vendredi?", "pour"),
    ("unfinished", "Je voudrais un café et un croissant.", "et"),
    ("unfinished", "Je dois aller à l'aéroport mais je ne sais pas quel bus prendre.", "mais"),
    ("preface", "Le problème, c'est que mon colis n'est jamais arrivé.", "c'est"),
    ("preface", "J'ai une question, à quelle heure ferme le magasin?", "question"),
    ("hesitation", "Je voudrais commander, euh, une pizza aux champignons.", "euh"),
)
GERMAN_COMPLETE = (
    "Wann öffnet das Museum?",
    "Kannst du mir sagen, wie das Wetter morgen wird?",
    "Wo ist der nächste Bahnhof?",
    "Wie viel kostet eine Fahrkarte nach Berlin?",
    "Gibt es hier in der Nähe eine Apotheke?",
    "Haben Sie einen Tisch für zwei Personen frei?",
    "Wie kann ich mein Passwort ändern?",
    "Warum funktioniert die Heizung nicht?",
    "Kannst du mich daran erinnern, meine Schwester anzurufen?",
    "Was ist die Hauptstadt von Australien?",
    "Stell einen Wecker für sieben Uhr morgens.",
    "Ich möchte eine große Pizza mit Pilzen bestellen.",
)
GERMAN_PAUSED = (
    ("unfinished", "Können Sie einen Tisch für zwei Personen am Freitag reservieren?", "für"),
    # Not "einen Kaffee und …": espeak pauses before that "und", so the cut missed it.
    ("unfinished", "Ich brauche ein Taxi zum Hauptbahnhof.", "zum"),
    ("unfinished", "Ich muss zum Flughafen, weil mein Flug um neun geht.", "weil"),
    ("preface", "Die Sache ist, mein Paket ist nie angekommen.", "ist"),
    ("preface", "Ich habe eine Frage, wann schließt der Laden?", "Frage"),
    ("hesitation", "Ich möchte, ähm, eine Pizza mit Pilzen bestellen.", "ähm"),
)
# language → (complete turns, paused turns, the voices that speak them)
LANGUAGE_SETS = {
    "en": (COMPLETE, PAUSED, VOICES),
    "es": (SPANISH_COMPLETE, SPANISH_PAUSED, ("espeak-es",)),
    "fr": (FRENCH_COMPLETE, FRENCH_PAUSED, ("espeak-fr",)),
    "de": (GERMAN_COMPLETE, GERMAN_PAUSED, ("espeak-de",)),
}
