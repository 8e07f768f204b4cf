"""Exceptions of the vram package. Every libvram error code has a class;
each carries the C name (`code_name`, e.g. "VRAM_ENOMEM"), the numeric
`code` and the library's message naming the bad input."""


class Error(Exception):
    """Any error reported by libvram or by the vram package."""

    code = None
    code_name = "VRAM_EUNKNOWN"

    def __init__(self, message, code=None, code_name=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if code_name is not None:
            self.code_name = code_name

    def __str__(self):
        return "%s (%s)" % (self.message, self.code_name)


def _cls(name, code, c_name, *bases):
    """One exception class per libvram code (docstring: the C name)."""
    return type(name, (Error,) + bases, {"code": code, "code_name": "VRAM_" + c_name,
                                         "__doc__": "libvram's VRAM_%s." % c_name,
                                         "__module__": __name__})


InvalidArgumentError = _cls("InvalidArgumentError", -1, "EINVAL", ValueError)
OutOfMemoryError = _cls("OutOfMemoryError", -2, "ENOMEM", MemoryError)
NoDeviceError = _cls("NoDeviceError", -3, "ENODEV")
NotSupportedError = _cls("NotSupportedError", -4, "ENOTSUP")
LibraryNotFoundError = _cls("LibraryNotFoundError", -5, "ENOLIB")
DriverError = _cls("DriverError", -6, "EDRIVER")
TryAgainError = _cls("TryAgainError", -7, "EAGAIN")
IOError = _cls("IOError", -8, "EIO", OSError)  # noqa: A001 (vram.IOError)
ParseError = _cls("ParseError", -9, "EPARSE", ValueError)
NotFoundError = _cls("NotFoundError", -10, "ENOENT", LookupError)
PermissionError = _cls("PermissionError", -11, "EPERM")  # noqa: A001
BusyError = _cls("BusyError", -12, "EBUSY")
StateError = _cls("StateError", -13, "ESTATE")
TimeoutError = _cls("TimeoutError", -14, "ETIMEDOUT")  # noqa: A001
ConnectionError = _cls("ConnectionError", -15, "ECONN")  # noqa: A001

_BY_CODE = {c.code: c for c in (
    InvalidArgumentError, OutOfMemoryError, NoDeviceError, NotSupportedError,
    LibraryNotFoundError, DriverError, TryAgainError, IOError, ParseError, NotFoundError,
    PermissionError, BusyError, StateError, TimeoutError, ConnectionError)}


class DaemonError(Error):
    """An error answer of vramd's HTTP API: `status` (HTTP), `error` (its
    code, e.g. "invalid_value") and the message."""

    code_name = "VRAM_EDAEMON"

    def __init__(self, status, error, message):
        super().__init__(message)
        self.status, self.error = status, error

    def __str__(self):
        return "vramd: %s (HTTP %d %s)" % (self.message, self.status, self.error)


def from_code(code, name, message):
    """The exception for a libvram code."""
    return _BY_CODE.get(code, Error)(message, code, name)
