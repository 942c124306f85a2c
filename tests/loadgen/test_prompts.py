"""Prompt building: exact token counts, shared prefixes, determinism, fresh prefixes per salt."""

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

import loadgen.prompts as prompts_module
from loadgen.prompts import (
    Prompt,
    PromptCache,
    TokenizerSizer,
    WordSizer,
    build_prompts,
    find_tokenizer_file,
    load_tokenizer_sizer,
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """A small byte-level BPE with merges, so tokens span several characters."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    rng = random.Random(0)
    words = ["the", "of", "and", "prefix", "cache", "decode", "prefill", "token", "water", "people"]
    texts = [" ".join(rng.choices(words, k=40)) for _ in range(200)]
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    return tok


def test_tokenizer_sizer_is_exact(tokenizer: Tokenizer) -> None:
    sizer = TokenizerSizer(tokenizer, "test")
    rng = random.Random(1)
    for n in (1, 5, 64, 2371):
        text = sizer.make_text(rng, n)
        assert len(tokenizer.encode(text, add_special_tokens=False).ids) == n


def test_prompts_share_prefixes_and_are_deterministic(tokenizer: Tokenizer) -> None:
    sizer = TokenizerSizer(tokenizer, "test")
    kwargs = dict(n=40, prefix_kinds=3, prefix_tokens=100, suffix_tokens=20, seed=5)
    prompts = build_prompts(sizer, salt="k3-c4-r1", **kwargs)
    assert prompts == build_prompts(sizer, salt="k3-c4-r1", **kwargs)
    assert {p.prefix_id for p in prompts} == {0, 1, 2}
    heads = {p.prefix_id: p.text.split("\n\n")[0] for p in prompts}
    for p in prompts:
        assert p.text.startswith(heads[p.prefix_id] + "\n\n")
        assert len(tokenizer.encode(heads[p.prefix_id]).ids) == 100
    assert len({p.text for p in prompts}) == 40  # every suffix is unique
    # Another repetition (salt) starts with different words: no inherited prefix cache.
    other = build_prompts(sizer, salt="k3-c4-r2", **kwargs)
    assert {p.text.split()[0:3] == q.text.split()[0:3] for p in prompts for q in other} == {False}


def test_word_sizer_uses_its_ratio() -> None:
    text = WordSizer(1.25, "calibrated").make_text(random.Random(0), 100)
    assert len(text.split()) == 80


def test_tokenizer_lookup(
    tmp_path: Path, tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    tokenizer.save(str(model_dir / "tokenizer.json"))
    assert find_tokenizer_file(str(model_dir)) == model_dir / "tokenizer.json"
    snapshot = tmp_path / "hub" / "models--Org--Name" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    tokenizer.save(str(snapshot / "tokenizer.json"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    sizer = load_tokenizer_sizer(None, "Org/Name")
    assert sizer is not None and sizer.source == f"tokenizer:{snapshot / 'tokenizer.json'}"
    assert load_tokenizer_sizer(None, "Org/Missing") is None
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json for 'Org/Missing'"):
        load_tokenizer_sizer("Org/Missing", "Org/Name")


def test_a_prompt_cache_builds_once_for_grids_of_the_same_tokenizer(
    tokenizer: Tokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two grids' sizers of the same tokenizer content (each stack's own model directory) get
    the prompts `build_prompts` gives, built once; the entry is dropped once both had it, and
    another tokenizer or word ratio is built on its own."""
    import loadgen.prompts

    built: list[str] = []
    real = loadgen.prompts.build_prompts

    def counted(sizer: object, **kwargs: object) -> list[Prompt]:
        built.append(str(kwargs["salt"]))
        return real(sizer, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loadgen.prompts, "build_prompts", counted)
    copy = Tokenizer.from_str(tokenizer.to_str())
    first, second = TokenizerSizer(tokenizer, "tokenizer:a"), TokenizerSizer(copy, "tokenizer:b")
    kwargs = dict(n=12, prefix_kinds=3, prefix_tokens=50, suffix_tokens=10, seed=5)
    cache = PromptCache(uses=2)
    a = cache.build(first, salt="k3-c4-r1", **kwargs)
    assert a == real(first, salt="k3-c4-r1", **kwargs)
    assert cache.build(second, salt="k3-c4-r1", **kwargs) == a
    assert built == ["k3-c4-r1"]
    assert cache.build(second, salt="k3-c4-r1", **kwargs) == a  # a third grid: built again
    assert built == ["k3-c4-r1"] * 2
    words = WordSizer(1.25, "calibrated")
    assert cache.build(words, salt="k3-c4-r1", **kwargs) == real(words, salt="k3-c4-r1", **kwargs)
    assert len(built) == 3


def _words_then_cut(tokenizer: Tokenizer, rng: random.Random, n_tokens: int) -> str:
    """The reference text: `n_tokens` words (more while they encode to fewer tokens), cut at
    token `n_tokens`; `TokenizerSizer.make_text` must give the same from fewer words."""
    text = " ".join(rng.choices(prompts_module._WORDS, k=n_tokens))
    encoding = tokenizer.encode(text, add_special_tokens=False)
    while len(encoding.ids) < n_tokens:
        more = " ".join(rng.choices(prompts_module._WORDS, k=n_tokens - len(encoding.ids) + 16))
        text += " " + more
        encoding = tokenizer.encode(text, add_special_tokens=False)
    return text[: encoding.offsets[n_tokens - 1][1]]


@pytest.mark.parametrize("which", ["merges", "model-dir"])
def test_fewer_words_encoded_make_the_same_text(
    tokenizer: Tokenizer, tmp_path: Path, which: str
) -> None:
    """Sized from the tokens per word seen before, a text is the one `n_tokens` words cut at
    the same token gave: for the fixture's BPE with merges and the routing run's byte-level
    tokenizer (~4.5 tokens a word, where `n_tokens` words are ~4.5 times the text needed)."""
    from simulator.model_dir import make_model_dir

    if which == "model-dir":
        tokenizer = Tokenizer.from_file(str(make_model_dir(tmp_path / "model") / "tokenizer.json"))
    sizer = TokenizerSizer(tokenizer, "test")
    for i, n in enumerate([2371, 237, 1, 64, 2371, 237, 5000, 17]):
        made = sizer.make_text(random.Random(f"piece-{i}"), n)
        assert made == _words_then_cut(tokenizer, random.Random(f"piece-{i}"), n)
        assert len(tokenizer.encode(made, add_special_tokens=False).ids) == n


def test_a_run_draws_each_requests_prompt_and_output_length(tokenizer: Tokenizer) -> None:
    """With promptLengths / outputLengths, each request of a run gets its own drawn lengths
    (exact prompt tokens, its own max_tokens in the body), the same for the same run; the
    prefix is prefixShare of the shortest prompt; promptTokens / maxTokens are the means."""
    import json

    from loadgen.plan import share_for_run
    from workload.config import LoadConfig

    config = LoadConfig.model_validate(
        {
            "requestsPerRun": 30,
            "prefixShare": 0.5,
            "promptLengths": {"values": [40, 200], "weights": [0.75, 0.25]},
            "outputLengths": {"values": [4, 32]},
        }
    )
    assert (config.prompt_tokens, config.max_tokens, config.prefix_tokens) == (80, 18, 20)
    sizer = TokenizerSizer(tokenizer, "test")
    share = share_for_run("http://x", "m", config, sizer, (2, 4, 1))
    lengths = config.request_lengths(30, "k2-c4-r1")
    bodies = [json.loads(b) for b in share.bodies]
    prompts = [b["messages"][0]["content"] for b in bodies]
    # the blank line after the prefix ("\n\n") is two tokens more
    assert [len(tokenizer.encode(p, add_special_tokens=False).ids) for p in prompts] == [
        p + 2 for p, _ in lengths
    ]
    assert [b["max_tokens"] for b in bodies] == [out for _, out in lengths]
    assert {p for p, _ in lengths} == {40, 200} and {o for _, o in lengths} == {4, 32}
    again = share_for_run("http://x", "m", config, sizer, (2, 4, 1))
    assert again.bodies == share.bodies
