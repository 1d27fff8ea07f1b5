"""A deterministic generator of conversational turns, for latency and index-time figures.

``generate(n, seed)`` yields ``n`` turns grouped in sessions of 6-24 turns between two
speakers. Each turn is ``Speaker: words``: a few English function words and
templates, plus content words drawn from a Zipf-distributed pseudo-word vocabulary
(~20,000 words) and numbers (ports, versions, counts), so BM25 posting lists and
document lengths look like chat logs rather than uniform noise. ``queries(n, seed)``
draws questions built from the same vocabulary. Same (n, seed), same texts, on any
machine (pure ``random.Random``).

There is no ground truth here: these corpora measure time, never quality.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from typing import Iterator

from .data import Item

_SYL = ["ka", "lo", "mi", "ren", "tas", "vo", "ber", "dun", "el", "fi", "gor", "hal", "is", "jun", "ko",
        "lum", "mar", "nex", "or", "pel", "qui", "ros", "sil", "tor", "ul", "var", "wen", "xo", "yal", "zed"]
_FUNCTION = ("the a to and of in is it that we for on with this be was you i not are have but they at so "
             "if do can just about from what when will our my me all there one up out maybe then also").split()
_TECH = ("deploy cache index query port server database migration token config build test release bug "
         "schema backup cluster latency timeout retry webhook queue worker logs metrics alert docker branch "
         "merge review staging prod api endpoint auth session memory disk cpu thread lock pool").split()
_NAMES = ["Ada", "Bo", "Cai", "Dee", "Eli", "Fen", "Gus", "Hana", "Ivo", "Jo", "Kit", "Lu", "Mo", "Nia",
          "Oto", "Pia", "Quin", "Rae", "Sol", "Tam", "Uma", "Vic", "Wes", "Xia", "Yan", "Zoe"]
_TEMPLATES = [
    "{f} {f} {w} {t} {f} {w} {n}",
    "I think the {t} for {w} {f} {w} {w} {f} {t}",
    "did you {t} the {w} {w} {f} {f} {w} yesterday",
    "we moved {w} to {t} {n} because {f} {w} {w} {f} {w} {t}",
    "{name} said the {w} {t} is {f} {w} {w} {f} {w} {w} {n} {f} {w}",
    "yes {f} {w} {w} {f} {t} {t} {w}",
    "remember {f} {w} {w} uses {t} {n} not {n}",
    "{f} {w} {f} {w} {w} {t} {f} {f} {w} {w} {w} {f} {t} {w} {w} {f} {w}",
    "ok",
    "thanks, {f} {w} {w} {t} {w}",
]
_QTEMPLATES = [
    "what did {name} say about the {w} {t}",
    "which {t} does {w} use",
    "when did we {t} {w} {w}",
    "why did {w} {t} fail on {n}",
    "{w} {t} {w}",
]


def _vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYL) for _ in range(rng.randint(2, 4))))
    out = sorted(words)
    rng.shuffle(out)
    return out


class _Words:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = _vocabulary(random.Random(f"vocab-{seed}"))
        weights = [1.0 / (r + 1) ** 1.07 for r in range(len(self.vocab))]
        total = 0.0
        self.cum = []
        for w in weights:
            total += w
            self.cum.append(total)

    def word(self) -> str:
        return self.rng.choices(self.vocab, cum_weights=self.cum, k=1)[0]

    def number(self) -> str:
        r = self.rng.random()
        if r < 0.4:
            return str(self.rng.randint(1000, 9999))
        if r < 0.7:
            return f"v{self.rng.randint(0, 9)}.{self.rng.randint(0, 30)}.{self.rng.randint(0, 9)}"
        return str(self.rng.randint(2, 500))

    def fill(self, template: str, name: str) -> str:
        parts = []
        for tok in template.split():
            if tok == "{f}":
                parts.append(self.rng.choice(_FUNCTION))
            elif tok == "{w}":
                parts.append(self.word())
            elif tok == "{t}":
                parts.append(self.rng.choice(_TECH))
            elif tok == "{n}":
                parts.append(self.number())
            elif tok == "{name}":
                parts.append(name)
            else:
                parts.append(tok.format(name=name) if "{" in tok else tok)
        return " ".join(parts)


def generate(n: int, seed: int = 0) -> Iterator[Item]:
    """``n`` turns, deterministic in (n, seed); ids ``s<session>:t<turn>``."""
    w = _Words(seed)
    rng = w.rng
    start = datetime(2024, 1, 1, 9, 0)
    made = 0
    session = 0
    while made < n:
        session += 1
        a, b = rng.sample(_NAMES, 2)
        when = start + timedelta(hours=7 * session)
        length = min(rng.randint(6, 24), n - made)
        for t in range(length):
            speaker = a if t % 2 == 0 else b
            text = w.fill(rng.choice(_TEMPLATES), b if speaker == a else a)
            if rng.random() < 0.5:  # a second sentence: longer turns, varied lengths
                text += ". " + w.fill(rng.choice(_TEMPLATES), a)
            yield Item(f"s{session}:t{t}", f"{speaker}: {text} (#{session}.{t})", session=f"s{session}",
                       created_at=when + timedelta(minutes=t))
        made += length


def queries(n: int, seed: int = 0) -> list[str]:
    w = _Words(seed + 7919)
    return [w.fill(w.rng.choice(_QTEMPLATES), w.rng.choice(_NAMES)) for _ in range(n)]


def parse_sizes(spec: str) -> list[int]:
    """``"10k,50k,200000"`` -> [10000, 50000, 200000]."""
    out = []
    for part in str(spec).replace(" ", "").split(","):
        if not part:
            continue
        mult = 1
        if part[-1] in "kK":
            mult, part = 1000, part[:-1]
        elif part[-1] in "mM":
            mult, part = 1_000_000, part[:-1]
        try:
            value = int(float(part) * mult)
        except ValueError:
            raise ValueError(f"not a corpus size: {part!r} (write e.g. 10k,50k,200k)") from None
        if value < 1:
            raise ValueError(f"corpus size must be positive, got {value}")
        out.append(value)
    if not out:
        raise ValueError("no corpus size given (write e.g. 10k,50k,200k)")
    return out
