import torch

from quantgate.kernels.activation_stats import (
    ChannelStats,
    drift_score,
    profile_drift,
    top_outliers,
)


def test_stats_match_direct_computation():
    torch.manual_seed(0)
    xs = [torch.randn(2, 7, 5), torch.randn(1, 3, 5)]
    s = ChannelStats.empty(5)
    for x in xs:
        s.update(x)
    flat = torch.cat([x.reshape(-1, 5) for x in xs])
    assert s.tokens == 17
    torch.testing.assert_close(s.mean_abs, flat.abs().mean(0))
    torch.testing.assert_close(s.abs_max, flat.abs().amax(0))


def test_planted_outlier_channel_is_found_first():
    abs_max = torch.ones(64)
    abs_max[13] = 40.0
    abs_max[50] = 9.0
    o = top_outliers(abs_max, 2)
    assert o.channels == [13, 50]
    assert o.ratio_to_median[0] == 40.0


def test_drift_is_zero_for_same_profile_and_grows_with_change():
    a = torch.rand(32) + 0.5
    assert profile_drift(a, a) == 0.0
    small, big = profile_drift(a, a * 1.05), profile_drift(a, a * 2)
    assert 0 < small < big
    assert drift_score({"l": a}, {"l": a * 2}) == big
