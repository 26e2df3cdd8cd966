"""Colour scales (core/views/colors.py): defaults from the data, the user's options, BOS left out, errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from interplab.core.views import heatmap_data
from interplab.core.views.colors import (
    ColorScale,
    bos_mask,
    check_scale_options,
    color_scale,
    column_scales,
    scales_payload,
)

# The punctuation-direction scores of nbs/01: every value negative (about -668..-57).
PUNCT = np.array([-668.0, -610.0, -420.0, -390.0, -300.0, -120.0, -57.0])


def test_one_signed_data_is_sequential_over_its_range_not_all_one_colour():
    """Values all of one sign span the whole sequential scale by default, not one half of a diverging one."""
    s = color_scale(PUNCT)
    assert s == ColorScale("sequential", -668.0, -57.0, -668.0)
    pos = s.position(PUNCT)
    assert pos[0] == 0.0 and pos[-1] == 1.0 and np.all(np.diff(pos) > 0)


def test_diverging_around_a_chosen_center_uses_both_colours():
    s = color_scale(PUNCT, scale="diverging", center=-400.0)
    assert s.kind == "diverging" and s.center == -400.0
    assert s.vmin == pytest.approx(-743.0) and s.vmax == pytest.approx(-57.0)  # symmetric: the larger side sets both
    pos = s.position(PUNCT)
    assert (pos < 0).sum() == 3 and (pos > 0).sum() == 4 and pos.max() == 1.0
    # without a center, a diverging scale is centred on 0: everything below it
    assert (color_scale(PUNCT, scale="diverging").position(PUNCT) < 0).all()


def test_auto_defaults():
    assert color_scale([0.0, 3.0, 1.0]) == ColorScale("sequential", 0.0, 3.0, 0.0)  # activations: from 0
    assert color_scale([-1.0, 2.0]) == ColorScale("diverging", -2.0, 2.0, 0.0)  # both signs: around 0
    assert color_scale([2.0, 5.0], vmin=-5, vmax=5).kind == "diverging"  # explicit ends across 0
    assert color_scale([0.0, 0.0]) == ColorScale("sequential", 0.0, 1.0, 0.0)  # all zero: nothing coloured
    assert color_scale([5.0, 5.0]).position([5.0]).tolist() == [1.0]  # constant: 0..5
    assert color_scale([], scale="diverging") == ColorScale("diverging", -1.0, 1.0, 0.0)


def test_explicit_ends_and_asymmetric_diverging():
    s = color_scale([-1.0, 10.0], scale="diverging", vmin=-1.0)
    assert (s.vmin, s.center, s.vmax) == (-1.0, 0.0, 10.0)
    assert s.position([-1.0, -0.5, 5.0, 20.0]).tolist() == [-1.0, -0.5, 0.5, 1.0]
    seq = color_scale([0.0, 100.0], vmax=10.0)
    assert seq.position([5.0, 50.0]).tolist() == [0.5, 1.0]  # clipped above vmax


def test_excluded_entries_do_not_set_the_range():
    values = np.array([1000.0, 2.0, 0.5, 1.0])
    bos = np.array([True, False, False, False])
    assert color_scale(values, exclude=bos).vmax == 2.0
    assert color_scale(values).vmax == 1000.0
    assert color_scale(values, exclude=bos).position([1000.0]).tolist() == [1.0]  # still drawn, clipped


def test_bos_is_left_out_of_heatmap_scales_by_default():
    docs = [["<bos>", " a", " b"], ["<bos>", " c"], [" no", " bos"]]
    data = heatmap_data(docs, [50.0, 1.0, 2.0, 40.0, 3.0, 0.5, 0.2])
    assert data.bos.tolist() == [True, False, False, True, False, False, False]
    assert data.color_scales()[0].vmax == 3.0
    assert data.color_scales(exclude_bos=False)[0].vmax == 50.0
    assert bos_mask(["x", "<bos>"], np.array([0, 2])).tolist() == [False, False]  # only at a document's start


def test_column_scales_and_payload():
    values = np.array([[0.0, -1.0], [3.0, 2.0], [9.0, -9.0]], dtype=np.float32)
    bos = np.array([False, False, True])
    scales = column_scales(values, exclude_T=bos)
    assert scales == [ColorScale("sequential", 0.0, 3.0, 0.0), ColorScale("diverging", -2.0, 2.0, 0.0)]
    payload = scales_payload(scales)
    assert payload.dtype == np.float32 and payload.tolist() == [[0, 0, 0, 3], [1, -2, 0, 2]]
    assert [s.vmax for s in column_scales(values, vmax=1.0)] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale": "log"}, "scale='log' is not one of ('auto', 'sequential', 'diverging')"),
        ({"vmin": 2, "vmax": 1}, "vmin must be below vmax, got vmin=2.0 and vmax=1.0"),
        ({"vmin": float("nan")}, "vmin must be a finite number or None, got nan"),
        ({"vmax": "3"}, "vmax must be a finite number or None, got '3'"),
        ({"scale": "sequential", "center": 0}, "center=0.0 only applies to a diverging scale"),
        ({"center": 1, "vmax": 0.5}, "vmax=0.5 must lie on its side of center=1.0"),
    ],
)
def test_bad_options_name_the_value_and_the_choices(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_scale_options(**kwargs)
    with pytest.raises(ValueError):
        color_scale([1.0, 2.0], **kwargs)


def test_diverging_bound_on_the_wrong_side_of_the_default_center():
    message = "vmin=1.0 must lie on its side of the diverging scale's center 0.0"
    with pytest.raises(ValueError, match=re.escape(message)):
        color_scale([1.0, 2.0], scale="diverging", vmin=1.0)
