"""The tiny Llama (widths 96, 192, 48: not powers of two) and the calibration set the 2-bit tests share."""

import pytest

from factories import calibration_file, tiny_llama


@pytest.fixture(scope="module")
def model96(tmp_path_factory) -> str:
    return str(tiny_llama(tmp_path_factory.mktemp("tiny96") / "model", hidden=96))


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    return str(calibration_file(tmp_path_factory.mktemp("cal")))
