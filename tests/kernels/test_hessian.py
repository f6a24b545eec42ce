import torch

from quantgate.kernels.hessian import HessianCollector


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = torch.nn.Linear(6, 4), torch.nn.Linear(6, 3)  # read the same input
        self.o = torch.nn.Linear(4, 6)

    def forward(self, x):
        return self.o(self.q(x) * self.k(x).sum(-1, keepdim=True))


def test_hessians_match_direct_sum_and_shared_inputs_share_one_accumulator():
    torch.manual_seed(0)
    block = _Block()
    col = HessianCollector().attach({"q": block.q, "k": block.k, "o": block.o})
    xs = [torch.randn(2, 5, 6), torch.randn(1, 7, 6)]
    with torch.no_grad():
        for x in xs:
            block(x)
            col.next_batch()
    col.detach()
    H = col.hessians()
    flat = torch.cat([x.reshape(-1, 6) for x in xs]).double()
    torch.testing.assert_close(H["q"], flat.T @ flat / flat.shape[0])
    assert H["k"] is H["q"]
    o_in = torch.cat([(block.q(x) * block.k(x).sum(-1, keepdim=True)).reshape(-1, 4) for x in xs]).double()
    torch.testing.assert_close(H["o"], o_in.T @ o_in / o_in.shape[0])
    assert col.accumulators["q"].tokens == 17
    block(xs[0])  # detached: no further updates
    assert col.accumulators["q"].tokens == 17
