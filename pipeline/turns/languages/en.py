"""English cue words.

Only words that almost never end a finished sentence dangle: "so" ends "I think so",
"then" ends "see you then", "off" ends "turn it off", "this" ends "can you read this?",
so they are not there (or, for "so", excepted after the verbs it completes).

Questions by form, for transcripts with no "?": a wh-word ("where does…") or a verb
before its subject ("can you…", "is there…", "does it…"), each checked against what
comes next so that relatives ("what I want is…"), exclamations ("what a day", "how
nice"), suggestions ("how about…") and imperatives ("do it", "will do", "can't wait",
"have a nice day") are not questions; and flat tags ("…, right", "… isn't it").
"""

from __future__ import annotations

from pipeline.turns.languages import CueWords, Opener, openers, phrases, words

# Short answers that show the user is listening, not taking the floor. Matched as whole
# utterances, each phrase possibly repeated ("yeah yeah", "okay okay okay").
# Non-lexical ones come in the spellings STT services use ("Mm-hmm.", "Mhm.", "Hum.").
DEFAULT_BACKCHANNELS = (
    "mhm", "mhmm", "mm", "mmm", "mm hmm", "mm hm", "mmhmm", "hm", "hmm", "hum", "uh huh",
    "uhuh", "uh hum", "ah ha", "yeah", "yes", "yep", "yup",
    "ok", "okay", "right", "alright", "all right", "sure", "i see", "got it", "gotcha",
    "cool", "nice", "great", "good", "fine", "oh", "ah", "aha", "oh okay", "oh i see",
    "true", "exactly", "indeed", "of course", "totally", "makes sense", "sounds good",
    "wow", "oh wow", "interesting", "thanks", "thank you",
)  # fmt: skip

_SUBJECT_PRONOUNS = words("i you he she it we they")
_DETERMINERS = words("the my your his her its our their any some every all no")
_SOMEONE = words(
    "there this that these those anyone anybody someone somebody everyone everybody "
    "anything something everything one"
)
_SUBJECTS = _SUBJECT_PRONOUNS | _DETERMINERS | _SOMEONE
# "do it", "do your best", "have a nice day": only subjects that agree with the verb,
# and no article, so that imperatives stay statements.
_DO = words("i you we they these those people any some most all")
_DOES = words(
    "he she it this that the anyone anybody someone somebody everyone everything "
    "anything something my your his her its our their"
)
_HAVE = words("i you we they")
_HAS = words("he she it this that the anyone someone everyone my your his her its our their")
_SINGULAR = _DOES | words("there a an")
_PLURAL = words("you we they there these those the my your our their any some all")

_MODALS = words(
    "can can't cannot could couldn't will won't would wouldn't should shouldn't shall may "
    "might must"
)
_DO_FORMS = words("do don't does doesn't did didn't")
_HAVE_FORMS = words("have haven't has hasn't had hadn't")
AUXILIARIES = _MODALS | _DO_FORMS | _HAVE_FORMS
COPULAS = words("is isn't are aren't was wasn't were weren't am")
_VERB_NEXT = AUXILIARIES | COPULAS

_INVERSIONS = {
    **openers(_MODALS, Opener(only=_SUBJECTS, more=1)),
    **openers(["do", "don't"], Opener(only=_DO, more=1)),
    **openers(["does", "doesn't"], Opener(only=_DOES, more=1)),
    **openers(["did", "didn't"], Opener(only=_SUBJECTS, more=1)),
    **openers(["have", "haven't"], Opener(only=_HAVE, more=1)),
    **openers(["has", "hasn't"], Opener(only=_HAS, more=1)),
    **openers(["had", "hadn't"], Opener(only=_SUBJECT_PRONOUNS, more=1)),
    **openers(["is", "isn't", "was", "wasn't"], Opener(only=_SINGULAR, more=1)),
    **openers(["are", "aren't", "were", "weren't"], Opener(only=_PLURAL, more=1)),
    **openers(["am"], Opener(only=words("i"), more=1)),
}
# "what I want", "when you get there", "what a day", "what about": no question.
_RELATIVE = _SUBJECT_PRONOUNS | words("a an about")
_HOW = words(
    "much many long far old often big tall soon late early come fast large heavy expensive well"
)
_WH = {
    **openers(["what", "which", "who", "whom", "whose"], Opener(never=_RELATIVE)),
    **openers(["how"], Opener(only=_VERB_NEXT | _HOW)),
    **openers(["why"], Opener(only=_VERB_NEXT | words("not"))),
    **openers(["when", "where"], Opener(only=_VERB_NEXT)),
    **openers(["what's", "where's", "who's", "how's", "when's", "why's"], Opener()),
}

# A tag after a statement, spoken flat; not after the words that make it a statement's
# own end ("turn right", "that's okay", "that's correct").
_RIGHT_NOT_AFTER = words(
    "turn that's thats it's its you're youre he's she's we're they're all exactly quite "
    "just is was are be the your my on far hard sounds done go keep stay bear get got do "
    "doing right alright that what yeah yes to not feel feels"
)
_OKAY_NOT_AFTER = words(
    "that's thats it's its is was are be i'm im you're youre sounds seems looks feel feels "
    "all okay ok yeah yes oh fine not we're they're he's she's"
)
_CORRECT_NOT_AFTER = words(
    "that's thats it's is was are be not politically absolutely perfectly you're i'm quite exactly"
)
_TAGS = {
    **dict.fromkeys(phrases("right"), _RIGHT_NOT_AFTER),
    **dict.fromkeys(phrases("okay", "ok"), _OKAY_NOT_AFTER),
    **dict.fromkeys(phrases("correct"), _CORRECT_NOT_AFTER),
    **dict.fromkeys(
        phrases(
            "isn't it", "aren't you", "aren't they", "don't you", "doesn't it", "didn't you",
            "didn't it", "wasn't it", "won't you", "can't you", "haven't you", "isn't that",
            "huh", "or not", "or what",
        ),
        frozenset(),
    ),
}  # fmt: skip

_PERSONS = words("me us him her them")
_DITRANSITIVE = words("tell show give send bring teach lend hand pass offer")

PREFACES = (
    r"(?:i was|i am|i'm) (?:just )?wondering(?: about (?:something|this|that))?",
    r"(?:i have|i had|i've got|i got) a (?:quick )?question(?: for you)?",
    r"(?:a )?quick question",
    r"i (?:want|wanted|would like|'d like|need) to (?:ask|know)(?: you)?(?: (?:about )?something)?",
    r"i'd like to (?:ask|know)(?: you)?(?: (?:about )?something)?",
    r"let me (?:think|see|ask(?: you)?)",
    r"(?:the|my) (?:thing|question|problem|issue|point) is",
    r"(?:here's|here is) (?:the thing|what i (?:want|need))",
    r"what i (?:want|need|wanted|meant)(?: to (?:know|ask|say))? is",
)

_LEADS = phrases(
    "so", "well", "okay", "ok", "and", "hey", "hi", "hello", "oh", "but", "also", "yeah",
    "yes", "sorry", "alright", "all right", "right", "now", "please", "excuse me",
    "by the way", "actually",
)  # fmt: skip

WORDS = CueWords(
    code="en",
    conjunctions=words(
        "and but or nor so because cause although unless until whereas if whether than plus"
    ),
    prepositions=words(
        "about against among at between beyond despite during except for from into like of "
        "onto per till to toward towards unlike upon via with"
    ),
    determiners=words("a an the my your our their every"),
    fillers=words("um umm uhm uh uhh erm er hmm"),
    particles=words(
        "in on off out up down over around by through along across after before inside "
        "outside behind above below near under within without back away"
    ),
    prefaces=PREFACES,
    leads=_LEADS,
    wh=_WH,
    inversions=_INVERSIONS,
    subjects=_SUBJECT_PRONOUNS,
    auxiliaries=AUXILIARIES,
    copulas=COPULAS,
    embedders=words("what which who where when why how if whether"),
    tags=_TAGS,
    completes={
        "so": words("think thought hope guess believe suppose said say says told do did does not")
    },
    tails=tuple((verb, person) for verb in sorted(_DITRANSITIVE) for person in sorted(_PERSONS)),
    softeners=words("please maybe possibly also just ever even really actually"),
    backchannels=DEFAULT_BACKCHANNELS,
    number_nouns=words(
        "number phone cell mobile code zip postcode pin account card extension ext digits id "
        "reference confirmation policy member ssn"
    ),
    digit_words=words("zero oh one two three four five six seven eight nine"),
)
