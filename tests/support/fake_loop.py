"""The thread that runs a fake controller's ``reconcile()`` beside the fake API server, every ``poll`` seconds, until
``stop()`` (fake_gpu_operator.py, fake_daemonsets.py). An exception in ``reconcile`` is kept in ``errors`` (a test
asserts there are none) instead of ending the thread."""

import threading
import traceback


class ReconcileLoop(object):
    name = "fake-controller"
    poll = 0.05

    def _init_loop(self):
        self.errors = []
        self._stop = threading.Event()
        self._thread = None

    def reconcile(self):
        raise NotImplementedError

    def start(self):
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(10)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception:  # noqa: BLE001 - a bug in the fake must be seen by the test, not kill the thread
                self.errors.append(traceback.format_exc())
            self._stop.wait(self.poll)
