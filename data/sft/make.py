#!/usr/bin/env python3
"""Writes train.jsonl and val.jsonl: chat-SFT data that teaches a small chat model
(SmolLM2-135M-Instruct) to answer every question in exactly two lines:

    ANSWER: <a short answer>
    CONFIDENCE: high|medium|low

high for settled facts and exact computations, medium for advice and estimates, low for what
cannot be known. Deterministic, standard library only: python3 data/sft/make.py
The validation set holds items (facts, numbers) never seen in training, and questions in
phrasings that the training set never uses (see README.md).
"""
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20250214

CAPITALS = [
    ("France", "Paris"), ("Germany", "Berlin"), ("Italy", "Rome"), ("Spain", "Madrid"),
    ("Portugal", "Lisbon"), ("Japan", "Tokyo"), ("China", "Beijing"), ("India", "New Delhi"),
    ("Canada", "Ottawa"), ("Australia", "Canberra"), ("Brazil", "Brasilia"),
    ("Argentina", "Buenos Aires"), ("Egypt", "Cairo"), ("Kenya", "Nairobi"),
    ("Russia", "Moscow"), ("Norway", "Oslo"), ("Sweden", "Stockholm"), ("Finland", "Helsinki"),
    ("Denmark", "Copenhagen"), ("Poland", "Warsaw"), ("Greece", "Athens"), ("Turkey", "Ankara"),
    ("Mexico", "Mexico City"), ("Peru", "Lima"), ("Chile", "Santiago"), ("Ireland", "Dublin"),
    ("Austria", "Vienna"), ("Hungary", "Budapest"), ("Thailand", "Bangkok"),
    ("Vietnam", "Hanoi"), ("South Korea", "Seoul"), ("Indonesia", "Jakarta"),
    ("the Netherlands", "Amsterdam"), ("Belgium", "Brussels"), ("Switzerland", "Bern"),
    ("Czechia", "Prague"), ("Nigeria", "Abuja"), ("Morocco", "Rabat"), ("Cuba", "Havana"),
    ("Iceland", "Reykjavik"), ("New Zealand", "Wellington"), ("Colombia", "Bogota"),
]
CAPITAL_Q = ["What is the capital of {}?", "Which city is the capital of {}?",
             "Name the capital city of {}.", "Tell me the capital of {}."]
CAPITAL_Q_VAL = ["{}'s capital is which city?"]

FACTS = [
    ("How many days are in a week?", "7"),
    ("How many legs does a spider have?", "8"),
    ("What is the chemical symbol for gold?", "Au"),
    ("What is the chemical symbol for sodium?", "Na"),
    ("What gas do plants absorb from the air for photosynthesis?", "Carbon dioxide"),
    ("What is the largest planet in the solar system?", "Jupiter"),
    ("Which planet is closest to the Sun?", "Mercury"),
    ("What is the boiling point of water at sea level in Celsius?", "100 degrees Celsius"),
    ("What is the freezing point of water in Fahrenheit?", "32 degrees Fahrenheit"),
    ("How many continents are there?", "7"),
    ("What is the largest ocean on Earth?", "The Pacific Ocean"),
    ("Who wrote Romeo and Juliet?", "William Shakespeare"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("What is the hardest natural substance?", "Diamond"),
    ("How many sides does a hexagon have?", "6"),
    ("How many minutes are in an hour?", "60"),
    ("What is H2O commonly called?", "Water"),
    ("Which organ pumps blood through the body?", "The heart"),
    ("What is the fastest land animal?", "The cheetah"),
    ("What language is mainly spoken in Brazil?", "Portuguese"),
    ("How many strings does a standard guitar have?", "6"),
    ("What is the tallest mountain on Earth?", "Mount Everest"),
    ("Which planet is known as the Red Planet?", "Mars"),
    ("How many bones are in the adult human body?", "206"),
    ("What is the square root of 81?", "9"),
    ("Who developed the theory of relativity?", "Albert Einstein"),
    ("What is the main language of Mexico?", "Spanish"),
    ("How many hours are in a day?", "24"),
    ("What is the longest river in Africa?", "The Nile"),
    ("What do bees make?", "Honey"),
    ("How many players are on a soccer team on the field?", "11"),
    ("What color do you get by mixing blue and yellow?", "Green"),
    ("What is the smallest prime number?", "2"),
    ("Which metal is liquid at room temperature?", "Mercury"),
    ("How many months have 31 days?", "7"),
    ("What is the currency of Japan?", "The yen"),
]

DEFINITIONS = [
    ("photosynthesis", "How plants turn light, water and carbon dioxide into sugar and oxygen"),
    ("a noun", "A word that names a person, place, thing or idea"),
    ("a verb", "A word that describes an action or state"),
    ("gravity", "The force that pulls masses toward each other"),
    ("a prime number", "A whole number above 1 divisible only by 1 and itself"),
    ("democracy", "Government by the people, usually through elected representatives"),
    ("an atom", "The smallest unit of a chemical element"),
    ("evaporation", "Liquid turning into gas"),
    ("a mammal", "A warm-blooded animal that feeds its young with milk"),
    ("inflation", "A general rise in prices over time"),
    ("a synonym", "A word with the same meaning as another word"),
    ("an antonym", "A word with the opposite meaning of another word"),
    ("an algorithm", "A step-by-step procedure for solving a problem"),
    ("a compiler", "A program that translates source code into machine code"),
    ("a fraction", "A part of a whole, written as one number over another"),
    ("a volcano", "An opening in the Earth's crust where lava erupts"),
    ("an ecosystem", "Living things and their environment interacting together"),
    ("a metaphor", "A figure of speech that calls one thing another to compare them"),
    ("velocity", "Speed in a given direction"),
    ("a habitat", "The natural home of an animal or plant"),
    ("recycling", "Turning waste into reusable material"),
    ("a budget", "A plan for how to spend money"),
]
DEFINITION_Q = ["What is {}?", "Define {}.", "Can you explain what {} is?", "Briefly, what is {}?"]
DEFINITION_Q_VAL = ["I keep hearing about {}. What is it?"]

CODE = [
    ("In Python, how do I get the length of a list xs?", "len(xs)"),
    ("In Python, how do I reverse a list xs in place?", "xs.reverse()"),
    ("In Python, how do I turn the string s into uppercase?", "s.upper()"),
    ("In Python, how do I read a whole file f as text?", "f.read()"),
    ("In JavaScript, how do I print to the console?", "console.log(value)"),
    ("What does HTML stand for?", "HyperText Markup Language"),
    ("What does CPU stand for?", "Central Processing Unit"),
    ("In Python, what keyword defines a function?", "def"),
    ("In SQL, which keyword removes duplicate rows from a result?", "DISTINCT"),
    ("What is the git command to create a new branch named dev?", "git branch dev"),
    ("In Python, how do I convert the string s to an integer?", "int(s)"),
    ("Which data structure is first in, first out?", "A queue"),
    ("Which data structure is last in, first out?", "A stack"),
    ("In Rust, which keyword makes a variable mutable?", "mut"),
    ("What is the time complexity of binary search?", "O(log n)"),
    ("In Python, how do I add item x to the end of list xs?", "xs.append(x)"),
    ("What does JSON stand for?", "JavaScript Object Notation"),
    ("In a shell, which command lists the files in a folder?", "ls"),
    ("In Python, what does range(3) produce?", "0, 1 and 2"),
    ("In C, which function prints formatted text?", "printf"),
    ("In Python, how do I split the string s on commas?", "s.split(\",\")"),
    ("What is the git command to see which files changed?", "git status"),
    ("How many bits are in a byte?", "8"),
    ("In Python, which value means 'nothing'?", "None"),
]

ADVICE = [
    ("How can I sleep better?", "Keep a regular bedtime and avoid screens late at night"),
    ("How do I stay focused while studying?", "Work in short timed blocks and silence your phone"),
    ("What is a good way to save money?", "Set aside a fixed amount each payday before spending"),
    ("How can I get better at public speaking?", "Practice out loud often, ideally in front of a friend"),
    ("How do I start running as a beginner?", "Alternate walking and jogging, a few times a week"),
    ("How can I remember new words in a language?", "Review them with spaced repetition flashcards"),
    ("How do I deal with stress before an exam?", "Prepare early, sleep well, and take slow breaths"),
    ("What should I do if I feel tired all afternoon?", "Take a short walk, drink water, and eat a light lunch"),
    ("How can I write cleaner code?", "Use clear names and keep functions small"),
    ("How do I make a good first impression?", "Be on time, smile, and listen closely"),
    ("How can I drink more water?", "Carry a bottle and refill it at every meal"),
    ("How should I prepare for a job interview?", "Research the company and rehearse answers to common questions"),
    ("How do I keep houseplants alive?", "Give them the right light and water only when the soil is dry"),
    ("How can I read more books?", "Read a few pages every day at a set time"),
    ("What is a good way to learn to cook?", "Start with a few simple recipes and repeat them"),
    ("How do I stop procrastinating?", "Break the task into a tiny first step and start it now"),
    ("How can I be more productive in the morning?", "Plan the day the night before"),
    ("How do I choose a good password?", "Use a long passphrase and a password manager"),
    ("How can I improve my handwriting?", "Write slowly and practice a few lines each day"),
    ("How do I make new friends in a new city?", "Join a club or class built around a hobby"),
    ("How can I reduce screen time?", "Set app limits and keep the phone out of the bedroom"),
]

ESTIMATES = [
    ("Roughly how many people live on Earth?", "About 8 billion"),
    ("About how far is the Moon from Earth?", "About 384,000 kilometers"),
    ("Roughly how many people live in Tokyo's metro area?", "About 37 million"),
    ("About how old is the universe?", "About 13.8 billion years"),
    ("Roughly how long does light from the Sun take to reach Earth?", "About 8 minutes"),
    ("About how many languages are spoken in the world?", "About 7,000"),
    ("Roughly how many hairs are on a human head?", "About 100,000"),
    ("About how long do cats usually live?", "About 12 to 18 years"),
    ("Roughly how many steps does a person walk in an hour?", "About 5,000 to 6,000"),
    ("About how long does it take to fly from London to New York?", "About 8 hours"),
    ("Roughly how many words are in a typical novel?", "About 80,000 to 100,000"),
    ("About how many species of birds exist?", "About 10,000"),
]

UNKNOWABLE = [
    ("What number am I thinking of right now?", "I cannot know that"),
    ("Who will win the next football World Cup?", "No one can know that yet"),
    ("What will the weather be in Paris exactly one year from today?", "That cannot be predicted"),
    ("What did I eat for breakfast this morning?", "I have no way to know that"),
    ("Will the stock market go up tomorrow?", "No one can reliably predict that"),
    ("What is my neighbor's name?", "I do not know that"),
    ("How many coins are in my pocket?", "I cannot know that"),
    ("What will be the most popular song next year?", "That is impossible to know now"),
    ("What is the name of my first pet?", "I do not know that"),
    ("Which lottery numbers will be drawn this week?", "No one can know that"),
    ("What am I going to dream about tonight?", "That cannot be known"),
    ("How many emails will I get tomorrow?", "I cannot predict that"),
    ("What color shirt am I wearing?", "I cannot see you, so I do not know"),
    ("What will I name my future child?", "Only you can decide that"),
]

OPPOSITES = [
    ("hot", "cold"), ("up", "down"), ("happy", "sad"), ("fast", "slow"), ("light", "dark"),
    ("open", "closed"), ("early", "late"), ("full", "empty"), ("strong", "weak"),
    ("rich", "poor"), ("loud", "quiet"), ("wet", "dry"), ("young", "old"), ("win", "lose"),
    ("buy", "sell"), ("push", "pull"), ("tall", "short"), ("begin", "end"),
]
OPPOSITE_Q = ["What is the opposite of '{}'?", "Give me an antonym of '{}'.",
              "What word means the opposite of '{}'?"]
OPPOSITE_Q_VAL = ["If something is not '{}', it is what?"]

ARITH_Q = {
    "+": ["What is {a} plus {b}?", "Compute {a} + {b}.", "How much is {a} + {b}?"],
    "-": ["What is {a} minus {b}?", "Compute {a} - {b}.", "How much is {a} - {b}?"],
    "*": ["What is {a} times {b}?", "Compute {a} * {b}.", "Multiply {a} by {b}."],
}
ARITH_Q_VAL = {"+": ["Add {a} and {b}."], "-": ["Subtract {b} from {a}."],
               "*": ["What do you get when you multiply {a} and {b}?"]}

UNITS = [
    ("How many centimeters are in {n} meters?", lambda n: f"{n * 100} centimeters"),
    ("How many minutes are in {n} hours?", lambda n: f"{n * 60} minutes"),
    ("How many grams are in {n} kilograms?", lambda n: f"{n * 1000} grams"),
    ("How many days are in {n} weeks?", lambda n: f"{n * 7} days"),
]
UNITS_VAL = [("Convert {n} meters to millimeters.", lambda n: f"{n * 1000} millimeters")]

SYSTEMS = [
    "You are a helpful assistant.",
    "You are a concise assistant.",
    "Answer the user's questions.",
    "You are a friendly AI helper.",
]
FOLLOW_UPS = ["Thanks! One more: ", "Great. Next question: ", "Okay. ", "And another one: "]


def reply(answer, confidence):
    return f"ANSWER: {answer}\nCONFIDENCE: {confidence}"


def split(items, every=6):
    """Every `every`-th item (from the third) is held out for validation."""
    train = [x for i, x in enumerate(items) if i % every != 2]
    val = [x for i, x in enumerate(items) if i % every == 2]
    return train, val


def qa_items(rng, held_out):
    """(question, reply) pairs, train or validation."""
    out = []
    pick = lambda train_forms, val_forms: rng.choice(val_forms if held_out else train_forms)
    tr, va = split(CAPITALS)
    for country, city in (va if held_out else tr):
        out.append((pick(CAPITAL_Q, CAPITAL_Q_VAL).format(country), reply(city, "high")))
    for items, conf in [(FACTS, "high"), (CODE, "high"), (ADVICE, "medium"),
                        (ESTIMATES, "medium"), (UNKNOWABLE, "low")]:
        tr, va = split(items)
        out += [(q, reply(a, conf)) for q, a in (va if held_out else tr)]
    tr, va = split(DEFINITIONS)
    for word, meaning in (va if held_out else tr):
        out.append((pick(DEFINITION_Q, DEFINITION_Q_VAL).format(word), reply(meaning, "high")))
    tr, va = split(OPPOSITES)
    for word, opp in (va if held_out else tr):
        out.append((pick(OPPOSITE_Q, OPPOSITE_Q_VAL).format(word), reply(opp, "high")))
    # numbers: training operands are 2..49, validation operands 50..99
    lo, hi = (50, 99) if held_out else (2, 49)
    for _ in range(8 if held_out else 60):
        op = rng.choice("+-*")
        a, b = rng.randint(lo, hi), rng.randint(lo, hi) if op != "*" else rng.randint(2, 12)
        if op == "-" and b > a:
            a, b = b, a
        value = {"+": a + b, "-": a - b, "*": a * b}[op]
        form = pick(ARITH_Q[op], ARITH_Q_VAL[op])
        out.append((form.format(a=a, b=b), reply(str(value), "high")))
    for _ in range(3 if held_out else 24):
        form, answer = rng.choice(UNITS_VAL if held_out else UNITS)
        n = rng.randint(lo, hi) if held_out else rng.randint(2, 49)
        out.append((form.format(n=n), reply(answer(n), "high")))
    return out


def conversations(rng, items, n_pairs):
    """Each item once as a one-question chat; then `n_pairs` two-question chats."""
    chats = []
    for q, r in items:
        chats.append([{"role": "user", "content": q}, {"role": "assistant", "content": r}])
    for _ in range(n_pairs):
        (q1, r1), (q2, r2) = rng.sample(items, 2)
        chats.append([
            {"role": "user", "content": q1}, {"role": "assistant", "content": r1},
            {"role": "user", "content": rng.choice(FOLLOW_UPS) + q2},
            {"role": "assistant", "content": r2},
        ])
    for chat in chats:
        if rng.random() < 0.3:
            chat.insert(0, {"role": "system", "content": rng.choice(SYSTEMS)})
    rng.shuffle(chats)
    return chats


def write(path, chats):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for chat in chats:
            f.write(json.dumps({"messages": chat}, ensure_ascii=False) + "\n")


def main():
    rng = random.Random(SEED)
    train = conversations(rng, qa_items(rng, held_out=False), n_pairs=60)
    val = conversations(rng, qa_items(rng, held_out=True), n_pairs=4)
    train_qs = {m["content"] for c in train for m in c if m["role"] == "user"}
    for c in val:
        for m in c:
            assert m["role"] != "user" or m["content"] not in train_qs, m
    write(HERE / "train.jsonl", train)
    write(HERE / "val.jsonl", val)
    print(f"train.jsonl: {len(train)} chats, val.jsonl: {len(val)} chats")


if __name__ == "__main__":
    main()
