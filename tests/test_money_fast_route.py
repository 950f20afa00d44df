"""usd_to_micro's float shortcuts agree with the decimal definition (kernel_lib.core.money)."""
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_EVEN, Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_lib.core.money import usd_to_micro

_MODES = {"nearest": ROUND_HALF_EVEN, "up": ROUND_CEILING, "down": ROUND_FLOOR}


def reference(amount_usd: float, rounding: str) -> int:
    """The module's definition: the float's shortest decimal, times 1e6, rounded as asked."""
    return int((Decimal(repr(float(amount_usd))) * 1_000_000).quantize(Decimal(1), rounding=_MODES[rounding]))


micro_amounts = st.integers(min_value=0, max_value=2**46).map(lambda m: m / 1_000_000)
any_amounts = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)
near_ties = st.integers(min_value=0, max_value=10**12).map(lambda m: (m + 0.5) / 1_000_000)


@settings(max_examples=2000)
@given(st.one_of(micro_amounts, any_amounts, near_ties), st.sampled_from(sorted(_MODES)))
def test_every_rounding_matches_the_decimal_definition(amount_usd, rounding):
    assert usd_to_micro(amount_usd, rounding) == reference(amount_usd, rounding)


def test_a_whole_number_of_micro_dollars_is_exact_in_every_direction():
    for amount_usd, micro in ((0.1, 100_000), (0.000001, 1), (33.554431, 33_554_431), (1234567.891011, 1234567891011)):
        for rounding in _MODES:
            assert usd_to_micro(amount_usd, rounding) == micro
    assert usd_to_micro(0.0000015, "up") == 2 and usd_to_micro(0.0000015, "down") == 1
