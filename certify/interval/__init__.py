"""Outward-rounded interval arithmetic on numpy float64 arrays (see ``_interval`` for the rounding margins)."""

from certify.interval._interval import EXP_REL_MARGIN as EXP_REL_MARGIN
from certify.interval._interval import U as U
from certify.interval._interval import Interval as Interval
from certify.interval._interval import as_interval as as_interval
from certify.interval._interval import clip_nonnegative as clip_nonnegative
from certify.interval._interval import exp as exp
from certify.interval._interval import hull as hull
from certify.interval._interval import inf_norm_upper as inf_norm_upper
from certify.interval._interval import intersect as intersect
from certify.interval._interval import interval_einsum as interval_einsum
from certify.interval._interval import isum as isum
from certify.interval._interval import linear_combination as linear_combination
from certify.interval._interval import reciprocal as reciprocal
from certify.interval._interval import round_down as round_down
from certify.interval._interval import round_up as round_up
from certify.interval._interval import sqrt as sqrt
from certify.interval._interval import square as square
from certify.interval._interval import stack as stack
