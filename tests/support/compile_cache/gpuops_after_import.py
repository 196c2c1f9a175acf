"""Run a callback right after a module is first imported (issue 49): the tests' hooks of this directory that change
a library of the process (gpuops_shared_ansiballz.py: ansible.constants; gpuops_jinja_cache.py: jinja2.environment)
arm one at start-up instead of importing the library in every process the tests start."""
import sys


class AfterImport(object):
    """A sys.meta_path finder that calls ``callback(module)`` once, right after ``name`` is first imported (its
    loader's exec_module). Plain classes, not importlib.abc's: every module process the tests start loads this file,
    and importlib.abc would be one more import for each."""

    def __init__(self, name, callback):
        self.name = name
        self.callback = callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(fullname, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, callback = spec.loader, self.callback

        class _Loader(object):
            def create_module(self, spec):
                return loader.create_module(spec)

            def exec_module(self, module):
                loader.exec_module(module)
                callback(module)

        spec.loader = _Loader()
        return spec
