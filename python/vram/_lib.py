"""Loading libvram through ctypes, and turning its error codes into
exceptions. Other modules (and vram.torch, the adaptive runtime) call C
through `lib` and wrap every int-returning call in `check()`.

Look-up order: $VRAM_LIBRARY, next to this package, a build tree above the
package (build/libvram.so), then the system loader (libvram.so.0)."""
import ctypes
import ctypes.util
import json
import os

from . import errors

_HERE = os.path.dirname(os.path.abspath(__file__))
_NAMES = ("libvram.so", "libvram.so.0")


def _candidates():
    """(description, path-or-name) in the order they are tried."""
    env = os.environ.get("VRAM_LIBRARY")
    if env:
        yield "VRAM_LIBRARY", env
    for name in _NAMES:
        yield "next to the package", os.path.join(_HERE, name)
    # a source checkout: python/vram -> <root>/build/libvram.so
    if os.environ.get("VRAM_BUILD_DIR"):
        yield "build tree", os.path.join(os.environ["VRAM_BUILD_DIR"], "libvram.so")
    d = _HERE
    for _ in range(3):
        d = os.path.dirname(d)
        yield "build tree", os.path.join(d, "build", "libvram.so")
    found = ctypes.util.find_library("vram")
    for name in ((found,) if found else ()) + ("libvram.so.0",):
        yield "system loader", name


def _load():
    tried = []
    env = os.environ.get("VRAM_LIBRARY")
    for how, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            if how == "VRAM_LIBRARY":
                # an explicit choice that does not exist is an error, not a hint
                raise ImportError("vram: VRAM_LIBRARY=%s does not exist" % path)
            if path not in tried:
                tried.append(path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            if how == "VRAM_LIBRARY":
                raise ImportError("vram: cannot load VRAM_LIBRARY=%s: %s" % (path, e)) from e
            tried.append("%s (%s)" % (path, e))
    raise ImportError(
        "vram: libvram not found; tried %s%s. Build it (`make build`) or set VRAM_LIBRARY "
        "to the path of libvram.so." % ("" if env else "VRAM_LIBRARY (unset), ", ", ".join(tried)))


lib, path = _load()

_I, _S, _V, _D = ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_double
_U64, _SZ = ctypes.c_uint64, ctypes.c_size_t
_OUT = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes) of every function the package calls
_PROTOTYPES = {
    "vram_strerror": (_S, [_I]),
    "vram_err_name": (_S, [_I]),
    "vram_last_error": (_S, []),
    "vram_clear_error": (None, []),
    "vram_estimate_json": (_I, [_S, _OUT]),
    "vram_plan_json": (_I, [_S, _OUT]),
    "vram_batch_table_json": (_I, [_S, _OUT]),
    "vram_info_json": (_I, [_V, _I, _OUT]),
    "vram_json_free": (None, [_V]),
    "vram_layout_json": (_I, [_OUT]),
    "vram_ctx_open": (_I, [_OUT]),
    "vram_ctx_open_backend": (_I, [_S, _OUT]),
    "vram_ctx_close": (None, [_V]),
    "vram_ctx_device_count": (_I, [_V]),
    "vram_device_select": (_I, [_V, _U64, ctypes.POINTER(_I)]),
    "vram_pool_strategy_parse": (_I, [_S, ctypes.POINTER(_I)]),
    "vram_pool_config_from_options": (_I, [_V]),
    "vram_pool_create": (_I, [_V, _I, _V, _OUT]),
    "vram_pool_destroy": (None, [_V]),
    "vram_pool_alloc": (_I, [_V, _SZ, _V, _OUT]),
    "vram_pool_free": (_I, [_V, _V]),
    "vram_pool_trim": (_I, [_V, ctypes.POINTER(_U64)]),
    "vram_pool_set_limit": (_I, [_V, _U64]),
    "vram_pool_reset_peaks": (None, [_V]),
    "vram_pool_snapshot_json": (_V, [_V]),
    "vram_torch_pool": (_V, [_I]),
    "vram_parse_size": (_I, [_S, ctypes.POINTER(_U64)]),
    "vram_option_find": (_I, [_S]),
    "vram_option_str": (_S, [_I]),
    "vram_endpoint": (_I, [_I, ctypes.c_char_p, _SZ, ctypes.POINTER(_S)]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype, _fn.argtypes = _res, _args


def last_error():
    return lib.vram_last_error().decode("utf-8", "replace")


def check(rc, what=None):
    """Raises the exception of a negative libvram code, carrying the C name
    (VRAM_ENOMEM) and vram_last_error()'s message; returns rc otherwise."""
    if rc >= 0:
        return rc
    name = lib.vram_err_name(rc).decode()
    message = last_error() or lib.vram_strerror(rc).decode()
    if what:
        message = "%s: %s" % (what, message)
    raise errors.from_code(rc, name, message)


def take_text(ptr):
    """A malloc'd C string returned by libvram, decoded and released."""
    if not ptr:
        return None
    try:
        return ctypes.string_at(ptr).decode("utf-8")
    finally:
        lib.vram_json_free(ptr)


def call_json(fn, *args):
    """Calls fn(*args, &out) of the JSON layer; returns the decoded reply."""
    out = ctypes.c_void_p()
    lib.vram_clear_error()
    check(fn(*args, ctypes.byref(out)))
    return json.loads(take_text(out.value))


_layouts = None
checked_mirrors = set()  # the ctypes classes check_layouts() has compared


def layout_mismatches(cls, c_type):
    """How the ctypes class `cls` differs from the C struct `c_type` as this
    libvram was compiled (vram_layout_json): a list of sentences, empty when
    size, field names, offsets and field sizes all agree. A trailing "_" of
    a Python name stands for a C keyword-like name (from_ = from)."""
    global _layouts
    if _layouts is None:
        _layouts = call_json(lib.vram_layout_json)
    c = _layouts.get(c_type)
    if c is None:
        return ["libvram does not describe %s (add it to src/core/layout_json.c)" % c_type]
    problems = []
    if ctypes.sizeof(cls) != c["size"]:
        problems.append("size %d, C has %d" % (ctypes.sizeof(cls), c["size"]))
    mine = {name.rstrip("_"): getattr(cls, name) for name, *_ in cls._fields_}
    for name in sorted(set(c["fields"]) - set(mine)):
        problems.append("field %s is missing" % name)
    for name in sorted(set(mine) - set(c["fields"])):
        problems.append("field %s is not in C" % name)
    for name in sorted(set(mine) & set(c["fields"])):
        f, cf = mine[name], c["fields"][name]
        if (f.offset, f.size) != (cf["offset"], cf["size"]):
            problems.append("field %s at offset %d size %d, C has offset %d size %d" % (
                name, f.offset, f.size, cf["offset"], cf["size"]))
    return problems


def check_layouts(mirrors):
    """Compares ctypes mirrors {class: "c_type_t"} with libvram's structs;
    an ImportError naming every difference when one disagrees (a stale
    mirror would let libvram write past the Python object)."""
    for cls, c_type in mirrors.items():
        problems = layout_mismatches(cls, c_type)
        if problems:
            raise ImportError("vram: the ctypes mirror %s of %s does not match %s: %s" % (
                cls.__qualname__, c_type, path, "; ".join(problems)))
        checked_mirrors.add(cls)


def encode(obj):
    return json.dumps(obj).encode("utf-8")


def option(name):
    """Current value of an option of the C option table (VRAM_<NAME>)."""
    idx = lib.vram_option_find(name.encode())
    if idx < 0:
        raise KeyError(name)
    return lib.vram_option_str(idx).decode()
