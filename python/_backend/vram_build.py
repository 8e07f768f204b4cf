"""The build backend of the vram Python package (PEP 517, PEP 660), in the
standard library only.

Why not setuptools: pip builds in an isolated environment and installs the
backend named in `requires` there from an index, so `requires =
["setuptools>=61"]` fails offline ("No matching distribution found") even
where Debian's setuptools is installed. With `requires = []` and this module
on `backend-path`, `pip install ./python` needs nothing but the sources.

The wheel carries libvram: the first of
  1. config setting `libvram=PATH` (`pip install --config-settings libvram=PATH`),
  2. $VRAM_LIBRARY,
  3. vram/libvram.so already next to the modules (a packager put it there),
  4. $VRAM_BUILD_DIR/libvram.so,
  5. ../build/libvram.so (a source checkout after `make build`),
copied as vram/libvram.so, the first place vram/_lib.py looks after
$VRAM_LIBRARY. A shared library makes the wheel platform-specific
(py3-none-<platform>). Without one the build fails and says where it looked:
a package that cannot load its library is worse than no package.

An editable install (`pip install -e ./python`) puts a .pth file naming this
directory on the path; the package then finds build/libvram.so of the tree."""
import base64
import hashlib
import io
import os
import sysconfig
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
PACKAGE = "vram"
LIBRARY = "libvram.so"


def _project():
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib
        except ImportError:
            raise RuntimeError("vram's build backend reads pyproject.toml with tomllib "
                               "(Python 3.11+) or tomli; neither is available") from None
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f).get("project")
    for key in ("name", "version"):
        if not isinstance((project or {}).get(key), str):
            raise RuntimeError("pyproject.toml: [project] needs a string \"%s\"" % key)
    return project


def _dist_name(project):
    return "%s-%s" % (project["name"].replace("-", "_"), project["version"])


def _metadata(project):
    lines = ["Metadata-Version: 2.1", "Name: %s" % project["name"],
             "Version: %s" % project["version"]]
    if project.get("description"):
        lines.append("Summary: %s" % project["description"])
    if project.get("requires-python"):
        lines.append("Requires-Python: %s" % project["requires-python"])
    lic = project.get("license")
    if isinstance(lic, dict) and lic.get("text"):
        lines.append("License: %s" % lic["text"])
    for dep in project.get("dependencies", []):
        lines.append("Requires-Dist: %s" % dep)
    for extra, deps in sorted(project.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        for dep in deps:
            lines.append('Requires-Dist: %s; extra == "%s"' % (dep, extra))
    body = ""
    if isinstance(project.get("readme"), str):
        lines.append("Description-Content-Type: text/markdown")
        with open(os.path.join(HERE, project["readme"]), encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _sources():
    """(path in the archive, path on disk) of every module of the package."""
    root = os.path.join(HERE, PACKAGE)
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__"
                         and os.path.exists(os.path.join(d, x, "__init__.py")))
        for name in sorted(files):
            if name.endswith(".py") or name == "py.typed":
                path = os.path.join(d, name)
                yield os.path.relpath(path, HERE).replace(os.sep, "/"), path


def _find_library(config_settings):
    tried = []
    candidates = [("config setting libvram", (config_settings or {}).get("libvram")),
                  ("VRAM_LIBRARY", os.environ.get("VRAM_LIBRARY")),
                  ("next to the modules", os.path.join(HERE, PACKAGE, LIBRARY))]
    if os.environ.get("VRAM_BUILD_DIR"):
        candidates.append(("VRAM_BUILD_DIR", os.path.join(os.environ["VRAM_BUILD_DIR"], LIBRARY)))
    candidates.append(("the source tree's build/",
                       os.path.join(os.path.dirname(HERE), "build", LIBRARY)))
    for how, path in candidates:
        if not path:
            continue
        if os.path.isfile(path):
            return os.path.realpath(path)
        tried.append("%s (%s)" % (path, how))
    raise RuntimeError("vram: no %s to put in the wheel; tried %s. Build it first (`make "
                       "build` in the source tree) or name it: VRAM_LIBRARY=PATH pip install "
                       "./python, or pip install --config-settings libvram=PATH ./python." % (LIBRARY, ", ".join(tried)))


class _Wheel:
    """A wheel being written: every file is hashed into RECORD."""

    def __init__(self, path, dist):
        self.zip = zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED)
        self.dist, self.record = dist, []

    def add(self, name, data, mode=0o644):
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        self.record.append("%s,sha256=%s,%d" % (name, digest.decode(), len(data)))

    def close(self, metadata, tag, purelib):
        info = "%s.dist-info" % self.dist
        self.add(info + "/METADATA", metadata.encode("utf-8"))
        self.add(info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: vram_build\n"
                                   "Root-Is-Purelib: %s\nTag: %s\n" %
                                   ("true" if purelib else "false", tag)).encode())
        self.record.append(info + "/RECORD,,")
        self.zip.writestr(zipfile.ZipInfo(info + "/RECORD", date_time=(1980, 1, 1, 0, 0, 0)),
                          "\n".join(self.record) + "\n")
        self.zip.close()


def _platform_tag():
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    library = _find_library(config_settings)
    dist = _dist_name(project)
    tag = "py3-none-" + _platform_tag()
    name = "%s-%s.whl" % (dist, tag)
    wheel = _Wheel(os.path.join(wheel_directory, name), dist)
    for arcname, path in _sources():
        with open(path, "rb") as f:
            wheel.add(arcname, f.read())
    with open(library, "rb") as f:
        wheel.add("%s/%s" % (PACKAGE, LIBRARY), f.read(), 0o755)
    wheel.close(_metadata(project), tag, purelib=False)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    dist = _dist_name(project)
    tag = "py3-none-any"
    name = "%s-%s.whl" % (dist, tag)
    wheel = _Wheel(os.path.join(wheel_directory, name), dist)
    wheel.add("_%s_editable.pth" % PACKAGE, (HERE + "\n").encode())
    wheel.close(_metadata(project), tag, purelib=True)
    return name


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    dist = _dist_name(project)
    name = dist + ".tar.gz"
    files = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
             ("_backend/vram_build.py", os.path.abspath(__file__))]
    if isinstance(project.get("readme"), str):
        files.append((project["readme"], os.path.join(HERE, project["readme"])))
    files += list(_sources())
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for arcname, path in files:
            tar.add(path, arcname="%s/%s" % (dist, arcname), recursive=False)
        data = _metadata(project).encode("utf-8")
        info = tarfile.TarInfo("%s/PKG-INFO" % dist)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
