# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RFC 3339 times read (PRIVATE to gpuops.nvidia): the one parser of the collection, for the times the health sweep
writes on a Node (its records, conditions and annotations), the fleet report's and the cluster Lease's
(``metav1.Time`` and ``metav1.MicroTime``, which the API server writes with ``Z`` and up to six fraction digits).

RFC 3339, section 5.6: ``full-date "T" full-time``, the time ``hh:mm:ss`` with an optional fraction of any length and
an offset, ``Z`` or ``+hh:mm`` / ``-hh:mm`` (``-00:00``: UTC, the local offset unknown). Its section 5.6 note allows
``t``, ``z`` and a space for ``T``; they are read too. A leap second (``:60``) is read as ``:59`` of the same minute
(Python's datetime has none). The modules run on the node's Python 3.9+, where ``datetime.fromisoformat`` does not
take ``Z`` (only from 3.11 on) and takes forms RFC 3339 does not (``2026-11-29``, no offset): hence this parser.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import datetime
import math
import re

EXAMPLE = "2026-11-29T06:17:10Z"
# (ASCII digits only: Python's \d also takes other scripts' digits; fullmatch: "$" would let a final newline through)
_FORM = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:([Zz])|([+-])(\d{2}):(\d{2}))",
                   re.ASCII)
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def parse(text):
    """An aware datetime in UTC of the RFC 3339 time ``text`` (microseconds kept, further digits dropped). ValueError
    saying what is wrong and what is valid otherwise."""
    match = _FORM.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise ValueError("%r is not an RFC 3339 time with an offset, such as %s or 2026-11-29T08:17:10.25+02:00 "
                         "(date, T, time with an optional fraction, then Z or +hh:mm/-hh:mm)" % (text, EXAMPLE))
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    micro = int((match.group(7) or "0")[:6].ljust(6, "0"))
    if match.group(8):
        zone = datetime.timezone.utc
    else:
        hours, minutes = int(match.group(10)), int(match.group(11))
        if hours > 23 or minutes > 59:
            raise ValueError("%r has no valid offset (from -23:59 to +23:59)" % (text,))
        sign = -1 if match.group(9) == "-" else 1
        zone = datetime.timezone(sign * datetime.timedelta(hours=hours, minutes=minutes))
    if second == 60:
        second = 59             # a leap second: the last second of its minute
    try:
        moment = datetime.datetime(year, month, day, hour, minute, second, micro, tzinfo=zone)
        return moment.astimezone(datetime.timezone.utc)
    except (ValueError, OverflowError) as exc:
        raise ValueError("%r is not a valid time: %s" % (text, exc)) from exc


def seconds(text):
    """Seconds since the epoch (a float) of the RFC 3339 time ``text``; ValueError as ``parse``."""
    return (parse(text) - _EPOCH).total_seconds()


def seconds_or_none(text):
    """``seconds(text)``, or None where ``text`` is absent or not an RFC 3339 time (a record someone else wrote)."""
    try:
        return seconds(text)
    except ValueError:
        return None


def whole_seconds_or_none(text):
    """``seconds_or_none`` rounded down to a whole second (an int), or None."""
    value = seconds_or_none(text)
    return None if value is None else int(math.floor(value))
