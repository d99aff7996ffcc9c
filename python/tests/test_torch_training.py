"""A small causal transformer (2 layers, d_model 256, 8 heads; python/examples/
tiny_transformer.py) trained 200 Adam steps on a copy task three times from the same weights
and batches: attention by PyTorch in float32, by attn.torch in float32, and by PyTorch in
float64 (the rest of the model float32 in all three). The loss curve with attn.torch stays as
close to the float64-attention curve as PyTorch's float32 one does: the rule of the other
tests (normwise error at most twice torch's float32 error, or 2e-6) applied to the curves.
Short sequences (12 tokens, batch 4) keep it near 15 s of one core."""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is needed for attn.torch "
                                            "(apt-get install python3-torch)")

from helpers import check_close  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "examples"))
import tiny_transformer as tt  # noqa: E402

STEPS = 200


@pytest.fixture
def one_thread():
    """One torch thread (as ctest runs tests side by side), restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_loss_curves_agree(one_thread):
    ref = np.array(tt.train(tt.torch_attention_float64, STEPS))
    theirs = np.array(tt.train(tt.torch_attention, STEPS))
    ours = np.array(tt.train(tt.attn_attention, STEPS))
    # The model learns the task (else agreeing curves would say little).
    assert ref[-20:].mean() < 0.05 * ref[:5].mean(), ref[[0, 50, 100, 199]]
    check_close(ours, ref, theirs, "loss curve with attn.torch")
