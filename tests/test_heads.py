"""Action heads: samples follow their distribution; log-probs and entropies by hand."""

import math

import torch

from rltool import keys as K
from rltool.modules.heads import CategoricalHead


def test_categorical_samples_follow_the_softmax_and_greedy_takes_the_argmax():
    torch.manual_seed(0)
    probs = torch.tensor([0.7, 0.2, 0.1, 0.0])
    logits = probs.clamp_min(1e-30).log().expand(100_000, 2, 4)  # extra batch dims too
    actions = CategoricalHead.sample({K.LOGITS: logits}, explore=True)
    assert actions.shape == (100_000, 2) and actions.dtype == torch.int64
    freq = torch.bincount(actions.reshape(-1), minlength=4) / actions.numel()
    # 5 standard errors of a frequency from 200k draws is <= 0.0052; probability 1e-30 never comes
    assert torch.allclose(freq, probs, atol=0.0052) and freq[3] == 0
    greedy = CategoricalHead.sample({K.LOGITS: logits[:3]}, explore=False)
    assert (greedy == 0).all()


def test_categorical_log_prob_and_entropy_by_hand():
    params = {K.LOGITS: torch.log(torch.tensor([[0.5, 0.25, 0.25]]))}
    logp = CategoricalHead.log_prob(params, torch.tensor([1]))
    assert torch.allclose(logp, torch.tensor([math.log(0.25)]))
    entropy = -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    assert torch.allclose(CategoricalHead.entropy(params), torch.tensor([entropy]))
