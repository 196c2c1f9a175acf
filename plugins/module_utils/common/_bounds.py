# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounds on numbers a user types, checked before the number drives a wait, a loop or an allocation.

Waits (timeouts in seconds) are bounded to one day. That bound is this collection's choice, not a limit of a tool:
no step of a converge should wait longer, a larger value is a typo, and far beyond it (10**18, 10**400) the
arithmetic of deadlines overflows a float or the platform's time_t.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

MAX_WAIT_S = 86400


def interval_error(option, value, minimum=0.01, maximum=3600):
    """None when ``value`` is a finite number of seconds from ``minimum`` to ``maximum`` (a poll interval), else the
    error message (NaN and inf fail the comparison)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not minimum <= value <= maximum:
        return "%s must be a number of seconds from %s to %s, got %r" % (option, minimum, maximum, value)
    return None


def seconds_error(option, value, minimum=0, maximum=MAX_WAIT_S):
    """None when ``value`` is a whole number of seconds from ``minimum`` to ``maximum``, else the error message."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        return "%s must be a whole number of seconds from %d to %d (%s), got %r" % (
            option, minimum, maximum, "one day" if maximum == MAX_WAIT_S else "the limit", value)
    return None


def table_errors(values, limits):
    """Every problem with ``values`` (setting -> value) against ``limits`` (setting -> (lowest, highest, whole
    number)), each saying what is valid; an unknown setting is one too."""
    errors = []
    for key, value in sorted(values.items()):
        if key not in limits:
            errors.append("unknown setting %s; valid: %s" % (key, ", ".join(sorted(limits))))
            continue
        low, high, whole = limits[key]
        number = isinstance(value, int) if whole else isinstance(value, (int, float))
        if isinstance(value, bool) or not number or not low <= value <= high:
            errors.append("%s must be a %s from %s to %s, got %r" % (
                key, "whole number" if whole else "number", low, high, value))
    return errors
