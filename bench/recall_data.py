"""Write the synthetic recall set of ``bench.recall`` (``tests/data/recall/``).

Four pairs of speakers, twelve weekly sessions each (48 sessions). Planted in
the chit-chat are facts that questions ask about, each question with the ids
of the turns that answer it (gold), of five kinds:

- ``paraphrase``: the question says it in other words ("occupation" for
  "working as a paramedic");
- ``entity``: a rare name or thing the question repeats;
- ``multi-hop``: two turns in two sessions together answer it (either found
  counts as found; ``evidence@k`` counts both);
- ``temporal``: "when did …": the dated turn that says it;
- ``two-speaker``: both speakers talk about the same thing; the question asks
  what one of them said.

A second file, ``time_questions.json``, asks about small talk that recurs in
many sessions ("What was said about the weather two weeks ago?"), each with
the moment it is asked (``as_of``): only the time expression tells which
session's turn is meant. Its gold is every turn with that text inside the
window a reader gives the expression (written out here with calendar
arithmetic, independently of the product's parser), and a question is kept
only when the same text was also said earlier outside that window.

The held-out part is fixed by hash before any run: a question is held out
when the first byte of ``sha256(question_id)`` is below 52 (about a fifth).
``python -m bench.recall_data`` rewrites the files; the output is
deterministic (seeded), so re-running changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "recall"
PAIRS = [("Maya", "Theo"), ("Lena", "Omar"), ("Jonas", "Priya"), ("Sofia", "Kenji")]
SESSIONS = 12
START = datetime(2024, 1, 8, 18, 0, tzinfo=UTC)


def held_out(question_id: str) -> bool:
    """Whether a question belongs to the held-out part (fixed by hash)."""
    return hashlib.sha256(question_id.encode()).digest()[0] < 52


FILLER = [
    "How was your week?",
    "Pretty busy, lots of meetings and not much sleep.",
    "Did you watch the match on Saturday?",
    "No, I missed it, was it any good?",
    "The weather has been awful lately, rain every single day.",
    "I know, I had to cancel my run twice.",
    "Work is fine, the new manager is nice enough.",
    "I've been reading a lot more in the evenings.",
    "We should grab coffee next week.",
    "Sure, Thursday works for me.",
    "My phone keeps dying, I need a new battery.",
    "Have you tried that new bakery on the corner?",
    "Not yet, is it worth it?",
    "Their croissants are great but the queue is long.",
    "I spent the whole Sunday cleaning the flat.",
    "That sounds exhausting.",
    "I'm thinking about a short trip somewhere warm.",
    "A friend of mine works in a hospital and never has time off.",
    "I might get a pet someday, but not now.",
    "My cousin keeps sending me wedding videos.",
    "I started a new podcast about history.",
    "The train was late again this morning.",
    "I cooked a big pot of soup for the week.",
    "Honestly I just want a quiet weekend.",
]

JOBS = [
    ("paramedic", "the city ambulance service"),
    ("pastry chef", "a hotel kitchen"),
    ("air traffic controller", "the regional airport"),
    ("marine biologist", "the aquarium research lab"),
]
HOBBIES = ["bouldering", "pottery", "sailing", "birdwatching"]
PETS = [("greyhound", "Pixel"), ("parrot", "Mango"), ("tortoise", "Sheldon"), ("ferret", "Noodle")]
ALLERGIES = ["peanuts", "shellfish", "sesame", "kiwi fruit"]
CITIES = ["Porto", "Tallinn", "Ljubljana", "Valencia", "Bergen", "Krakow", "Ghent", "Lyon"]
SUBJECTS = ["geology", "architecture", "veterinary medicine", "linguistics"]
EVENTS = [
    ("half marathon", "ran my first half marathon"),
    ("violin recital", "played my first violin recital"),
    ("cooking contest", "entered a cooking contest"),
    ("chess tournament", "played in a chess tournament"),
]
RARE = [
    ("Ottoline", "restores old pianos", "in a barn near Aberdeen"),
    ("Casimir", "builds wooden kayaks", "by the lake"),
    ("Wilhelmina", "breeds alpacas", "on a farm in Wales"),
    ("Bartholomew", "repairs antique clocks", "in the old town"),
]
CARS = [("an old Volvo estate", "a tiny electric Fiat"), ("a red Mini", "a rusty Land Rover")]
DRINKS = [("oat flat white", "double espresso"), ("green tea", "hot chocolate")]
SPORTS = [("tennis", "badminton"), ("swimming", "cycling")]


class Builder:
    """Sessions of one pair, with planted turns; questions pointing at their ids."""

    def __init__(self, pair: tuple[str, str], index: int, rng: random.Random) -> None:
        self.a, self.b = pair
        self.user = f"user-{index + 1}"
        self.rng = rng
        self.index = index
        self.planted: dict[int, list[tuple[str, str]]] = {s: [] for s in range(SESSIONS)}
        self.questions: list[dict[str, Any]] = []
        self._qn = 0

    def plant(self, session: int, speaker: str, text: str) -> str:
        """Plant a turn; its id is known once the session is laid out (see :meth:`build`)."""
        self.planted[session].append((speaker, text))
        return f"{self.user}/s{session + 1:02d}/@{len(self.planted[session]) - 1}"

    def ask(self, kind: str, question: str, gold: list[str]) -> None:
        self._qn += 1
        self.questions.append(
            {"id": f"{self.user}/q{self._qn:02d}", "kind": kind, "question": question, "gold": gold}
        )

    def build(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        sessions, placed = [], {}
        for s in range(SESSIONS):
            at = START + timedelta(days=7 * s, hours=self.index)
            turns: list[tuple[str, str]] = []
            fillers = self.rng.sample(FILLER, 14)
            slots = sorted(self.rng.sample(range(2, 16), len(self.planted[s])))
            planted = iter(enumerate(self.planted[s]))
            nxt = next(planted, None)
            f = iter(fillers)
            position = 0
            while nxt is not None or position < 16:
                if nxt is not None and slots and position == slots[0]:
                    slots.pop(0)
                    k, (speaker, text) = nxt
                    placed[f"{self.user}/s{s + 1:02d}/@{k}"] = len(turns)
                    turns.append((speaker, text))
                    nxt = next(planted, None)
                else:
                    speaker = self.a if len(turns) % 2 == 0 else self.b
                    turns.append((speaker, next(f, "Anyway.")))
                position += 1
            sid = f"s{s + 1:02d}"
            sessions.append(
                {
                    "user": self.user,
                    "session": sid,
                    "date": at.isoformat(),
                    "turns": [
                        {"id": f"{self.user}/{sid}/t{i + 1:02d}", "speaker": sp, "text": tx}
                        for i, (sp, tx) in enumerate(turns)
                    ],
                }
            )
        for q in self.questions:
            q["gold"] = [self._resolve(g, placed) for g in q["gold"]]
            q["user"] = self.user
            q["held_out"] = held_out(q["id"])
        return sessions, self.questions

    @staticmethod
    def _resolve(ref: str, placed: dict[str, int]) -> str:
        user, session, _ = ref.split("/")
        return f"{user}/{session}/t{placed[ref] + 1:02d}"


def pair_set(b: Builder) -> None:
    a, o, i, rng = b.a, b.b, b.index, b.rng
    s = list(range(SESSIONS))
    rng.shuffle(s)
    job, place = JOBS[i]
    g = b.plant(s[0], a, f"I've been working as a {job} at {place} since the autumn.")
    b.ask("paraphrase", f"What is {a}'s occupation?", [g])
    b.ask("paraphrase", f"Where is {a} employed?", [g])
    hobby = HOBBIES[i]
    g = b.plant(s[1], o, f"On weekends I've taken up {hobby}, it clears my head.")
    b.ask("paraphrase", f"What does {o} do in their free time?", [g])
    b.ask("two-speaker", f"Which pastime did {o} pick up recently?", [g])
    animal, pet = PETS[i]
    g = b.plant(s[2], a, f"We adopted a {animal} and called it {pet}!")
    b.ask("paraphrase", f"What kind of animal does {a} have at home?", [g])
    b.ask("entity", f"Who is {pet}?", [g])
    food = ALLERGIES[i]
    g = b.plant(s[3], o, f"I can't eat anything with {food}, my throat swells up.")
    b.ask("paraphrase", f"Which food is {o} allergic to?", [g])
    city1, city2 = CITIES[2 * i], CITIES[2 * i + 1]
    g = b.plant(s[4], a, f"We finally signed the lease on a flat in {city1}.")
    b.ask("paraphrase", f"Which city did {a} relocate to?", [g])
    subject = SUBJECTS[i]
    g = b.plant(s[5], o, f"My younger brother Felix just enrolled to study {subject}.")
    b.ask("paraphrase", f"What is {o}'s sibling majoring in at university?", [g])
    b.ask("entity", "What is Felix studying?", [g])
    rare, does, where = RARE[i]
    g = b.plant(s[6], o, f"Did you ever meet {rare}? She {does} {where}.")
    b.ask("entity", f"Who {does}?", [g])
    b.ask("entity", f"What does {rare} do?", [g])
    b.ask("paraphrase", f"Which acquaintance of {o} works with her hands on old things?", [g])
    # multi-hop: two sessions together answer it
    x, y = sorted(s[7:9])
    g1 = b.plant(x, a, "My cousin Rosalind just got engaged to her climbing partner.")
    g2 = b.plant(y, a, f"Rosalind's wedding will be in {city2} next summer.")
    b.ask("multi-hop", f"In which city will {a}'s cousin get married?", [g1, g2])
    b.ask("multi-hop", "Who is Rosalind marrying, and where?", [g1, g2])
    g1 = b.plant(x, o, "My colleague Desmond is leaving the company in spring.")
    g2 = b.plant(y, o, "Desmond is opening a bike repair shop after he leaves.")
    b.ask("multi-hop", f"What will {o}'s departing colleague do next?", [g1, g2])
    b.ask("entity", "What is Desmond opening?", [g2])
    # temporal: "when" questions, answered by the dated turn
    event, did = EVENTS[i]
    g = b.plant(s[9], a, f"Last Sunday I {did}, my legs still hurt.")
    b.ask("temporal", f"When did {a} take part in the {event}?", [g])
    g = b.plant(s[10], o, "We booked flights to Iceland for the end of March.")
    b.ask("temporal", f"When is {o} travelling to Iceland?", [g])
    b.ask("paraphrase", f"Which country is {o} going to visit by plane?", [g])
    g = b.plant(s[11], a, "I passed my driving test yesterday, third attempt!")
    b.ask("temporal", f"When did {a} get a driving licence?", [g])
    b.ask("paraphrase", f"How many tries did {a} need to pass the driving exam?", [g])
    g = b.plant(s[0], o, "My grandmother turned ninety on Friday, we threw a party.")
    b.ask("temporal", f"When was {o}'s grandmother's ninetieth birthday?", [g])
    g = b.plant(s[1], a, "I quit my gym membership two weeks ago.")
    b.ask("temporal", f"When did {a} cancel the gym subscription?", [g])
    # two-speaker: the same topic from both; the question asks one of them
    car_a, car_o = CARS[i % 2]
    ga = b.plant(s[2], a, f"My car is {car_a}, it never breaks down.")
    go = b.plant(s[2], o, f"Mine is {car_o}, it's always in the garage.")
    b.ask("two-speaker", f"What car does {o} drive?", [go])
    b.ask("two-speaker", f"What vehicle does {a} own?", [ga])
    d_a, d_o = DRINKS[i % 2]
    ga = b.plant(s[3], a, f"I always order an {d_a} when we go out.")
    go = b.plant(s[3], o, f"And I always get a {d_o}.")
    b.ask("two-speaker", f"What does {a} usually order at the café?", [ga])
    b.ask("two-speaker", f"What is {o}'s usual coffee order?", [go])
    sp_a, sp_o = SPORTS[i % 2]
    ga = b.plant(s[4], a, f"I play {sp_a} every Tuesday evening.")
    go = b.plant(s[5], o, f"I prefer {sp_o}, mostly on Saturday mornings.")
    b.ask("two-speaker", f"Which sport does {o} prefer?", [go])
    b.ask("two-speaker", f"Which sport does {a} play on Tuesdays?", [ga])
    g = b.plant(s[6], a, f"I told {o} I'm scared of deep water since I was a kid.")
    b.ask("two-speaker", f"What is {a} afraid of?", [g])
    b.ask("paraphrase", f"Does {a} have any phobias?", [g])
    g = b.plant(s[7], o, "Honestly the best concert I've seen was Björk in 2019.")
    b.ask("entity", f"Which singer did {o} see in concert?", [g])
    b.ask("temporal", f"When did {o} see Björk live?", [g])
    g = b.plant(s[8], a, "I'm learning Portuguese with an app every morning.")
    b.ask("paraphrase", f"Which foreign language is {a} studying?", [g])
    g = b.plant(s[9], o, "Our landlord finally fixed the heating after three weeks.")
    b.ask("paraphrase", f"What problem did {o}'s apartment have?", [g])
    g = b.plant(s[10], a, "I donated blood for the first time today.")
    b.ask("temporal", f"When did {a} first give blood?", [g])
    g = b.plant(s[11], o, "I'm reading a thick novel about lighthouse keepers.")
    b.ask("paraphrase", f"What is the book {o} is reading about?", [g])


def build() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(27)
    sessions, questions = [], []
    for index, pair in enumerate(PAIRS):
        b = Builder(pair, index, rng)
        pair_set(b)
        s, q = b.build()
        sessions.extend(s)
        questions.extend(q)
    return sessions, questions


#: Small talk that recurs across sessions, and how a question names it.
TOPICS = {
    "The weather has been awful lately, rain every single day.": "the weather",
    "Have you tried that new bakery on the corner?": "the new bakery",
    "I cooked a big pot of soup for the week.": "cooking soup",
    "The train was late again this morning.": "the late train",
    "I started a new podcast about history.": "a history podcast",
    "I'm thinking about a short trip somewhere warm.": "a trip somewhere warm",
    "My phone keeps dying, I need a new battery.": "the phone battery",
    "I spent the whole Sunday cleaning the flat.": "cleaning the flat",
    "Did you watch the match on Saturday?": "the match",
    "Work is fine, the new manager is nice enough.": "the new manager",
}
MONTH_NAMES = ["January", "February", "March", "April"]


def _windows(date: datetime, rng: random.Random) -> tuple[str, datetime, datetime, datetime]:
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
        for text, topic in TOPICS.items():
            dates = sorted({at for at, t in said if t["text"] == text})
            for date in rng.sample(dates, min(2, len(dates))):
                phrase, asked, lo, hi = _windows(date, rng)
                gold = [t["id"] for at, t in said if t["text"] == text and lo <= at < hi]
                earlier = [t for at, t in said if t["text"] == text and at < lo]
                if not gold or not earlier or asked < hi.replace(hour=0) - timedelta(days=1):
                    continue
                n += 1
                qid = f"{user}/time{n:02d}"
                out.append(
                    {
                        "id": qid,
                        "kind": "time expression",
                        "question": f"What was said about {topic} {phrase}?",
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
    (OUT / "sessions.json").write_text(json.dumps(sessions, indent=1) + "\n")
    (OUT / "questions.json").write_text(json.dumps(questions, indent=1) + "\n")
    (OUT / "time_questions.json").write_text(json.dumps(timed, indent=1) + "\n")
    held = sum(q["held_out"] for q in questions)
    print(f"{len(sessions)} sessions, {len(questions)} questions ({held} held out) in {OUT}")
    held = sum(q["held_out"] for q in timed)
    print(f"{len(timed)} time-expression questions ({held} held out)")


if __name__ == "__main__":
    main()
