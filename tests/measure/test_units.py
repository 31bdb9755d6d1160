"""units.py, the package's one formatter of numbers in human units, against numbers worked out by hand."""
import pytest

from tinygrad_block.units import human, human_bytes, human_flops


@pytest.mark.parametrize("n, text", [(0, "0"), (999, "999"), (1000, "1.00 K"), (6_738_415_616, "6.74 B"),
                                     (70_553_706_496, "70.55 B"), (-2_500_000, "-2.50 M")])
def test_human_divides_by_a_thousand_per_unit(n, text):
    assert human(n) == text


@pytest.mark.parametrize("n, text", [(512, "512 B"), (1024, "1.00 KiB"), (26_843_545_600, "25.00 GiB"),
                                     (3 * 2**40, "3.00 TiB")])
def test_human_bytes_divides_by_1024(n, text):
    assert human_bytes(n) == text


@pytest.mark.parametrize("n, text", [(1, "1 FLOP"), (2, "2 FLOPs"), (532, "532 FLOPs"), (1_234_567, "1.23 MFLOPs"),
                                     (404_750_336, "404.75 MFLOPs"), (15_361_638_400, "15.36 GFLOPs")])
def test_human_flops_names_the_prefix(n, text):
    assert human_flops(n) == text
