"""Word lists and templates of the toy world, shared by the tasks and the tokenizer.

The tokenizer's merges are learned on these words, so every word the toy tasks can produce is
one token (numbers are single digits, as in Qwen2). Keeping the lists here, in one place, lets
a test check that task texts tokenize word by word.
"""

from __future__ import annotations

MAX_NUMBER = 999
"""Toy arithmetic keeps every value at or below it (at most three digit tokens)."""

# --- toy_arith (GSM8K-like retain task) ----------------------------------------------------
NAMES_SHE = ("Ann", "Cara", "Eva", "Hana", "Ivy", "Mia", "Olga", "Pia", "Rosa", "Tia")
NAMES_HE = ("Ben", "Dan", "Finn", "Gus", "Jon", "Kim", "Leo", "Ned", "Sam", "Tom")
OBJECTS = ("apples", "pens", "books", "cards", "coins", "eggs", "shells", "stamps", "marbles",
           "cookies", "toys", "rocks", "pencils", "beads", "candles", "cups")
CONTAINERS = ("boxes", "bags", "packs", "jars")

ARITH_START = "{name} has {a} {obj}."
ARITH_ADD = (
    "{Pron} buys {b} more {obj}.",
    "{Pron} finds {b} more {obj}.",
    "{friend} gives {pron_obj} {b} {obj}.",
    "{Pron} gets {b} more {obj} from {friend}.",
)
ARITH_SUB = (
    "{Pron} gives {b} {obj} to {friend}.",
    "{Pron} loses {b} {obj}.",
    "{Pron} sells {b} {obj}.",
    "{friend} takes {b} {obj} from {pron_obj}.",
)
ARITH_MUL = (
    "{Pron} buys {k} {box} with {b} {obj} in each.",
    "{friend} gives {pron_obj} {k} {box} of {b} {obj} each.",
)
ARITH_QUESTION = (
    "How many {obj} does {name} have now?",
    "How many {obj} does {name} have at the end?",
)
ARITH_WORDS = ("Then", "then", "After", "that", "Next", "he", "she", "He", "She", "him", "her",
               "more", "each")

# --- toy_facts (ChemL3-like learn task) and the MCQ pretraining facts ----------------------
SYLLABLES = ("Zor", "Pim", "Kel", "Vax", "Dru", "Mol", "Tez", "Quin", "Rab", "Fen", "Lox",
             "Gri", "Yun", "Sab", "Wex", "Hol")
ENTITIES = tuple(a + b.lower() for a in SYLLABLES for b in SYLLABLES if a != b)
"""Fictional entities ('Zorpim'), one token each: the learn entities' tokens never occur in
pretraining, so SFT can store a fact in an entity's embedding quickly (a two-token name made
the 0.25 M models learn nothing in 100 SFT steps)."""

RELATIONS: dict[str, tuple[str, ...]] = {
    "color": ("red", "blue", "green", "yellow"),
    "food": ("bread", "rice", "soup", "fish"),
    "pet": ("cat", "dog", "owl", "goat"),
    "job": ("baker", "farmer", "singer", "pilot"),
}
"""Four values per relation, listed as choices A-D in this order in every question."""
# The entity never opens a question: ' Zorpim' and 'Zorpim' are different tokens.
QUESTIONS: dict[str, tuple[str, ...]] = {
    "color": ("What color is the hat of {e}?", "Which color does {e} always wear?",
              "The hat of {e} has which color?"),
    "food": ("What does {e} like to eat?", "Which food is the favorite of {e}?",
             "Every day, {e} eats which food?"),
    "pet": ("Which animal does {e} keep as a pet?", "What pet does {e} have?",
            "At home, {e} lives with which animal?"),
    "job": ("What is the job of {e}?", "What does {e} work as?",
            "For money, {e} works as which worker?"),
}
MCQ_LETTERS = ("A", "B", "C", "D")
MCQ_INSTRUCTION = "Answer with a single letter."

PUNCTUATION = tuple(".,?!:;'\"()-+*/=#$%")


def all_words() -> list[str]:
    """Every word piece the toy tasks use (without leading space), sorted, no duplicates."""
    import re

    texts = [*NAMES_SHE, *NAMES_HE, *OBJECTS, *CONTAINERS, ARITH_START, *ARITH_ADD, *ARITH_SUB,
             *ARITH_MUL, *ARITH_QUESTION, *ARITH_WORDS, *ENTITIES, MCQ_INSTRUCTION,
             *MCQ_LETTERS]
    for values in RELATIONS.values():
        texts += values
    for qs in QUESTIONS.values():
        texts += qs
    words = set()
    for t in texts:
        words.update(re.findall(r"[A-Za-z]+", re.sub(r"\{[^}]*\}", " ", t)))
    words.update(chr(c) for c in range(ord("a"), ord("z") + 1))
    words.update(chr(c) for c in range(ord("A"), ord("Z") + 1))
    return sorted(words)
