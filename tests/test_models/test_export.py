"""Exporting LeCT with ``torch.jit.trace``."""
import copy
import warnings

import pytest
import torch

from lect_mm.models.backbones import LeCT


@pytest.mark.parametrize('arch', ['v1', 'v2'])
def test_jit_trace_passes_its_check(arch):
    # impl='auto' used to pick LeMSA's literal path when autograd records
    # the call (at 96x80 every stage of v1 and v2 does), while
    # check_trace re-traces under no_grad, so the two graphs differed.
    # One block per stage keeps the test cheap; each stage keeps the
    # variant's attention and pooling, so the same paths are chosen.
    settings = copy.deepcopy(LeCT.arch_zoo[arch])
    settings['depths'] = [1, 1, 1]
    torch.manual_seed(0)
    model = LeCT(arch=settings, out_indices=(0, 1, 2)).eval()
    x = torch.randn(1, 3, 96, 80)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # TracerWarning, deprecation
        traced = torch.jit.trace(model, x, check_trace=True)
    y = torch.randn(1, 3, 96, 80)
    for got, ref in zip(traced(y), model(y)):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
