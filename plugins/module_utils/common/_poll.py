# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One way to wait for the cluster or the node to reach a state (PRIVATE to gpuops.nvidia).

``poll`` reads until a predicate holds or a deadline passes, and returns what it saw last, so that a timeout message
can say what the state was instead of only that it was not reached. The clock and the sleep are parameters, so a
test drives the wait with a fake clock and never sleeps. Target-side code: Python 3.9+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import time

# done: whether ``until`` held on the last read; seen: what the last read returned; waited: seconds since the first
# read started, on ``clock``.
Polled = collections.namedtuple("Polled", ["done", "seen", "waited"])


def poll(read, until, timeout, interval, clock=time.monotonic, sleep=time.sleep):
    """Call ``read()`` until ``until(seen)`` is true for what it returned, or ``timeout`` seconds have passed since
    the first read began. Between reads it sleeps ``interval`` seconds, never past the deadline, so the last read is
    made at the deadline. It reads at least once (a timeout of 0 is one read). Exceptions of ``read`` pass through.
    Returns Polled(done, seen, waited)."""
    start = clock()
    deadline = start + timeout
    while True:
        seen = read()
        now = clock()
        if until(seen):
            return Polled(True, seen, now - start)
        if now >= deadline:
            return Polled(False, seen, now - start)
        sleep(min(interval, max(0.0, deadline - now)))
