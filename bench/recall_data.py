"""Write the synthetic recall set of ``bench.recall`` (``tests/data/recall/``).

Four pairs of friends, twelve weekly sessions each (48 sessions, about 20
turns a session). Most of each session is small talk — the weather, the
commute, cooking, sleep, work, errands, television, phones, neighbours, plans
— **composed** from many templates and slot values, seeded, so no line is said
twice by one user (:data:`MAX_REPEATS`; real people do not repeat themselves
verbatim, and a set that does lets a retriever win by spotting repeats). The
small talk brushes the same subjects as the facts (jobs, pets, travel, food,
family), so near misses compete with every answer. A turn is one to three
sentences, and a fact is often said in passing, after or before a sentence on
something else ("Same here, I need a holiday. My cousin Greta just got
engaged!"), as in real chat logs, where one turn mixes subjects.

Planted among it are facts, each followed by the friend's reaction and
sometimes mentioned again weeks later (not an answer: a distractor), with the
pairs' facts differing in their values and wording. Questions point at the
ids of the turns that answer them (gold), of five kinds, in about the mix of
public long-conversation sets:

- ``lexical``: the question repeats a content word of its answer ("Which club
  did Theo join?" for "I've joined a bouldering club");
- ``paraphrase``: the same ask in other words ("What does Theo do in his free
  time?");
- ``multi-hop``: two turns in two sessions together answer it (either found
  counts as found; ``evidence@k`` counts both);
- ``temporal``: "when did …": the dated turn that says it;
- ``two-speaker``: both friends say something on the same subject; the
  question asks what one of them said.

A second file, ``time_questions.json``, asks about a subject of small talk
that comes up in many sessions, each time in other words ("What was said
about the weather two weeks ago?"), each with the moment it is asked
(``as_of``): only the time expression tells which session is meant. Its gold
is every turn on that subject inside the window a reader gives the expression
(written out here with calendar arithmetic, independently of the product's
parser), and a question is kept only when the subject also came up earlier
outside that window.

The held-out part is fixed by hash, before any run: a question is held out
when the first byte of ``sha256("recall-v2/" + question_id)`` is below 52
(about a fifth); :data:`HELD_OUT_DIGEST` is the sha256 of the held-out ids
(sorted, one per line, both files), written down before the set was first
measured, and the unit tests check the files against both.
``python -m bench.recall_data`` rewrites the files; the output is
deterministic (seeded), so re-running changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "recall"
PAIRS = [("Maya", "Theo"), ("Lena", "Omar"), ("Jonas", "Priya"), ("Sofia", "Kenji")]
#: The possessive pronoun of the second friend of each pair.
THEIRS = {"Theo": "his", "Omar": "his", "Priya": "her", "Kenji": "his"}
SESSIONS = 12
#: Turns a session has at least (small talk fills up to it around the planted facts).
SESSION_TURNS = 20
START = datetime(2024, 1, 8, 18, 0, tzinfo=UTC)
#: The most times one user's conversation may contain the same line.
MAX_REPEATS = 1
#: The most times one user's small talk may use the same template (with other slot values).
TEMPLATE_CAP = 8
#: How many sentences a turn of small talk has (drawn uniformly from this list).
SENTENCES = [1, 1, 1, 2, 2, 3]
#: The chance a planted sentence comes after a sentence of small talk, and before one.
LEAD_IN, FOLLOW_ON = 0.5, 0.3
#: ``held_out(id)`` salt: a fresh split for this version of the set.
SALT = "recall-v2/"
#: sha256 of the held-out question ids, sorted, one per line (questions and time
#: questions together). Written down before the set was first measured.
HELD_OUT_DIGEST = "e49100a0bffe585190731cdc47399a79c34bacf0ceb9224e73e64267a82e634c"


def held_out(question_id: str) -> bool:
    """Whether a question belongs to the held-out part (fixed by hash)."""
    return hashlib.sha256((SALT + question_id).encode()).digest()[0] < 52


def held_out_digest(ids: list[str]) -> str:
    """The digest of a list of held-out ids (see :data:`HELD_OUT_DIGEST`)."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


# --------------------------------------------------------------------------- small talk

#: Slot values of the small-talk templates.
SLOTS: dict[str, list[str]] = {
    "rain": ["raining", "pouring", "drizzling", "grey and windy", "freezing", "foggy", "sleeting"],
    "period": ["week", "weekend", "month", "day", "afternoon"],
    "weekday": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    "daypart": ["morning", "evening", "afternoon", "lunchtime"],
    "spot": ["bus stop", "library", "park", "station", "post office", "corner shop", "gym"],
    "transport": ["train", "bus", "tram", "ferry", "night bus"],
    "minutes": ["ten", "fifteen", "twenty", "forty", "thirty-five"],
    "street": ["the high street", "the ring road", "the bridge", "Mill Lane", "the roundabout"],
    "dish": [
        "lentil soup",
        "chilli",
        "risotto",
        "banana bread",
        "curry",
        "lasagne",
        "pancakes",
        "dumplings",
        "stew",
        "a fish pie",
        "flatbreads",
        "a lemon tart",
    ],
    "verdict": [
        "really good",
        "a bit bland",
        "too salty",
        "surprisingly nice",
        "a disaster",
        "better than expected",
        "just okay",
    ],
    "takeaway": ["pizza", "noodles", "kebabs", "sushi", "fish and chips", "tacos"],
    "hours": ["four", "five", "three", "six"],
    "noise": [
        "the upstairs neighbours",
        "the storm",
        "a car alarm",
        "the radiator",
        "the cat next door",
    ],
    "bedtime": ["ten", "half ten", "eleven"],
    "dream": [
        "missing an exam",
        "a flooded kitchen",
        "talking geese",
        "losing my teeth",
        "being late for a flight",
    ],
    "show": ["a documentary", "a crime series", "a cooking show", "a sitcom", "a quiz show"],
    "subject": [
        "deep sea creatures",
        "a missing painting",
        "old railways",
        "competitive baking",
        "a small island town",
        "space probes",
        "a family of spies",
    ],
    "count": ["six", "seven", "eight", "five"],
    "report": ["quarterly report", "budget", "slide deck", "client proposal", "project plan"],
    "office": ["printer", "coffee machine", "air conditioning", "lift", "wifi"],
    "lunch": ["the Thai place", "the burger bar", "the new deli", "the canteen", "the noodle bar"],
    "chore": [
        "sorting the laundry",
        "doing the taxes",
        "repainting the hallway",
        "clearing out the garage",
        "fixing the shelf",
        "washing the windows",
    ],
    "grocery": ["oat milk", "eggs", "bread flour", "coriander", "tinned tomatoes", "bananas"],
    "device": ["phone", "laptop", "tablet", "headphones", "smartwatch"],
    "glitch": [
        "freezing",
        "dying by lunchtime",
        "losing wifi",
        "restarting on its own",
        "running hot",
    ],
    "neighbours": [
        "had a party",
        "were drilling",
        "practised the drums",
        "argued loudly",
        "played music",
    ],
    "late": ["two", "midnight", "one in the morning", "three"],
    "plan": [
        "grab coffee",
        "go for a walk",
        "try the new bakery",
        "see a film",
        "get lunch",
        "go to the market",
    ],
    "clock": ["six", "seven", "noon", "half five", "eight"],
    "wow": [
        "Oh wow",
        "No way",
        "Wait, really",
        "Ha",
        "Oh nice",
        "Whoa",
        "Oh no",
        "Seriously",
        "Huh",
        "Aw",
    ],
    "comment": [
        "that's a big deal",
        "I didn't see that coming",
        "tell me more next time",
        "you never mentioned it",
        "good for you",
        "that sounds like you",
        "how are you feeling about it",
        "I'm so jealous",
        "that's brilliant",
        "I'd love to hear how it goes",
        "what a week you've had",
        "fair enough",
        "that explains a lot",
    ],
    "same": [
        "Same here",
        "Tell me about it",
        "Honestly same",
        "I know the feeling",
        "Story of my life",
        "Ugh, I hear you",
    ],
    "gripe": [
        "I'm exhausted",
        "nothing goes to plan",
        "I need a holiday",
        "the week flew by",
        "I've had no time for anything",
    ],
}

#: Subjects of small talk: templates (``{slot}`` from :data:`SLOTS`), and how a question
#: names the subject.
TOPICS: dict[str, tuple[str, list[str]]] = {
    "weather": (
        "the weather",
        [
            "It's been {rain} all {period}, I'm so done with this weather.",
            "Did you see the storm on {weekday}, our street flooded!",
            "The forecast says it'll be {rain} again next {period}.",
            "I got soaked walking to the {spot} this {daypart}.",
            "Finally some sun, I sat outside the {spot} for an hour.",
            "The weather can't decide, {rain} in the morning and sunny by {daypart}.",
            "It was so cold on {weekday} that the pond in the park froze.",
            "My umbrella blew inside out near the {spot}, I gave up on it.",
            "Apparently it might snow by {weekday}, I don't believe it.",
        ],
    ),
    "commute": (
        "the commute",
        [
            "The {transport} was {minutes} minutes late again this {daypart}.",
            "There were roadworks on {street} so I missed my {transport}.",
            "My {transport} got cancelled on {weekday} and I waited in the cold.",
            "Traffic on {street} was a nightmare this {daypart}.",
            "I've started walking to work when the {transport} is this unreliable.",
            "Someone fainted on the {transport} on {weekday}, we sat at the {spot} for ages.",
            "I got a seat on the {transport} for once, I even read a chapter.",
            "A ticket inspector fined half the {transport} on {weekday}.",
        ],
    ),
    "cooking": (
        "cooking",
        [
            "I made a big pot of {dish} for the {period}.",
            "I tried a new recipe for {dish}, it came out {verdict}.",
            "I burnt the {dish} on {weekday}, the whole flat smelled of smoke.",
            "We ordered {takeaway} on {weekday} because nobody wanted to cook.",
            "My {dish} was {verdict}, I'll add more garlic next time.",
            "I finally bought a decent knife, chopping onions is fun now.",
            "We had friends over on {weekday} and I served {dish}.",
        ],
    ),
    "sleep": (
        "sleep",
        [
            "I only slept {hours} hours, {noise} kept me up.",
            "I napped on the sofa on {weekday} and then lay awake all night.",
            "A new pillow changed my life, I sleep like a baby now.",
            "{noise} woke me at {late}, I'm a zombie today.",
            "I've been going to bed at {bedtime} and I feel much better.",
            "I had the weirdest dream about {dream} on {weekday} night.",
            "I keep waking up at {late} and can't get back to sleep.",
        ],
    ),
    "tv": (
        "television",
        [
            "We started {show} about {subject}, it's {verdict}.",
            "I watched a whole season of {show} about {subject} over the {period}.",
            "Everyone at work talks about {show} about {subject}, have you seen it?",
            "I fell asleep halfway through {show} about {subject}.",
            "The ending of {show} about {subject} made no sense at all.",
            "I'm rewatching an old series from when we were teenagers.",
        ],
    ),
    "work": (
        "work",
        [
            "I had {count} meetings on {weekday}, I got nothing done.",
            "My manager wants the {report} finished by {weekday}.",
            "The {office} at the office is broken again.",
            "We had a team lunch at {lunch} on {weekday}.",
            "I stayed late on {weekday} to finish the {report}.",
            "The {report} got sent back with a hundred comments.",
            "Half my team is off sick, so I'm covering for everyone.",
            "We got a new manager on {weekday}, she seems nice enough.",
        ],
    ),
    "errands": (
        "chores",
        [
            "I spent {weekday} afternoon {chore}.",
            "The supermarket was out of {grocery} again.",
            "I finally got round to {chore}, it took all {daypart}.",
            "I queued at the {spot} for half an hour on {weekday}.",
            "I forgot to buy {grocery} again, third time this week.",
            "The washing machine flooded the bathroom on {weekday}.",
        ],
    ),
    "gadgets": (
        "gadgets",
        [
            "My {device} keeps {glitch}.",
            "I dropped my {device} on {weekday} and cracked it.",
            "I updated my {device} and now it keeps {glitch}.",
            "I bought a charger for my {device} and it's the wrong kind.",
            "My {device} is so old the apps won't install any more.",
        ],
    ),
    "neighbours": (
        "the neighbours",
        [
            "The neighbours {neighbours} until {late} on {weekday}.",
            "Our neighbours {neighbours} all {daypart}, I couldn't think.",
            "Someone keeps parking in our spot, I left a note on {weekday}.",
            "The people downstairs brought us cake on {weekday}, so sweet.",
        ],
    ),
    "plans": (
        "meeting up",
        [
            "We should {plan} some time next week.",
            "{weekday} works for me, maybe around {clock}?",
            "I can't on {weekday}, how about the {daypart} after?",
            "Let's {plan} when things calm down a bit.",
            "I ran into an old school friend at the {spot} on {weekday}.",
            "Text me when you're free, I'm around most {daypart}s.",
        ],
    ),
    "moan": (
        "",
        [
            "{same}, {gripe}.",
            "{same}, this {period} has been long.",
            "{same}, roll on the weekend.",
        ],
    ),
}
#: Subjects a time question may ask about (the others are too vague to ask about).
ASKABLE = [
    "weather",
    "commute",
    "cooking",
    "sleep",
    "tv",
    "work",
    "errands",
    "gadgets",
    "neighbours",
]
_SLOT = re.compile(r"\{(\w+)\}")


def compose(template: str, rng: random.Random) -> str:
    """``template`` with every ``{slot}`` filled from :data:`SLOTS`."""
    text = _SLOT.sub(lambda m: rng.choice(SLOTS[m.group(1)]), template)
    return text[0].upper() + text[1:]


# --------------------------------------------------------------------------- facts

#: Each pair's facts (index = pair): the values the planted turns and questions use.
FACTS: list[dict[str, Any]] = [
    {
        "job": ("paramedic", "the city ambulance service"),
        "club": ("bouldering", "Thursday"),
        "pet": ("greyhound", "Pixel", "chewed through my headphone cable"),
        "allergy": ("peanuts", "satay"),
        "move": ("Ljubljana", "April"),
        "brother": ("Felix", "geology"),
        "cousin": ("Rosalind", "her climbing partner", "Porto"),
        "colleague": ("Desmond", "a bike repair shop"),
        "event": ("half marathon", "ran my first half marathon"),
        "trip": ("Iceland", "March"),
        "car": ("an old Volvo estate", "a tiny electric Fiat"),
        "dish": ("spicy ramen", "my mum's cabbage rolls"),
        "fear": "deep water",
        "concert": ("Björk", "2019"),
        "language": "Portuguese",
        "fix": "the boiler",
        "first": ("donated blood", "give blood"),
        "novel": "lighthouse keepers",
        "holiday": ("go skiing in the Alps", "stay home and paint the kitchen"),
        "injury": ("ankle", "five-a-side football"),
    },
    {
        "job": ("pastry chef", "a hotel kitchen"),
        "club": ("pottery", "Tuesday"),
        "pet": ("parrot", "Mango", "learned to whistle the ringtone of my phone"),
        "allergy": ("shellfish", "the prawn starter"),
        "move": ("Tallinn", "June"),
        "brother": ("Anton", "architecture"),
        "cousin": ("Greta", "a dentist from Oslo", "Valencia"),
        "colleague": ("Imogen", "a vegan café"),
        "event": ("violin recital", "played my first violin recital"),
        "trip": ("Japan", "October"),
        "car": ("a red Mini", "a rusty Land Rover"),
        "dish": ("my dad's jollof rice", "anything with aubergine"),
        "fear": "spiders",
        "concert": ("Radiohead", "2017"),
        "language": "Korean",
        "fix": "the leaking roof",
        "first": ("ran a 10k", "run a 10k"),
        "novel": "a lost polar expedition",
        "holiday": ("visit my grandparents in Crete", "work extra shifts at the hotel"),
        "injury": ("wrist", "a beginners' ice skating lesson"),
    },
    {
        "job": ("air traffic controller", "the regional airport"),
        "club": ("sailing", "Sunday"),
        "pet": ("tortoise", "Sheldon", "escaped under the fence into the neighbour's garden"),
        "allergy": ("sesame", "a bagel"),
        "move": ("Ghent", "May"),
        "brother": ("Rafael", "veterinary medicine"),
        "cousin": ("Beatrix", "a sound engineer", "Bergen"),
        "colleague": ("Lionel", "a tiny cinema"),
        "event": ("chess tournament", "played in my first chess tournament"),
        "trip": ("Peru", "September"),
        "car": ("a white camper van", "a second-hand Toyota"),
        "dish": ("fish tacos", "a proper Sunday roast"),
        "fear": "heights",
        "concert": ("Adele", "2016"),
        "language": "Italian",
        "fix": "the broken heating",
        "first": ("gave a talk at a conference", "speak at a conference"),
        "novel": "a family of beekeepers",
        "holiday": ("go hiking in Scotland", "host my whole family for a week"),
        "injury": ("shoulder", "a rock climbing session"),
    },
    {
        "job": ("marine biologist", "the aquarium research lab"),
        "club": ("birdwatching", "Saturday"),
        "pet": ("ferret", "Noodle", "stole a sock and hid it behind the sofa"),
        "allergy": ("kiwi fruit", "a fruit salad"),
        "move": ("Krakow", "August"),
        "brother": ("Tobias", "linguistics"),
        "cousin": ("Clementine", "a jazz pianist", "Lyon"),
        "colleague": ("Marcus", "a climbing gym"),
        "event": ("cooking contest", "entered my first cooking contest"),
        "trip": ("Morocco", "November"),
        "car": ("a battered old Saab", "a shiny new Tesla"),
        "dish": ("my grandmother's pierogi", "Thai green curry"),
        "fear": "flying",
        "concert": ("Beyoncé", "2018"),
        "language": "Greek",
        "fix": "the mouldy bathroom wall",
        "first": ("went scuba diving", "go scuba diving"),
        "novel": "a Victorian circus",
        "holiday": ("take a cooking course in Naples", "finally tidy up the attic"),
        "injury": ("knee", "a trail run in the rain"),
    },
]


@dataclass
class Builder:
    """One pair's twelve sessions: planted blocks of turns among composed small talk."""

    a: str
    o: str
    index: int
    rng: random.Random
    user: str = ""
    blocks: dict[int, list[list[tuple[str, str, list[str]]]]] = field(default_factory=dict)
    questions: list[dict[str, Any]] = field(default_factory=list)
    used: Counter[str] = field(default_factory=Counter)
    templates: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.user = f"user-{self.index + 1}"
        self.blocks = {s: [] for s in range(SESSIONS)}

    def other(self, speaker: str) -> str:
        return self.o if speaker == self.a else self.a

    def open_templates(self, templates: list[str]) -> list[str]:
        return [t for t in templates if self.templates[t] < TEMPLATE_CAP]

    def line(self, templates: list[str], cap: int | None = TEMPLATE_CAP) -> str:
        """A line composed from ``templates`` that this user has not said yet (each
        template used at most ``cap`` times)."""
        usable = templates if cap is None else self.open_templates(templates)
        for _ in range(200):
            template = self.rng.choice(usable)
            text = compose(template, self.rng)
            if self.used[text] < MAX_REPEATS:
                self.used[text] += 1
                self.templates[template] += 1
                return text
        raise RuntimeError(f"the templates ran out of new lines: {templates[0]!r}")

    def sentence(self) -> tuple[str, str]:
        """A new sentence of small talk and its subject (subjects tried in random order)."""
        topics = list(TOPICS)
        self.rng.shuffle(topics)
        for topic in topics:
            if self.open_templates(TOPICS[topic][1]):
                try:
                    return self.line(TOPICS[topic][1]), topic
                except RuntimeError:
                    continue
        raise RuntimeError("the small talk ran out of new lines")

    def small_talk(self) -> tuple[str, list[str]]:
        """A turn of small talk: one to three sentences (:data:`SENTENCES`), its subjects."""
        said = [self.sentence() for _ in range(self.rng.choice(SENTENCES))]
        return " ".join(text for text, _ in said), sorted({topic for _, topic in said})

    def wrapped(self, speaker: str, text: str) -> tuple[str, str, list[str]]:
        """A planted sentence said in passing, as people do: after a sentence of small talk
        (:data:`LEAD_IN`), before one (:data:`FOLLOW_ON`), both or neither."""
        self.used[text] += 1
        parts, topics = [text], set()
        if self.rng.random() < LEAD_IN:
            lead, topic = self.sentence()
            parts.insert(0, lead)
            topics.add(topic)
        if self.rng.random() < FOLLOW_ON:
            tail, topic = self.sentence()
            parts.append(tail)
            topics.add(topic)
        return speaker, " ".join(parts), sorted(topics)

    def reaction(self) -> str:
        return self.line(["{wow}, {comment}.", "{wow}, {comment}!"], cap=None)

    def plant(self, session: int, turns: list[tuple[str, str]], react: bool = True) -> list[str]:
        """Plant a block of turns (each :meth:`wrapped`; with the friend's reaction after it
        unless ``react`` is off); returns references to them, resolved to turn ids by
        :meth:`build`."""
        block = [self.wrapped(speaker, text) for speaker, text in turns]
        if react:
            block.append((self.other(turns[-1][0]), self.reaction(), []))
        self.blocks[session].append(block)
        b = len(self.blocks[session]) - 1
        return [f"{self.user}/s{session + 1:02d}/@{b}.{i}" for i in range(len(turns))]

    def ask(self, kind: str, question: str, gold: list[str]) -> None:
        self.questions.append(
            {
                "id": f"{self.user}/q{len(self.questions) + 1:02d}",
                "kind": kind,
                "question": question,
                "gold": gold,
            }
        )

    def build(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        sessions, placed = [], {}
        for s in range(SESSIONS):
            at = START + timedelta(days=7 * s, hours=self.index)
            blocks = list(self.blocks[s])
            self.rng.shuffle(blocks)
            fill = max(4, SESSION_TURNS - sum(len(b) for b in blocks))
            # where each block goes: after which small-talk line (never the very first)
            after = sorted(self.rng.choices(range(1, fill + 1), k=len(blocks)))
            turns: list[tuple[str, str, list[str]]] = []  # speaker, text, subjects
            order = sorted(zip(after, range(len(blocks)), strict=True))
            k = 0
            for position in range(fill + 1):
                while k < len(order) and order[k][0] == position:
                    for i, turn in enumerate(blocks[order[k][1]]):
                        ref = self._ref(s, self.blocks[s].index(blocks[order[k][1]]), i)
                        placed[ref] = len(turns)
                        turns.append(turn)
                    k += 1
                if position == fill:
                    break
                speaker = self.a if not turns or turns[-1][0] == self.o else self.o
                turns.append((speaker, *self.small_talk()))
            sid = f"s{s + 1:02d}"
            sessions.append(
                {
                    "user": self.user,
                    "session": sid,
                    "date": at.isoformat(),
                    "turns": [
                        {"id": f"{self.user}/{sid}/t{i + 1:02d}", "speaker": sp, "text": tx}
                        | ({"topics": tp} if tp else {})
                        for i, (sp, tx, tp) in enumerate(turns)
                    ],
                }
            )
        for q in self.questions:
            q["gold"] = [self._resolve(g, placed) for g in q["gold"]]
            q["user"] = self.user
            q["held_out"] = held_out(q["id"])
        return sessions, self.questions

    def _ref(self, session: int, block: int, i: int) -> str:
        return f"{self.user}/s{session + 1:02d}/@{block}.{i}"

    @staticmethod
    def _resolve(ref: str, placed: dict[str, int]) -> str:
        user, session, _ = ref.split("/")
        return f"{user}/{session}/t{placed[ref] + 1:02d}"


def pick(rng: random.Random, *options: str) -> str:
    return rng.choice(options)


def plant_facts(b: Builder) -> None:
    """Plant one pair's facts and ask about them (values from :data:`FACTS`)."""
    a, o, r, f = b.a, b.o, b.rng, FACTS[b.index]
    his = THEIRS[o]
    s = list(range(SESSIONS))
    r.shuffle(s)
    later = lambda after: r.choice([x for x in range(SESSIONS) if x > after] or [after])  # noqa: E731

    job, place = f["job"]
    [g] = b.plant(
        s[0],
        [
            (
                a,
                pick(
                    r,
                    f"I started a new job last month, I'm a {job} at {place} now.",
                    f"Big news: I got a new job, I'm a {job} at {place} since last month.",
                ),
            )
        ],
    )
    b.plant(
        later(s[0]),
        [
            (o, f"How's the new job at {place} treating you?"),
            (a, "Long shifts, but the team is lovely."),
        ],
        react=False,
    )
    b.ask("lexical", f"What new job did {a} start?", [g])
    b.ask("paraphrase", f"What is {a}'s occupation?", [g])
    b.ask("temporal", f"When did {a} start working as a {job}?", [g])

    hobby, day = f["club"]
    [g] = b.plant(s[1], [(o, f"I joined a {hobby} club, we meet every {day} evening.")])
    b.ask("lexical", f"Which club did {o} join?", [g])
    b.ask("paraphrase", f"What does {o} do in {his} free time?", [g])
    b.ask("lexical", f"On which evening does {o}'s {hobby} club meet?", [g])

    animal, name, mischief = f["pet"]
    [g] = b.plant(s[2], [(a, f"We adopted a {animal} from the shelter and named it {name}!")])
    x = later(s[2])
    [g2] = b.plant(x, [(a, f"{name} {mischief}, I can't stay mad at that face.")])
    b.plant(
        later(x),
        [(o, f"Is {name} behaving these days?"), (a, "Mostly, thanks for asking.")],
        react=False,
    )
    b.ask("lexical", f"What is the name of the {animal} {a} adopted?", [g])
    b.ask("paraphrase", f"What kind of animal does {a} keep at home?", [g])
    b.ask("multi-hop", f"What mischief did {a}'s {animal} get up to?", [g, g2])
    b.ask("lexical", f"What did {name} do?", [g2])

    food, dish = f["allergy"]
    [g] = b.plant(s[3], [(o, f"Turns out I'm allergic to {food}, {dish} made my throat swell.")])
    b.ask("lexical", f"What is {o} allergic to?", [g])
    b.ask("paraphrase", f"Which food does {o} have to avoid?", [g])

    city, month = f["move"]
    [g] = b.plant(s[4], [(a, f"We signed the lease on a flat in {city}, we move in {month}.")])
    b.ask("lexical", f"Where did {a} sign a lease?", [g])
    b.ask("paraphrase", f"Which city is {a} relocating to?", [g])
    b.ask("temporal", f"When is {a} moving into the new flat?", [g])

    sib, subject = f["brother"]
    [g] = b.plant(s[5], [(o, f"My little brother {sib} got into university to study {subject}.")])
    b.ask("lexical", f"What is {sib} going to study at university?", [g])
    b.ask("paraphrase", f"What will {o}'s sibling major in?", [g])

    cousin, partner, where = f["cousin"]
    x, y = sorted(s[6:8])
    [g1] = b.plant(x, [(a, f"My cousin {cousin} just got engaged to {partner}!")])
    [g2] = b.plant(y, [(a, f"{cousin}'s wedding is going to be in {where} next summer.")])
    b.ask("multi-hop", f"In which city will {a}'s cousin get married?", [g1, g2])
    b.ask("multi-hop", f"Who is {cousin} marrying, and where?", [g1, g2])
    b.ask("lexical", f"Who did {cousin} get engaged to?", [g1])

    colleague, venture = f["colleague"]
    [g1] = b.plant(x, [(o, f"My colleague {colleague} is leaving the company in the spring.")])
    [g2] = b.plant(y, [(o, f"{colleague} told me the plan: opening {venture} after leaving.")])
    b.ask("multi-hop", f"What will {o}'s departing colleague do next?", [g1, g2])
    b.ask("lexical", f"What is {colleague} opening?", [g2])

    event, did = f["event"]
    [g] = b.plant(s[8], [(a, f"Last Sunday I {did}, I'm still buzzing.")])
    b.ask("temporal", f"When did {a} take part in the {event}?", [g])
    b.ask("lexical", f"How did {a}'s first {event} go?", [g])

    country, month = f["trip"]
    [g] = b.plant(s[9], [(o, f"We booked flights to {country} for the end of {month}.")])
    b.ask("temporal", f"When is {o} flying to {country}?", [g])
    b.ask("paraphrase", f"Which country is {o} going to visit?", [g])

    car_a, car_o = f["car"]
    ga, go = b.plant(
        s[10],
        [
            (a, f"My car is {car_a}, it never lets me down."),
            (o, f"Mine is {car_o}, it's always at the mechanic."),
        ],
    )
    b.ask("two-speaker", f"What car does {o} drive?", [go])
    b.ask("two-speaker", f"What kind of vehicle does {a} own?", [ga])

    dish_a, dish_o = f["dish"]
    ga, go = b.plant(
        s[11],
        [
            (a, f"I could eat {dish_a} every single day."),
            (o, f"Not me, give me {dish_o} any time."),
        ],
    )
    b.ask("two-speaker", f"What food could {a} eat every day?", [ga])
    b.ask("two-speaker", f"Which dish does {o} love?", [go])

    [g] = b.plant(s[0], [(a, f"I've been scared of {f['fear']} since I was a kid.")])
    b.ask("lexical", f"What has {a} been scared of since childhood?", [g])
    b.ask("paraphrase", f"Does {a} have any phobias?", [g])

    artist, year = f["concert"]
    [g] = b.plant(
        s[1], [(o, f"Honestly the best concert I've ever been to was {artist} in {year}.")]
    )
    b.ask("lexical", f"What was the best concert {o} has been to?", [g])
    b.ask("temporal", f"When did {o} see {artist} live?", [g])

    [g] = b.plant(s[2], [(a, f"I'm learning {f['language']} with an app every morning.")])
    b.ask("lexical", f"Which language is {a} learning?", [g])
    b.ask("paraphrase", f"What foreign tongue is {a} studying?", [g])

    [g] = b.plant(s[3], [(o, f"Our landlord finally fixed {f['fix']} after three weeks.")])
    b.ask("lexical", f"What did {o}'s landlord fix?", [g])
    b.ask("paraphrase", f"What was wrong in {o}'s apartment?", [g])

    did, do = f["first"]
    [g] = b.plant(s[4], [(a, f"I {did} for the first time today, a bit nervous but fine.")])
    b.ask("temporal", f"When did {a} first {do}?", [g])

    [g] = b.plant(s[5], [(o, f"I'm reading a thick novel about {f['novel']}, can't put it down.")])
    b.ask("lexical", f"What is the novel {o} is reading about?", [g])
    b.ask("paraphrase", f"What book has {o} got {his} nose in?", [g])

    plan_a, plan_o = f["holiday"]
    ga, go = b.plant(
        s[6], [(a, f"Over the holidays I'm going to {plan_a}."), (o, f"Lucky you, I'll {plan_o}.")]
    )
    b.ask("two-speaker", f"What are {o}'s plans for the holidays?", [go])
    b.ask("two-speaker", f"Where is {a} going over the holidays?", [ga])

    joint, how = f["injury"]
    [g] = b.plant(s[7], [(o, f"I hurt my {joint} on Thursday during {how}.")])
    b.ask("temporal", f"When did {o} hurt {his} {joint}?", [g])
    b.ask("paraphrase", f"How did {o} get injured?", [g])


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(2702)
    sessions, questions = [], []
    for index, (a, o) in enumerate(PAIRS):
        b = Builder(a, o, index, rng)
        plant_facts(b)
        s, q = b.build()
        sessions.extend(s)
        questions.extend(q)
    return sessions, questions


# --------------------------------------------------------------------------- time questions

MONTH_NAMES = ["January", "February", "March", "April"]
Window = tuple[str, datetime, datetime, datetime]


def _windows(date: datetime, rng: random.Random) -> Window:
    """A phrase, the moment it is asked, and the window ``[lo, hi)`` it means (a session
    held on Monday ``date``)."""
    day = date.replace(hour=0, minute=0)
    kind = rng.choice(["yesterday", "days", "last week", "two weeks", "month"])
    if kind == "yesterday":
        return "yesterday", date + timedelta(days=1, hours=2), day, day + timedelta(days=1)
    if kind == "days":
        return "three days ago", date + timedelta(days=3), day, day + timedelta(days=1)
    if kind == "last week":  # asked on the next Wednesday: the Monday-to-Sunday before
        return "last week", date + timedelta(days=9), day, day + timedelta(days=7)
    if kind == "two weeks":  # asked two weeks later: the days around then
        asked = date + timedelta(days=14, hours=1)
        centre = asked - timedelta(days=14)
        return "two weeks ago", asked, centre - timedelta(days=3), centre + timedelta(days=3)
    lo = day.replace(day=1)
    hi = lo.replace(month=lo.month + 1)
    asked = datetime(2024, 4, 20, 12, 0, tzinfo=UTC)
    return f"in {MONTH_NAMES[lo.month - 1]}", asked, lo, hi


def time_questions(sessions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Questions about recurring small talk that only their time expression settles."""
    rng = random.Random(2727)
    out: list[dict[str, Any]] = []
    for user in sorted({s["user"] for s in sessions}):
        said = [
            (datetime.fromisoformat(s["date"]), t)
            for s in sessions
            if s["user"] == user
            for t in s["turns"]
        ]
        n = 0
        for topic in ASKABLE:
            dates = sorted({at for at, t in said if topic in t.get("topics", ())})
            for date in rng.sample(dates, min(2, len(dates))):
                phrase, asked, lo, hi = _windows(date, rng)
                gold = [t["id"] for at, t in said if topic in t.get("topics", ()) and lo <= at < hi]
                earlier = [t for at, t in said if topic in t.get("topics", ()) and at < lo]
                if not gold or not earlier or asked < hi.replace(hour=0) - timedelta(days=1):
                    continue
                n += 1
                qid = f"{user}/time{n:02d}"
                out.append(
                    {
                        "id": qid,
                        "kind": "time expression",
                        "question": f"What was said about {TOPICS[topic][0]} {phrase}?",
                        "as_of": asked.isoformat(),
                        "gold": gold,
                        "user": user,
                        "held_out": held_out(qid),
                    }
                )
    return out


def main() -> None:
    sessions, questions = build()
    timed = time_questions(sessions)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sessions.json").write_text(json.dumps(sessions, indent=1, ensure_ascii=False) + "\n")
    (OUT / "questions.json").write_text(json.dumps(questions, indent=1, ensure_ascii=False) + "\n")
    (OUT / "time_questions.json").write_text(json.dumps(timed, indent=1, ensure_ascii=False) + "\n")
    held = [q["id"] for q in questions + timed if q["held_out"]]
    print(f"{len(sessions)} sessions, {len(questions)} questions in {OUT}")
    print(f"{len(timed)} time-expression questions; held out: {len(held)}")
    print(f"held-out digest: {held_out_digest(held)}")


if __name__ == "__main__":
    main()
