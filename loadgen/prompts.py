"""Prompts with shared prefixes, sized in tokens, built before the timed run.

A run at K prefix kinds draws each request's prefix uniformly from K texts of `prefix_tokens`
tokens and appends a unique suffix of `suffix_tokens` tokens. Texts come from a seeded
`random.Random` per (salt, piece), so a given seed and salt always give the same prompts, and a
different salt (another run or repetition) gives prefixes that share no leading words.
"""

import hashlib
import math
import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tokenizers import Tokenizer

# Common short English words: most are one token in byte-level BPE vocabularies, so the
# approximate sizer starts at about one token per word before the server corrects it.
_WORD_TEXT = """
the of and to in is was for on that with as by at from his her they this are had not
but have one all were when we there can an which their said if do will each about how
up out them then she many some so these would other into has more two time could no way
been people my than first water who its now find long down day did get come made may
part over new sound take only little work know place year live me back give most very
after thing our just name good man think say great where help through much before line
right too mean old any same tell boy follow came want show also around form three small
"""
_WORDS = tuple(_WORD_TEXT.split())


class TextSizer(Protocol):
    """Makes text of about `n_tokens` tokens from random words."""

    source: str

    def make_text(self, rng: random.Random, n_tokens: int) -> str:
        """Return text of `n_tokens` tokens (exact for a tokenizer, estimated otherwise)."""
        ...


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(_WORDS, k=n))


class TokenizerSizer:
    """Exact token counts with the model's `tokenizers` tokenizer (from `tokenizer.json`)."""

    def __init__(self, tokenizer: Tokenizer, source: str) -> None:
        self.tokenizer = tokenizer
        self.source = source
        self._tokens_per_word: float | None = None  # seen in the last text made

    def count(self, text: str) -> int:
        """Tokens of `text`, without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def make_text(self, rng: random.Random, n_tokens: int) -> str:
        """Random words cut at the end of token `n_tokens` (character offsets of the encoding).

        The words are one stream of `rng` (`random.choices` draws one number per word), drawn
        in chunks until the text has `n_tokens` tokens: the first chunk is `n_tokens` words
        (each word is at least one token), or, once a text was made, the words that many
        tokens took then plus 5% and 8; each further chunk the tokens still missing plus 16.
        Encoding costs ~1.4 us per word and a prompt is built per request, so fewer words
        encoded is cheaper: the routing run's byte-level tokenizer takes ~4.5 tokens a word,
        so `n_tokens` words would be ~4.5 times the text needed. The cut falls at the same
        place however the stream is chunked, for a tokenizer whose tokens do not span a space
        (`tests/loadgen/test_prompts.py` checks the byte-level ones)."""
        if n_tokens <= 0:
            return ""
        per_word = self._tokens_per_word
        words = n_tokens if per_word is None else math.ceil(n_tokens / per_word * 1.05) + 8
        text = _words(rng, words)
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        while len(encoding.ids) < n_tokens:
            more = n_tokens - len(encoding.ids) + 16
            text += " " + _words(rng, more)
            words += more
            encoding = self.tokenizer.encode(text, add_special_tokens=False)
        self._tokens_per_word = len(encoding.ids) / words
        return text[: encoding.offsets[n_tokens - 1][1]]


class WordSizer:
    """Approximate sizes: `tokens_per_word` tokens per word (measured against the server or 1.0)."""

    def __init__(self, tokens_per_word: float, source: str) -> None:
        self.tokens_per_word = tokens_per_word
        self.source = source

    def make_text(self, rng: random.Random, n_tokens: int) -> str:
        """Random words, round(n_tokens / tokens_per_word) of them."""
        return _words(rng, round(n_tokens / self.tokens_per_word))


def calibration_texts(short_words: int = 100, long_words: int = 1100) -> tuple[str, str]:
    """Two texts of `short_words` and `long_words` words for measuring tokens per word.

    The server's `usage.prompt_tokens` for each, p_short and p_long, give
    tokens per word = (p_long - p_short) / (long_words - short_words), which cancels the chat
    template's constant overhead.
    """
    rng = random.Random("calibration")
    return _words(rng, short_words), _words(rng, long_words)


def _hub_cache() -> Path:
    if "HF_HUB_CACHE" in os.environ:
        return Path(os.environ["HF_HUB_CACHE"])
    hf_home = Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface"))
    return hf_home / "hub"


def find_tokenizer_file(name: str) -> Path | None:
    """Find `tokenizer.json` for `name`: a file, a directory holding one, or a hub id in the
    local Hugging Face cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else ~/.cache/huggingface/hub).

    Never uses the network. Returns None when nothing is found.
    """
    path = Path(name).expanduser()
    if path.is_file():
        return path
    if (path / "tokenizer.json").is_file():
        return path / "tokenizer.json"
    repo = _hub_cache() / ("models--" + name.replace("/", "--")) / "snapshots"
    found = sorted(repo.glob("*/tokenizer.json")) if repo.is_dir() else []
    return found[-1] if found else None


def load_tokenizer_sizer(tokenizer: str | None, model: str) -> TokenizerSizer | None:
    """A `TokenizerSizer` from `tokenizer` (path or hub id), else from `model`'s hub cache entry.

    Raises FileNotFoundError when `tokenizer` is given but no tokenizer.json is found for it;
    returns None when only the model name was tried.
    """
    file = find_tokenizer_file(tokenizer if tokenizer is not None else model)
    if file is None:
        if tokenizer is not None:
            raise FileNotFoundError(
                f"no tokenizer.json for {tokenizer!r} (a file, a directory holding one, "
                "or a model id in the local Hugging Face cache)"
            )
        return None
    return TokenizerSizer(Tokenizer.from_file(str(file)), f"tokenizer:{file}")


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's prompt text and which shared prefix (0..K-1) it starts with."""

    text: str
    prefix_id: int


def build_prompts(
    sizer: TextSizer,
    *,
    n: int,
    prefix_kinds: int,
    prefix_tokens: int,
    suffix_tokens: int | Sequence[int],
    seed: int,
    salt: str,
) -> list[Prompt]:
    """`n` prompts: one of `prefix_kinds` shared prefixes + a unique suffix, in tokens
    (`suffix_tokens`: every suffix's length, or one per prompt).

    The prefix ends with a blank line so its last token does not merge with the suffix.
    Deterministic for (seed, salt); a different salt gives unrelated prefixes.
    """
    suffixes = [suffix_tokens] * n if isinstance(suffix_tokens, int) else list(suffix_tokens)
    prefixes = [
        sizer.make_text(random.Random(f"{seed}:{salt}:prefix:{k}"), prefix_tokens)
        for k in range(prefix_kinds)
    ]
    pick = random.Random(f"{seed}:{salt}:pick")
    prompts = []
    for i in range(n):
        k = pick.randrange(prefix_kinds)
        suffix = sizer.make_text(random.Random(f"{seed}:{salt}:suffix:{i}"), suffixes[i])
        text = f"{prefixes[k]}\n\n{suffix}" if prefixes[k] else suffix
        prompts.append(Prompt(text, k))
    return prompts


class PromptCache:
    """Prompts built once for several grids that send the same ones: the grids of
    ``testbed simulate A B``, run side by side in one process with the same load settings, on
    tokenizers of the same content (each stack's own copy of the local model directory).

    :meth:`build` returns what :func:`build_prompts` returns for its arguments, built the
    first time and handed out ``uses`` times (one per grid) before it is dropped, so the cache
    holds only the runs some grid has yet to reach. Sizers are matched by what decides their
    text: a ``TokenizerSizer`` by its tokenizer's serialized content (SHA-256), a
    ``WordSizer`` by its tokens per word; any other sizer only by itself. A 2,371-token prompt
    costs ~0.4 ms of CPU to build with the routing run's byte-level tokenizer (a run's 200 in
    0.08 s), the seed grid's 5,484 texts ~2 s (docs/simulation.md, "How long the full seed grid
    takes").
    """

    def __init__(self, uses: int) -> None:
        self.uses = uses
        self._built: dict[tuple[object, ...], tuple[list[Prompt], int]] = {}
        self._sizers: dict[int, tuple[TextSizer, object]] = {}

    def _sizer_key(self, sizer: TextSizer) -> object:
        known = self._sizers.get(id(sizer))
        if known is not None:
            return known[1]
        key: object = ("sizer", id(sizer))
        if isinstance(sizer, TokenizerSizer):
            key = ("tokenizer", hashlib.sha256(sizer.tokenizer.to_str().encode()).hexdigest())
        elif isinstance(sizer, WordSizer):
            key = ("words", sizer.tokens_per_word)
        self._sizers[id(sizer)] = (sizer, key)  # the sizer is kept, so its id stays its own
        return key

    def build(
        self,
        sizer: TextSizer,
        *,
        n: int,
        prefix_kinds: int,
        prefix_tokens: int,
        suffix_tokens: int | Sequence[int],
        seed: int,
        salt: str,
    ) -> list[Prompt]:
        """:func:`build_prompts` of these arguments (a new list; the prompts are frozen)."""
        suffixes = suffix_tokens if isinstance(suffix_tokens, int) else tuple(suffix_tokens)
        shape = (n, prefix_kinds, prefix_tokens, suffixes, seed, salt)
        key = (self._sizer_key(sizer), *shape)
        prompts, handed = self._built.get(key, ([], 0))
        if not handed:
            prompts = build_prompts(
                sizer,
                n=n,
                prefix_kinds=prefix_kinds,
                prefix_tokens=prefix_tokens,
                suffix_tokens=suffix_tokens,
                seed=seed,
                salt=salt,
            )
        if handed + 1 >= self.uses:
            self._built.pop(key, None)
        else:
            self._built[key] = (prompts, handed + 1)
        return list(prompts)
