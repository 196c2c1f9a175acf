"""The collection's one RFC 3339 parser (common/_rfc3339), which the fleet report, the quarantine records and the
cluster Lease read their times with: property tests (a time written in any offset, with or without a fraction, in
Z or +hh:mm, reads back as the same instant), the forms RFC 3339 allows, and bad input refused with a message saying
what is valid. The three readers that used to parse by hand now answer from it."""
import datetime

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.gpuops.nvidia.plugins.module_utils.common import _rfc3339
from ansible_collections.gpuops.nvidia.plugins.module_utils.health import _health_quarantine, _health_report
from ansible_collections.gpuops.nvidia.plugins.module_utils.kube import _lease

UTC = datetime.timezone.utc
MOMENTS = st.datetimes(min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30),
                       timezones=st.just(UTC))
OFFSETS = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59)


def _write(moment, offset_minutes, digits, zulu):
    """``moment`` (aware) written in RFC 3339 at ``offset_minutes`` east of UTC with ``digits`` fraction digits."""
    local = moment.astimezone(datetime.timezone(datetime.timedelta(minutes=offset_minutes)))
    text = "%04d-%02d-%02dT%02d:%02d:%02d" % (local.year, local.month, local.day, local.hour, local.minute,
                                              local.second)     # (strftime's %Y does not pad years before 1000)
    if digits:
        text += "." + ("%06d" % local.microsecond)[:digits]
    if zulu and offset_minutes == 0:
        return text + "Z"
    sign = "-" if offset_minutes < 0 else "+"
    return text + "%s%02d:%02d" % (sign, abs(offset_minutes) // 60, abs(offset_minutes) % 60)


@settings(max_examples=300, deadline=None)
@given(MOMENTS, OFFSETS, st.integers(min_value=0, max_value=6), st.booleans())
def test_round_trip_in_any_offset(moment, offset, digits, zulu):
    """The same instant, whatever offset it was written in; the fraction kept to the digits written."""
    text = _write(moment, offset, digits, zulu)
    parsed = _rfc3339.parse(text)
    kept = moment.replace(microsecond=int(("%06d" % moment.microsecond)[:digits].ljust(6, "0")) if digits else 0)
    assert parsed == kept and parsed.tzinfo == UTC, (text, parsed, kept)
    assert _rfc3339.seconds(text) == pytest.approx((kept - datetime.datetime(1970, 1, 1, tzinfo=UTC)).total_seconds(),
                                                   abs=1e-6)


@settings(max_examples=200, deadline=None)
@given(MOMENTS, OFFSETS)
def test_the_three_readers_agree_with_the_helper(moment, offset):
    text = _write(moment.replace(microsecond=0), offset, 0, True)
    assert _health_report.parse_time(text) == _rfc3339.parse(text)
    assert _health_quarantine.parse_time(text) == int(_rfc3339.seconds(text))
    assert _lease.parse_time(text) == _rfc3339.seconds(text)


def test_z_offsets_and_fractions():
    z = _rfc3339.parse("2026-11-29T06:17:10Z")
    assert z == datetime.datetime(2026, 11, 29, 6, 17, 10, tzinfo=UTC)
    assert _rfc3339.parse("2026-11-29T08:17:10+02:00") == z == _rfc3339.parse("2026-11-29T01:47:10-04:30")
    assert _rfc3339.parse("2026-11-29t06:17:10z") == z == _rfc3339.parse("2026-11-29 06:17:10Z")
    assert _rfc3339.parse("2026-11-29T06:17:10-00:00") == z     # RFC 3339: UTC, local offset unknown
    # the API server's metav1.MicroTime: six digits; more are dropped past the microsecond, never rounded up a second
    assert _rfc3339.parse("2026-11-29T06:17:10.123456Z").microsecond == 123456
    assert _rfc3339.parse("2026-11-29T06:17:10.9999999999Z") == z.replace(microsecond=999999)
    assert _rfc3339.seconds("1970-01-01T00:00:01.5Z") == 1.5
    assert _rfc3339.seconds("1969-12-31T23:59:59Z") == -1.0
    # a leap second is the last second of its minute
    assert _rfc3339.parse("2016-12-31T23:59:60Z") == datetime.datetime(2016, 12, 31, 23, 59, 59, tzinfo=UTC)
    # whole seconds round down (before the epoch too)
    assert _rfc3339.whole_seconds_or_none("1970-01-01T00:00:01.9Z") == 1
    assert _rfc3339.whole_seconds_or_none("1969-12-31T23:59:59.5Z") == -1


@pytest.mark.parametrize("text, words", [
    ("2026-11-29T06:17:10", "is not an RFC 3339 time with an offset, such as 2026-11-29T06:17:10Z"),
    ("2026-11-29", "is not an RFC 3339 time"),
    ("2026-11-29T06:17Z", "is not an RFC 3339 time"),
    ("2026-11-29T06:17:10.Z", "is not an RFC 3339 time"),
    ("2026-11-29T06:17:10+0200", "Z or +hh:mm/-hh:mm"),
    ("2026-11-29T06:17:10 Z", "is not an RFC 3339 time"),
    (" 2026-11-29T06:17:10Z", "is not an RFC 3339 time"),
    ("2026-11-29T06:17:10Z\n", "is not an RFC 3339 time"),
    ("２０２６-11-29T06:17:10Z", "is not an RFC 3339 time"),        # digits of another script
    ("2026-11-29T06:17:10+24:00", "has no valid offset (from -23:59 to +23:59)"),
    ("2026-11-29T06:17:10+02:60", "has no valid offset"),
    ("2026-02-30T00:00:00Z", "is not a valid time: day is out of range for month"),
    ("2026-11-29T24:00:00Z", "is not a valid time"),
    ("0000-01-01T00:00:00Z", "is not a valid time"),
    ("9999-12-31T23:59:59-01:00", "is not a valid time"),           # beyond year 9999 in UTC
    (None, "None is not an RFC 3339 time"),
    (1764397030, "1764397030 is not an RFC 3339 time"),
    (b"2026-11-29T06:17:10Z", "is not an RFC 3339 time"),
])
def test_bad_input_is_refused_with_what_is_valid(text, words):
    with pytest.raises(ValueError) as raised:
        _rfc3339.parse(text)
    assert words in str(raised.value), str(raised.value)
    assert _rfc3339.seconds_or_none(text) is None and _rfc3339.whole_seconds_or_none(text) is None
    assert _lease.parse_time(text) is None and _health_quarantine.parse_time(text) is None


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_is_an_instant_or_a_clear_refusal(text):
    try:
        parsed = _rfc3339.parse(text)
    except ValueError as exc:
        assert "RFC 3339 time" in str(exc) or "no valid offset" in str(exc) or "not a valid time" in str(exc)
        return
    assert parsed.tzinfo == UTC
