"""hypothesis strategies for module options, built from an Ansible argument spec: values of the spec's own type
(its choices, plausible words of this collection's domain, small and huge numbers) and values beyond it (wrong
types, empty and huge strings, strings that carry bytes which are not UTF-8, unicode look-alikes, deep nesting,
files that are binary, huge, not YAML/TOML, directories, FIFOs, sockets, devices, dangling or looping links).

Every absolute path a strategy makes lies in the run's sandbox: a generated string that starts with ``/`` or ``~``
is prefixed with SANDBOX, which the runner replaces by the directory the example runs in (and ``~`` is that
directory too: HOME points there). So no generated input can make a module write outside its sandbox.
"""
import json
import os
import socket
import stat

from hypothesis import strategies as st

SANDBOX = "@SANDBOX@"
POOL = "pool"

# Text that arrived as bytes which are not UTF-8 (a lookup of a binary file): Ansible keeps such bytes as lone
# surrogates (surrogateescape). ansible-core 2.19 refuses them in module arguments itself, before the module runs
# ("Module failed: 'utf-8' codec can't encode character '\udcff' ... surrogates not allowed"), so module arguments
# never carry them; filters do get them, and files may hold any bytes (see make_pool).
NOT_UTF8 = ["\udcff\udcfe", "caf\udce9", "0\udc80", "all\udcc0"]
LOOKALIKES = [
    "\uff21\uff2c\uff2c",          # fullwidth ALL
    "\u0430ll",                     # Cyrillic a + ll
    "\u0661",                       # Arabic-Indic digit one
    "\u00b2",                       # superscript two (str.isdigit() is True, int() refuses it)
    "\uff10",                       # fullwidth digit zero (int() accepts it)
    "\u0967\u0968",                 # Devanagari 12
    "1\u200b",                      # zero-width space
    "\u202eall",                    # right-to-left override
    "H200\u00a0",                   # no-break space
    "\u2460",                       # circled digit one (isdigit True, int() refuses)
    "\U0001d7ce",                   # mathematical bold digit zero
    "\ufb01",                       # ligature fi
    "1g\u30fb18gb",                 # katakana middle dot instead of '.'
    "\u0131",                       # dotless i
]
HUGE_STRINGS = ["x" * 100000, "9" * 5000, "0=" + "9" * 5000 + "G", "a," * 20000, "\n" * 5000,
                "-" * 70000, "1g.18gb" * 10000]
ODD_STRINGS = ["", " ", "\t", "\n", "\x00", "a\x00b", "\x7f", "\x1b[2J", "'", '"', "\\", "%s%n%x", "{{ 7 * 7 }}",
               "{% raw %}", "${HOME}", "$(id)", "`id`", ";", "|", "&", "*", "?", "[", "{", "}", "-1", "+1", "0x10",
               "1e999", "nan", "inf", "-inf", "True", "false", "None", "null", "~", "..", "../x", "a/../../b",
               "-", "--", "--help", "-v", "all,all", "0,1", "0-7", "00", "007", " 0", "0 ", "1.0", "1.5", "1_000",
               "0b1", "1j", "yes", "on"]
HUGE_INTS = [2 ** 31, 2 ** 32 + 1, 2 ** 53 + 1, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 10 ** 9, 10 ** 12, 10 ** 18,
             10 ** 30, 10 ** 400, -(2 ** 63), -10 ** 18, -1, -10 ** 400]
ODD_FLOATS = [float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 5e-324, 0.5, 2.5, -0.0, 1e18]

# Words of this collection's domain, so that generated values reach past the first checks.
DOMAIN = ["all", "0", "1", "3", "7", "8", "H200", "NVIDIA H200", "A100", "NVIDIA A100-SXM4-40GB",
          "GPU-00000000-0000-0000-0000-000000000000", "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb",
          "7g.141gb", "1g.5gb", "1g.10gb", "3g.20gb", "7g.40gb", "1c.3g.71gb", "1g.18gb+me", "all-balanced",
          "all-1g", "all-3g", "all-7g", "all-disabled", "all-enabled", "all-1g.18gb", "Default", "Exclusive_Process",
          "Prohibited", "none", "mps", "time-slicing", "mig", "single", "mixed", "nvidia", "runc", "gpu-node-1",
          "0=8G", "0=8G,1=4096M", "8G", "4096M", "50", "100", "0x233510DE", "nvidia.com/gpu", "default", "ts-4",
          "mps-4", "nvdp", "5m0s", "10.0.0.11", "gpuops.example.com/x", "present", "absent", "started", "stopped"]

JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.sampled_from(HUGE_INTS),
                         st.sampled_from(ODD_FLOATS), st.sampled_from(DOMAIN + ODD_STRINGS))


def _sandboxed(text):
    """Generated text that would be an absolute or home path lands in the sandbox."""
    if text.startswith(("/", "~")):
        return SANDBOX + text
    return text


def short_text():
    return st.text(st.characters(blacklist_categories=("Cs",)), max_size=24).map(_sandboxed)


# The nvidia module's parameters (driver_module_parameters, driver_params, driver_modules' parameters): real names, a
# name one letter off, names without the prefix or with odd characters; values the kernel takes and values it does not
# (out of its int range, spaces, quotes, an options line's comment, a boolean).
NVREG_NAMES = ["NVreg_EnableStreamMemOPs", "NVreg_CoherentGPUMemoryMode", "NVreg_EnableStreamMemOps", "EnableGpuFirmware",
               "NVreg_", "NVreg_a b", "nvreg_EnableMSI", "NVreg_RmNvlinkBandwidth", "NVreg_\u0131"]
NVREG_VALUES = [1, 0, -1, 2 ** 31, -(2 ** 31) - 1, "0x12", "0666", "0x", "08", "driver", "a b", 'x"y', "a#b", "",
                True, None, 1.5, ["1"], {"a": 1}]


def strings(extra=()):
    """Strings: the domain's words, odd ones, look-alikes, huge, arbitrary (text() excludes lone surrogates)."""
    return st.one_of(st.sampled_from(list(extra) + DOMAIN), st.sampled_from(ODD_STRINGS + LOOKALIKES),
                     st.sampled_from(HUGE_STRINGS), short_text())


def deep():
    """A list or a dict nested 50 to 600 deep (Python's JSON, which carries module arguments, stops near 1000)."""
    def nest(shape):
        kind, depth = shape
        value = "x"
        for _level in range(depth):
            value = [value] if kind == "list" else {"k": value}
        return value
    return st.tuples(st.sampled_from(["list", "dict"]), st.sampled_from([50, 300, 600])).map(nest)


def json_values(max_leaves=12):
    """Arbitrary JSON-shaped values (what a YAML variable can hold)."""
    return st.recursive(JSON_SCALARS | short_text(),
                        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(short_text(), inner, max_size=4),
                        max_leaves=max_leaves)


def hostile():
    """Values beyond any option's type."""
    return st.one_of(
        st.sampled_from(ODD_STRINGS + LOOKALIKES + HUGE_STRINGS),
        st.sampled_from(HUGE_INTS), st.sampled_from(ODD_FLOATS), st.none(), st.booleans(),
        deep(),
        st.sampled_from([[], {}, [None], {"": None}, ["x"] * 10000, dict(("k%d" % i, i) for i in range(5000))]),
        json_values(),
        paths())


# ---- files ------------------------------------------------------------------------------------------------------
HUGE_FILE_BYTES = 1 << 30


def paths(extra_names=()):
    """Paths: files of the pool (in the sandbox), relative ones, and odd strings as paths."""
    names = sorted(POOL_KINDS) + ["nonexistent", "dir/../binary.bin", "dir/", "dir//x"] + list(extra_names)
    return st.one_of(
        st.sampled_from(names).map(lambda n: "%s/%s/%s" % (SANDBOX, POOL, n)),
        st.sampled_from(names).map(lambda n: "%s/%s" % (POOL, n)),              # relative: to the sandbox
        st.sampled_from(["%s/%s/a\x00b" % (SANDBOX, POOL), "%s/%s" % (SANDBOX, "a" * 5000),
                         "%s/%s/x\ny" % (SANDBOX, POOL), SANDBOX + "/",
                         SANDBOX + "/" + POOL + "/" + "d/" * 300 + "f"]),
        strings())


SPECIAL = {
    "empty": b"",
    "binary": bytes(range(256)) * 8 + b"\xff\xfe\xc3\x28",
    "not-yaml": b"version: v1\nmig-configs: [unclosed\n\t- : : :\n",
    "not-toml": b"version = 2\n[plugins\n= = =\n",
    "deep-yaml": b"[" * 100000 + b"]" * 100000,
    "deep-json": b'{"a":' * 100000 + b"1" + b"}" * 100000,
    "deep-toml": b"a = " + b"[" * 100000 + b"]" * 100000 + b"\n",
    # nine levels of nine aliases: 9**9 values once expanded, a few hundred bytes on disk
    "aliases": b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
        b"%s: &%s [%s]\n" % (chr(98 + i).encode(), chr(98 + i).encode(), b", ".join([b"*" + chr(97 + i).encode()] * 9))
        for i in range(9)),
    "text": b"just some text\n",
}


def make_special(path, kind):
    """Create at ``path`` a file of ``kind``: a key of SPECIAL (those bytes), or huge (1 GiB, sparse: costs no
    disk), huge-yaml (a valid start, then 1 GiB), dir, fifo, socket, zero (a character device like /dev/zero),
    dangling (a symlink to nothing), loop (a symlink to a symlink to it), mode000 (a file no one may read; root
    reads it anyway)."""
    if kind in SPECIAL:
        with open(path, "wb") as handle:
            handle.write(SPECIAL[kind])
    elif kind in ("huge", "huge-yaml"):
        with open(path, "wb") as handle:
            if kind == "huge-yaml":
                handle.write(b"version: v1\nmig-configs:\n  a:\n    - devices: all\n      mig-enabled: false\n# ")
            handle.truncate(HUGE_FILE_BYTES)
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # bound by its name in its own directory: a socket's path may hold at most 107 bytes, and pytest's
        # tmp_path for a long test id is longer
        sock, here = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), os.getcwd()
        try:
            os.chdir(os.path.dirname(path) or ".")
            sock.bind(os.path.basename(path))
        finally:
            os.chdir(here)
            sock.close()
    elif kind == "zero":
        try:
            os.mknod(path, stat.S_IFCHR | 0o644, os.makedev(1, 5))
        except OSError:             # not root: the real one
            os.symlink("/dev/zero", path)
    elif kind == "dangling":
        os.symlink(path + "-nonexistent-target", path)
    elif kind == "loop":
        os.symlink(path + "-2", path)
        os.symlink(path, path + "-2")
    elif kind == "mode000":
        with open(path, "wb") as handle:
            handle.write(b"version: v1\n")
        os.chmod(path, 0)
    else:
        raise ValueError("unknown special file kind %r" % kind)
    return path


POOL_KINDS = {"empty": "empty", "binary.bin": "binary", "huge.bin": "huge", "huge.yaml": "huge-yaml",
              "not-yaml.yaml": "not-yaml", "not-toml.toml": "not-toml", "deep.yaml": "deep-yaml",
              "deep.json": "deep-json", "deep.toml": "deep-toml", "aliases.yaml": "aliases", "dir": "dir", "fifo": "fifo", "socket": "socket",
              "zero": "zero", "dangling": "dangling", "loop": "loop", "mode000.yaml": "mode000", "text.txt": "text"}


def make_pool(directory, extra=None):
    """Create the pool's files in ``directory``/pool (each example gets its own: a module may replace them).
    ``extra``: {name: text} of files a harness adds (valid files, so that a run gets past the first check)."""
    pool = os.path.join(directory, POOL)
    os.makedirs(pool)
    for name, kind in POOL_KINDS.items():
        make_special(os.path.join(pool, name), kind)
    for name, text in (extra or {}).items():
        with open(os.path.join(pool, name), "wb") as handle:
            handle.write(text.encode("utf-8") if isinstance(text, str) else text)
    return pool


def resolve(value, sandbox):
    """``value`` with SANDBOX replaced by ``sandbox``, throughout lists and dicts (keys too)."""
    if isinstance(value, str):
        return value.replace(SANDBOX, sandbox)
    if isinstance(value, list):
        return [resolve(v, sandbox) for v in value]
    if isinstance(value, dict):
        return dict((resolve(k, sandbox), resolve(v, sandbox)) for k, v in value.items())
    return value


# ---- from an argument spec -------------------------------------------------------------------------------------
def typed(spec, hints=None, path=""):
    """Values of the type ``spec`` declares (one option's spec dict), with its choices and suboptions."""
    hints = hints or {}
    if path in hints:
        return hints[path]
    kind = spec.get("type", "str")
    choices = list(spec.get("choices") or [])
    if kind in ("str", "raw") and choices:
        return st.one_of(st.sampled_from(choices), strings())
    if kind == "str":
        return strings()
    if kind == "path":
        return paths()
    if kind == "bool":
        return st.one_of(st.booleans(), st.sampled_from(["yes", "no", "maybe", "1", "0", "", 2, "true\n"]))
    if kind == "int":
        return st.one_of(st.integers(-3, 40), st.sampled_from(HUGE_INTS), st.sampled_from(["5", "-5", "1.5", "ten"]))
    if kind == "float":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 40),
                         st.sampled_from(HUGE_INTS + ODD_FLOATS))
    if kind == "list":
        elements = {"type": spec.get("elements", "raw"), "choices": spec.get("choices"),
                    "options": spec.get("options")}
        return st.lists(typed(elements, hints, path + "[]"), max_size=5)
    if kind == "dict":
        if spec.get("options"):
            return suboptions(spec["options"], hints, path)
        return st.dictionaries(strings(), json_values(6), max_size=5)
    return json_values()


def suboptions(options, hints, path):
    """Dicts with the given suboptions (each present or not) and sometimes a key no suboption names."""
    keys = sorted(options)
    return st.fixed_dictionaries({}, optional=dict(
        [(k, option(options[k], hints, "%s.%s" % (path, k))) for k in keys] +
        [("unknown_key", st.just("x"))]))


# option()'s strategies, built once per process for each (spec, hints, path). The fuzzer asks for an option's strategy
# at every example it draws (tests/reliability/test_fuzz_inputs.py: mutations, role_examples); built afresh each time,
# hypothesis validated the new strategy again at each draw: about a third of the fuzzer's CPU in make test (the test
# process's own 64 of the file's 185 CPU s; docs/readings/test-time-session16.md). A strategy is a description, so the
# one built first draws the same values as a new one (the examples are unchanged).
_OPTIONS = {}


def option(spec, hints=None, path=""):
    """One option: mostly of its type (so runs get deep), else anything (built once: _OPTIONS)."""
    try:
        key = (json.dumps(spec, sort_keys=True, default=repr), tuple(sorted((hints or {}).items())), path)
        hash(key)
    except TypeError:               # a hint that cannot be a key (none of the harness's): built each time
        return _option(spec, hints, path)
    if key not in _OPTIONS:
        _OPTIONS[key] = _option(spec, hints, path)
    return _OPTIONS[key]


def _option(spec, hints=None, path=""):
    if spec.get("type") == "list" and spec.get("elements") == "dict" and spec.get("options"):
        one = suboptions(spec["options"], hints or {}, path + "[]")
        return st.one_of(st.lists(one, min_size=1, max_size=3), typed(spec, hints, path), hostile())
    return st.one_of(typed(spec, hints, path), typed(spec, hints, path), hostile())
