"""How many perplexity looks a variant gets (flows.quantize_and_gate): one where the engine scores it
(a second look would be a second start-up), two on the reference path, where a reject after the
first reads no more."""

from quantgate.conf.load import load_config
from quantgate.flows.quantize_and_gate import _first_look


def test_a_format_the_engine_refused_gets_the_two_look_screen():
    config = load_config()  # the default: scored on the engine, screen_share 0.25
    specs = {v.name: v for v in config.variants}
    assert _first_look(config, specs["int8_w8a8"], {}) == "all"
    assert _first_look(config, specs["int2_rtn"], {}) == "all"  # a format the engine may serve
    assert _first_look(config, specs["int2_rtn"], {"int2_rtn": "no WNA16 kernel for uint2b2"}) == "first"
    assert _first_look(config, specs["quip_sharp_2bit"], {}) == "first"  # no production engine
    reference = config.model_copy(update={"eval": config.eval.model_copy(update={"backend": "reference"})})
    assert _first_look(reference, specs["int8_w8a8"], {}) == "first"
