"""compile=True: LeCT's attention and FFN blocks of all three variants
compile as one graph in training (no graph break), with the values and
gradients of eager mode.

The check runs in a child process: once autograd has run backward through
a compiled module, no forked child of the process can run backward
(torch refuses: "autograd's threading in combination with fork"), and
other tests train in forked children. The child is forked (it inherits the
imported torch and lect_mm, which a fresh interpreter takes seconds to
import); where this process can no longer fork a child that runs backward,
a fresh interpreter runs the check."""
import os
import os.path as osp
import select
import signal
import subprocess
import sys
import traceback

import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def check_variants_compile_as_one_graph():
    from lect_mm.models.backbones import LeCT

    # One block per stage, each stage taking another variant's attention:
    # v1's LeMSA (depthwise query upsampler), v2's LeMSAv2, v3's LeMSA
    # (spatially-varying transposed-conv upsampler). One compilation
    # covers the blocks of v1, v2 and v3 (Dynamo's tracing costs seconds).
    attn_cfgs = [
        LeCT.arch_zoo['v1']['attn_cfgs'][0],
        LeCT.arch_zoo['v2']['attn_cfgs'][1],
        LeCT.arch_zoo['v3']['attn_cfgs'][2],
    ]
    arch = dict(LeCT.arch_zoo['v1'], depths=[1, 1, 1], attn_cfgs=attn_cfgs)
    torch.manual_seed(0)
    # Without dropout: under compilation FastDropout is F.dropout, whose
    # masks differ from its eager ones (tests/test_blocks/test_dropout.py
    # compiles it on its own).
    model = LeCT(arch=arch, img_size=64, out_indices=(0, 1, 2),
                 drop_rate=0., drop_path_rate=0.).train()
    types = [type(stage.blocks[0].attn).__name__ for stage in model.stages]
    assert types == ['LeMSA', 'LeMSAv2', 'LeMSA']
    x = torch.randn(2, 3, 64, 64)

    def step(net):
        inputs = x.clone().requires_grad_()
        outs = net(inputs)
        sum(out.square().mean() for out in outs).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return outs, inputs.grad, grads

    compiled = torch.compile(model, backend='eager', fullgraph=True)
    outs, x_grad, grads = step(compiled)  # fullgraph: a break raises
    ref_outs, ref_x_grad, ref_grads = step(model)
    for got, ref in zip(outs, ref_outs):
        torch.testing.assert_close(got, ref)
    torch.testing.assert_close(x_grad, ref_x_grad)
    for got, ref in zip(grads, ref_grads):
        torch.testing.assert_close(got, ref)


DONE = 'compiled as one graph'
FORK_REFUSED = "autograd's threading in combination with fork"


def _check_in_forked_child():
    """(exit code, report) of the check run in a forked child."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without pytest's exit
        os.close(read_end)
        status = 1
        try:
            check_variants_compile_as_one_graph()
            report, status = DONE, 0
        except BaseException:  # noqa: B036  (report anything)
            report = traceback.format_exc()
        finally:
            with os.fdopen(write_end, 'w') as f:
                f.write(report)
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        if not select.select([f], [], [], 600)[0]:  # nothing after 10 min
            os.kill(pid, signal.SIGKILL)
        report = f.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), report


@pytest.mark.heavy
def test_every_variants_blocks_compile_as_one_graph():
    status, report = _check_in_forked_child()
    if status != 0 and FORK_REFUSED in report:
        proc = subprocess.run([sys.executable, __file__],
                              cwd=REPO, capture_output=True, text=True,
                              timeout=600)
        status = proc.returncode
        report = proc.stderr[-5000:] + '\n' + proc.stdout.strip()
    assert status == 0, report[-8000:]
    assert report.strip().endswith(DONE), report[-8000:]


if __name__ == '__main__':
    sys.path.insert(0, REPO)
    check_variants_compile_as_one_graph()
    print(DONE)
