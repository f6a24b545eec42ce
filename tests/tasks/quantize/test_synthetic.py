"""The baseline's own text for end-to-end tuning: seeded, started off the specials, greedy opening."""

import pytest
import torch

from quantgate.tasks.model.load import load_causal_lm, load_tokenizer
from quantgate.tasks.quantize.codebook.synthetic import teacher_sequences, vocabulary_starts

pytestmark = pytest.mark.timeout(120)


def test_teacher_sequences_are_seeded_start_off_the_specials_and_open_greedily(model96):
    tokenizer, model = load_tokenizer(model96), load_causal_lm(model96)
    starts = vocabulary_starts(tokenizer)
    assert not set(starts) & set(tokenizer.all_special_ids)
    assert len(starts) == len(tokenizer) - len(set(tokenizer.all_special_ids))

    seqs = teacher_sequences(model, starts, 5, 12, greedy_tokens=3, seed=1, batch_size=2)
    assert [s.shape for s in seqs] == [torch.Size([1, 12])] * 5
    again = teacher_sequences(model, starts, 5, 12, greedy_tokens=3, seed=1, batch_size=2)
    assert all(torch.equal(a, b) for a, b in zip(seqs, again, strict=True))
    other = teacher_sequences(model, starts, 5, 12, greedy_tokens=3, seed=2, batch_size=2)
    assert not all(torch.equal(a, b) for a, b in zip(seqs, other, strict=True))

    with torch.no_grad():
        for seq in seqs:
            assert int(seq[0, 0]) in starts
            logits = model(input_ids=seq).logits[0]
            # The opening (tokens 1..3) is the model's argmax given what came before: the cached
            # incremental decode agrees with a full forward.
            assert seq[0, 1:4].tolist() == logits[:3].argmax(-1).tolist()
