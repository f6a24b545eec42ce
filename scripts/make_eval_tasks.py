"""Write the data of the local lm-eval suite (conf/evals/tasks/<name>/data.jsonl).

Deterministic (seeded): running it again writes the same bytes. Every item is written here
from the tables below, with its answer computed, so the suite needs no download and its
labels are right by construction. The replay task has no file: it reads the run's held-out
traffic.

    python scripts/make_eval_tasks.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "conf" / "evals" / "tasks"

OPPOSITES = [("hot", "cold"), ("big", "small"), ("up", "down"), ("fast", "slow"), ("happy", "sad"),
             ("light", "dark"), ("open", "closed"), ("wet", "dry"), ("early", "late"),
             ("full", "empty"), ("hard", "soft"), ("young", "old"), ("rich", "poor"),
             ("long", "short"), ("clean", "dirty"), ("strong", "weak"), ("loud", "quiet"),
             ("high", "low"), ("inside", "outside"), ("win", "lose")]
CAPITALS = [("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
            ("Japan", "Tokyo"), ("China", "Beijing"), ("the United Kingdom", "London"),
            ("Russia", "Moscow"), ("Egypt", "Cairo"), ("Canada", "Ottawa"), ("Greece", "Athens"),
            ("Portugal", "Lisbon"), ("Ireland", "Dublin"), ("Norway", "Oslo"),
            ("Sweden", "Stockholm"), ("Poland", "Warsaw"), ("Austria", "Vienna"),
            ("Mexico", "Mexico City"), ("India", "New Delhi"), ("Argentina", "Buenos Aires")]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December"]
COLOURS = [("a banana", "yellow"), ("grass", "green"), ("the clear sky", "blue"), ("snow", "white"),
           ("coal", "black"), ("blood", "red"), ("a carrot", "orange"), ("a lemon", "yellow"),
           ("a strawberry", "red"), ("milk", "white")]
COLOUR_CHOICES = ["yellow", "green", "blue", "white", "black", "red", "orange", "purple"]
COUNTS = [("legs does a spider have", 8), ("days are in a week", 7), ("months are in a year", 12),
          ("sides does a triangle have", 3), ("legs does a dog have", 4), ("sides does a square have", 4),
          ("hours are in a day", 24), ("minutes are in an hour", 60), ("wheels does a bicycle have", 2),
          ("legs does a bird have", 2), ("days are in a leap year", 366), ("sides does a hexagon have", 6)]
FACTS = [("Which planet is closest to the Sun?", "Mercury", ["Mars", "Jupiter", "Saturn"]),
         ("At how many degrees Celsius does water freeze?", "0", ["10", "50", "100"]),
         ("At how many degrees Celsius does water boil at sea level?", "100", ["0", "50", "200"]),
         ("Which gas do plants take in to make food?", "carbon dioxide", ["helium", "neon", "argon"]),
         ("In which direction does the Sun rise?", "east", ["west", "north", "south"]),
         ("What do bees make?", "honey", ["milk", "silk", "wool"]),
         ("Which is the largest ocean on Earth?", "the Pacific",
          ["the Arctic", "the Indian", "the Baltic"]),
         ("What is frozen water called?", "ice", ["steam", "sand", "glass"]),
         ("Which animal is known as the king of the jungle?", "the lion",
          ["the mouse", "the frog", "the owl"]),
         ("What do you use to see?", "your eyes", ["your ears", "your nose", "your elbows"]),
         ("Which is a fruit?", "an apple", ["a chair", "a hammer", "a shoe"]),
         ("Which is a vegetable?", "a carrot", ["a spoon", "a rock", "a pencil"]),
         ("What do cows drink?", "water", ["oil", "ink", "paint"]),
         ("How many continents are there?", "seven", ["two", "twenty", "one hundred"])]
ANIMALS = [("moo", "a cow"), ("woof", "a dog"), ("meow", "a cat"), ("quack", "a duck"),
           ("oink", "a pig"), ("baa", "a sheep"), ("neigh", "a horse"), ("hiss", "a snake")]


def _mc(rng: random.Random, question: str, answer: str, pool: list[str], category: str) -> dict:
    distractors = rng.sample([p for p in pool if p != answer], 3)
    choices = [answer, *distractors]
    rng.shuffle(choices)
    return {"question": question, "choices": choices, "label": choices.index(answer),
            "category": category}


def facts_mc(rng: random.Random) -> list[dict]:
    items = []
    words = [w for pair in OPPOSITES for w in pair]
    items += [_mc(rng, f'What is the opposite of "{a}"?', b, words, "opposites") for a, b in OPPOSITES]
    cities = [c for _, c in CAPITALS]
    items += [_mc(rng, f"What is the capital of {c}?", city, cities, "capitals") for c, city in CAPITALS]
    items += [_mc(rng, f"Which day comes after {d}?", DAYS[(i + 1) % 7], DAYS, "sequences")
              for i, d in enumerate(DAYS)]
    items += [_mc(rng, f"Which month comes after {m}?", MONTHS[(i + 1) % 12], MONTHS, "sequences")
              for i, m in enumerate(MONTHS)]
    items += [_mc(rng, f"What colour is {thing}?", colour, COLOUR_CHOICES, "colours")
              for thing, colour in COLOURS]
    numbers = sorted({str(n) for _, n in COUNTS} | {"5", "9", "10", "100"})
    items += [_mc(rng, f"How many {what}?", str(n), numbers, "counting") for what, n in COUNTS]
    for question, answer, wrong in FACTS:
        choices = [answer, *wrong]
        rng.shuffle(choices)
        items.append({"question": question, "choices": choices, "label": choices.index(answer),
                      "category": "science"})
    names = [a for _, a in ANIMALS]
    items += [_mc(rng, f'Which animal says "{sound}"?', animal, names, "animals")
              for sound, animal in ANIMALS]
    return items


NAMES = ["Maria", "Tom", "Aisha", "Ken", "Lucia", "Omar", "Sara", "Ben"]
THINGS = ["apples", "pens", "books", "stickers", "marbles", "cookies", "stamps", "shells"]


def arithmetic(rng: random.Random) -> list[dict]:
    items = []
    for i in range(60):  # bare arithmetic, small operands
        op = "+-×"[i % 3]
        a, b = rng.randint(2, 40), rng.randint(2, 12 if op == "×" else 40)
        if op == "-":
            a, b = max(a, b), min(a, b)
        answer = {"+": a + b, "-": a - b, "×": a * b}[op]
        items.append({"question": f"What is {a} {op} {b}?", "answer": answer, "kind": "arithmetic"})
    for i in range(60):  # one-step word problems
        name, thing = rng.choice(NAMES), rng.choice(THINGS)
        a, b = rng.randint(2, 20), rng.randint(2, 9)
        kind = ["gain", "loss", "groups", "share"][i % 4]
        if kind == "gain":
            q = f"{name} has {a} {thing} and gets {b} more. How many {thing} does {name} have now?"
            ans = a + b
        elif kind == "loss":
            a = a + b
            q, ans = f"{name} has {a} {thing} and gives away {b}. How many {thing} are left?", a - b
        elif kind == "groups":
            q = f"{name} has {b} boxes with {a} {thing} in each. How many {thing} is that in all?"
            ans = a * b
        else:
            q, ans = (f"{name} shares {a * b} {thing} equally among {b} friends. "
                      f"How many {thing} does each friend get?"), a
        items.append({"question": q, "answer": ans, "kind": "word_problem"})
    return items


CITIES = ["Paris", "Lyon", "Madrid", "Tokyo", "Berlin", "Lima", "Oslo", "Cairo", "Austin", "Seoul"]
CURRENCIES = ["USD", "EUR", "JPY", "GBP", "CHF"]


def tool_calls(rng: random.Random) -> list[dict]:
    items = []
    for i in range(105):
        kind = i % 3
        if kind == 0:
            city, unit = rng.choice(CITIES), rng.choice(["celsius", "fahrenheit"])
            request = f"What's the weather like in {city} right now, in {unit}?"
            call = {"tool": "get_weather", "arguments": {"city": city, "unit": unit}}
        elif kind == 1:
            amount = rng.randint(5, 500)
            src, dst = rng.sample(CURRENCIES, 2)
            request = f"How much is {amount} {src} in {dst}?"
            call = {"tool": "convert_currency", "arguments": {"amount": amount, "from": src, "to": dst}}
        else:
            minutes = rng.randint(1, 90)
            request = f"Set a timer for {minutes} minutes, please."
            call = {"tool": "set_timer", "arguments": {"minutes": minutes}}
        items.append({"request": request, "call": call})
    return items


def main() -> None:
    rng = random.Random(0)
    for name, items in [("qg_facts_mc", facts_mc(rng)), ("qg_arith", arithmetic(rng)),
                        ("qg_json_tool", tool_calls(rng))]:
        path = OUT / name / "data.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for i, item in enumerate(items):
                f.write(json.dumps({"id": f"{name}-{i:03d}", **item}, ensure_ascii=False) + "\n")
        print(f"{path.relative_to(OUT.parents[2])}: {len(items)} items")


if __name__ == "__main__":
    main()
