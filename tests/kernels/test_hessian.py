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


class _FreesItsInput(torch.nn.Module):
    """q/k read a fresh normed tensor that is freed before o runs on a new tensor of the same
    shape and version at the same address, as an attention output gets the q/k/v input's memory in
    a decoder layer. Left to malloc that reuse happened or not depending on what ran before in the
    process (it did not once in a full CI run), so both tensors are built on one buffer here."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.o = (torch.nn.Linear(96, 96) for _ in range(3))
        self.reused = 0

    @staticmethod
    def _fresh(buf: bytearray, values: torch.Tensor) -> torch.Tensor:
        """A new tensor object on `buf` holding `values`, at version 0 (no in-place op on it)."""
        import numpy as np

        np.frombuffer(buf, dtype=np.float32)[:] = values.detach().numpy().ravel()
        return torch.frombuffer(buf, dtype=torch.float32).view(values.shape)

    def forward(self, x):
        buf = bytearray(x.numel() * 4)
        h = self._fresh(buf, x * 2.0)
        ptr, version = h.data_ptr(), h._version
        a, b = self.q(h), self.k(h)
        del h  # the tensor is gone; its memory is not
        z = self._fresh(buf, a * b)
        self.reused += (z.data_ptr(), z._version) == (ptr, version)
        return self.o(z)


def test_a_reused_address_is_not_taken_for_a_shared_input():
    torch.manual_seed(0)
    block = _FreesItsInput()
    col = HessianCollector().attach({"q": block.q, "k": block.k, "o": block.o})
    xs = [torch.randn(1, 64, 96) for _ in range(4)]
    with torch.no_grad():
        for x in xs:
            block(x)
            col.next_batch()
    col.detach()
    assert block.reused == len(xs)  # the case this test exists for did happen, every time
    H = col.hessians()
    assert H["k"] is H["q"] and H["o"] is not H["q"]
    with torch.no_grad():
        o_in = torch.cat([(block.q(2 * x) * block.k(2 * x)).reshape(-1, 96) for x in xs]).double()
    torch.testing.assert_close(H["o"], o_in.T @ o_in / o_in.shape[0])
    assert col.accumulators["q"].tokens == col.accumulators["o"].tokens == 256
