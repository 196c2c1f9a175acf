"""The filter, test, lookup and action plugins that ansible's forked workers load, loaded by the process that forks them
before it forks (issue 49), armed by this directory's sitecustomize.py where the compile cache is on
(``GPUOPS_TEST_COMPILE_CACHE``); ``GPUOPS_TEST_PLUGIN_PRELOAD=off`` leaves ansible-core's loaders alone.

Why: ansible-core forks a worker for every task on every host and the worker renders the task's templates, so a
plugin module that the templates use is loaded by the worker, not by ansible-playbook, and every worker loads it again.
In test_site_lab's lab converge (449 workers, 5 runs) ansible-core's Jinja2Loader loaded all of ``ansible.builtin``'s
filters and tests on each worker's first lookup, a lookup of one of the collection's filters imported every filter file
of the collection (all 15, in 102 workers), and workers imported the lookups they used (``ansible.builtin.file``,
``env``, ``template``, ``vars``, the collection's ``node_steps``) and the ``normal`` action: the workers' lookups took
3.6 CPU s. Loaded in ansible-playbook before its strategy forks (the loaders keep a loaded module in their
``_module_cache``, and a fork inherits it), each is loaded once per run.

How: every process that imports ``ansible.executor.task_queue_manager`` (ansible-playbook and ansible, and so their
workers, which are forks of them) records the plugin names whose lookup loaded a plugin module in this process, one
``type<TAB>name`` line per name in ``<cache>/plugins/loaded.txt``; before a TaskQueueManager runs its first play, the
process loads Jinja2Loader's ``ansible.builtin`` filters and tests and looks up every name recorded so far with its own
loaders (the names, not the files: a run finds them on its own paths, so a test's copy of the collection loads its own
copy). A lookup there is the call a worker makes (``loader.get(name)``, for the class only: nothing is instantiated),
so what a worker finds, and what a test checks, is unchanged: only where it was loaded first. The preload says nothing
(ansible's Display is quiet while it loads): a name this process cannot load (another copy's plugin, a plugin that fails
to import) is skipped, and a worker that looks it up warns or fails as it would have.
"""
import os
import sys

FOLDER = "plugins"
FILE = "loaded.txt"
TYPES = ("filter", "test", "lookup", "action")   # the loaders whose plugins workers load on their own
# what a load may say through ansible's Display: quiet while the preload loads
_SPEAKING = ("display", "warning", "deprecated", "error", "debug", "v", "vv", "vvv", "vvvv", "vvvvv", "vvvvvv",
             "verbose")
_MISSING = object()


def _nothing(*args, **kwargs):   # pylint: disable=unused-argument
    return None


def read_names(path):
    """The (type, name) pairs recorded in ``path``, sorted; none where it cannot be read; malformed lines skipped."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    names = set()
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 2 and parts[0] in TYPES and parts[1]:
            names.add((parts[0], parts[1]))
    return sorted(names)


class PluginPreload(object):
    """Records, in ``path``, the names whose lookup loaded a plugin module through the loaders of ``loader_module``
    (ansible.plugins.loader) in this process, and loads every recorded name at ``preload()``; ``preloaded`` counts
    the names this process loaded there."""

    def __init__(self, path, loader_module, append):
        self.path = path
        self.append = append      # (path, line): one write in append mode (gpuops_startup.append_line)
        self.loaders = dict((kind, getattr(loader_module, "%s_loader" % kind)) for kind in TYPES)
        self.known = set(read_names(path))
        self.done = False
        self.preloaded = 0
        self._loads = [0]
        for kind, loader in self.loaders.items():
            self._watch(kind, loader)

    def _watch(self, kind, loader):
        """The loader instance's own get_with_context and _load_module_source wrap its class's (Jinja2Loader's
        super() calls inside a lookup go to the class's methods, so a lookup is counted once)."""
        loads, lookup, load = self._loads, loader.get_with_context, loader._load_module_source

        def load_module_source(*args, **kwargs):
            loads[0] += 1
            return load(*args, **kwargs)

        def get_with_context(name, *args, **kwargs):
            before = loads[0]
            try:
                return lookup(name, *args, **kwargs)
            finally:
                if loads[0] != before and isinstance(name, str):
                    self._record(kind, name)

        loader._load_module_source = load_module_source
        loader.get_with_context = get_with_context

    def _record(self, kind, name):
        if (kind, name) in self.known or "\t" in name or "\n" in name:
            return
        self.known.add((kind, name))
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
        except OSError:
            return                        # a recording, never a reason for a run to fail
        self.append(self.path, ("%s\t%s\n" % (kind, name)).encode("utf-8", "replace"))

    def preload(self):
        """Once per process: the loaders' ansible.builtin Jinja plugins and every name recorded so far, loaded here,
        silently (a warning or debug line of a load is the worker's to show, as it would have without this)."""
        if self.done:
            return
        self.done = True
        display = sys.modules["ansible.utils.display"].Display()   # the process's one Display
        saved = dict((name, vars(display).get(name, _MISSING)) for name in _SPEAKING if hasattr(display, name))
        for name in saved:
            setattr(display, name, _nothing)
        try:
            self._load()
        finally:
            for name, value in saved.items():
                if value is _MISSING:
                    delattr(display, name)
                else:
                    setattr(display, name, value)

    def _load(self):
        for kind in ("filter", "test"):
            ensure = getattr(self.loaders[kind], "_ensure_non_collection_wrappers", None)
            if ensure is not None:
                try:
                    ensure()
                except Exception:   # pylint: disable=broad-except
                    pass            # a worker meets the same failure where it would have
        names = read_names(self.path)
        self.known.update(names)
        for kind, name in names:
            try:
                found = self.loaders[kind].get(name, class_only=True)   # the plugin's class: loaded, not instantiated
            except Exception:   # pylint: disable=broad-except
                found = None    # failing to load: the worker says so as before
            if found is not None:
                self.preloaded += 1


def install(directory, queue_manager_module, loader_module, append):
    """Record (a line at a time with ``append(path, line)``) and preload through ``loader_module``'s loaders,
    preloading before ``queue_manager_module``'s TaskQueueManager runs a play; returns the PluginPreload."""
    preload = PluginPreload(os.path.join(directory, FILE), loader_module, append)
    manager = queue_manager_module.TaskQueueManager
    run = manager.run

    def run_after_preload(self, *args, **kwargs):
        preload.preload()
        return run(self, *args, **kwargs)

    run_after_preload.__wrapped__ = run
    run_after_preload.preload = preload
    manager.run = run_after_preload
    return preload
