"""A clock that moves only when the code under test sleeps: give ``clock`` as the clock and ``clock.sleep`` as the
sleep of a wait (_poll.poll, _waits.wait, a module's drain), and a test decides time without sleeping."""


class FakeClock(object):
    def __init__(self, start=0.0):
        self.now = start
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds
