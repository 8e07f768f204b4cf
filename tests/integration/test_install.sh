#!/usr/bin/env bash
# `make install` as a packager and as an administrator use it: installs the
# build into a temporary DESTDIR (prefix /usr) and into a temporary prefix,
# then uses what was installed: a C program built through
# `pkg-config --cflags --libs vram` (shared and static), both man pages,
# the systemd unit (systemd-analyze verify), the bash completion, the
# version commands, the Python package (with /usr/bin/python3), and
# `make uninstall`'s manifest.
set -euo pipefail
B=${VRAM_BUILD_DIR:?} S=${VRAM_SOURCE_DIR:?}
T=$(mktemp -d)
manifest=$B/install_manifest.txt
# The test's installs must not replace the manifest of a real `make install`.
[ -e "$manifest" ] && cp "$manifest" "$T/manifest.saved"
restore() {
    rm -f "$manifest"
    if [ -e "$T/manifest.saved" ]; then cp "$T/manifest.saved" "$manifest"; fi
    rm -rf "$T"
}
trap restore EXIT
passed=0
fail() { echo "FAIL: $*" >&2; echo "$passed passed, 1 failed"; exit 1; }
ok() { passed=$((passed + 1)); echo "ok: $*"; }

# --- 1. DESTDIR install with the prefix /usr (what a distribution package does)
D=$T/root
DESTDIR=$D cmake --install "$B" --prefix /usr >"$T/install.log" || fail "install: $(cat "$T/install.log")"
pc=$(find "$D" -name vram.pc)
[ -n "$pc" ] || fail "no vram.pc under $D"
libdir=$(sed -n 's/^libdir=//p' "$pc")
expected="/usr/bin/vram /usr/bin/vramd $libdir/libvram.so $libdir/libvram.a /usr/include/vram.h
  /usr/share/man/man1/vram.1 /usr/share/man/man8/vramd.8 /usr/lib/systemd/system/vramd.service
  /usr/lib/sysusers.d/vram.conf /usr/lib/tmpfiles.d/vram.conf
  /usr/share/bash-completion/completions/vram /etc/vram/vramd.conf
  /usr/lib/python3/dist-packages/vram/__init__.py /usr/lib/python3/dist-packages/vram/_lib.py"
[ -e "$B/contrib/slurm/spank_vram.so" ] && expected+=" $libdir/slurm/spank_vram.so"
for f in $expected; do [ -e "$D$f" ] || fail "not installed: $f"; done
ok "DESTDIR install: every file in place ($(grep -c "" "$manifest") in the manifest)"

grep -qx 'prefix=/usr' "$pc" || fail "vram.pc does not name the prefix /usr: $(cat "$pc")"
grep -q '^ExecStart=/usr/bin/vramd --foreground .*--token-file /etc/vram/token' \
    "$D/usr/lib/systemd/system/vramd.service" || fail "the unit's ExecStart does not name /usr/bin/vramd and its token file"
grep -q 'VRAM_TOKEN=\|--token [^f]' "$D/usr/lib/systemd/system/vramd.service" &&
    fail "the unit puts a token on a command line or in the environment"
ok "vram.pc and vramd.service name the install prefix"

# SONAME and version of the shared library.
soname=$(readelf -d "$D$libdir/libvram.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
version=$(sed -n 's/^Version: //p' "$pc")
[ "$soname" = "libvram.so.${version%%.*}" ] || fail "SONAME is \"$soname\", expected libvram.so.${version%%.*}"
[ -e "$D$libdir/libvram.so.$version" ] || fail "no libvram.so.$version"
ok "libvram.so has SONAME $soname and the file libvram.so.$version"

# A program that uses the installed header and library (with sim GPUs).
cat >"$T/hello.c" <<'EOF'
#include <stdio.h>
#include <string.h>
#include <vram.h>
int main(void)
{
    if (strcmp(vram_version(), VRAM_VERSION_STRING) || vram_api_version() < VRAM_API_VERSION) {
        printf("header %s/%d but library %s/%d\n", VRAM_VERSION_STRING, VRAM_API_VERSION,
               vram_version(), vram_api_version());
        return 1;
    }
    vram_ctx_t *ctx;
    if (vram_ctx_open(&ctx) != 0) {
        printf("open: %s\n", vram_last_error());
        return 1;
    }
    vram_device_info_t info;
    uint64_t total = 0;
    for (int i = 0; i < vram_ctx_device_count(ctx); i++)
        if (vram_device_info(ctx, i, &info) == 0) total += info.total_bytes;
    char size[32];
    printf("libvram %s: %d %s devices, %s\n", vram_version(), vram_ctx_device_count(ctx),
           vram_ctx_backend(ctx), vram_format_size(total, size, sizeof size));
    vram_ctx_close(ctx);
    return 0;
}
EOF
export VRAM_SIM=2xH100-80GB VRAM_SIM_STATE=$T/sim.state
flags=$(PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_PATH=$D$libdir/pkgconfig pkg-config --cflags --libs vram) ||
    fail "pkg-config --cflags --libs vram failed"
case $flags in *"-I$D/usr/include"*"-L$D$libdir"*"-lvram"*) ;; *) fail "pkg-config gave \"$flags\"" ;; esac
cc -Wall -Werror -o "$T/hello" "$T/hello.c" $flags || fail "cannot build against the installed vram ($flags)"
out=$(LD_LIBRARY_PATH=$D$libdir "$T/hello") || fail "the program failed: $out"
[ "$out" = "libvram $version: 2 sim devices, 160.00 GiB" ] || fail "the program printed \"$out\""
linked=$(LD_LIBRARY_PATH=$D$libdir ldd "$T/hello")
grep -q "libvram.so.${version%%.*} => $D$libdir/" <<<"$linked" || fail "not linked to the installed libvram.so: $linked"
ok "a C program built with \`pkg-config --cflags --libs vram\` runs against the installed libvram.so: $out"

static=$(PKG_CONFIG_SYSROOT_DIR=$D PKG_CONFIG_PATH=$D$libdir/pkgconfig pkg-config --static --libs vram)
cc -o "$T/hello-static" "$T/hello.c" -I"$D/usr/include" "$D$libdir/libvram.a" \
    $(echo " $static" | sed 's/ -lvram / /; s/ -L[^ ]*//g') || fail "cannot link libvram.a with pkg-config --static ($static)"
linked=$(ldd "$T/hello-static")
! grep -q libvram <<<"$linked" || fail "the static program still wants libvram.so: $linked"
out=$("$T/hello-static") || fail "the static program failed: $out"
ok "the same program linked with libvram.a and \`pkg-config --static\`: $out"

# The installed Python package, with Debian's interpreter, finds the installed
# libvram.so by its SONAME (nothing of the build tree: VRAM_LIBRARY and
# VRAM_BUILD_DIR unset, run from an empty directory). The import writes
# bytecode, which uninstall must remove too.
pydir=$D/usr/lib/python3/dist-packages
[ -e "$pydir/vram/__init__.py" ] && [ -e "$pydir/vram/torch/__init__.py" ] ||
    fail "the Python package is not in $pydir"
[ -z "$(find "$pydir/vram" -name '*.pyc')" ] || fail "bytecode of the source tree was installed"
mkdir "$T/empty"
out=$(cd "$T/empty" && env -u VRAM_LIBRARY -u VRAM_BUILD_DIR -u PYTHONDONTWRITEBYTECODE PYTHONPATH="$pydir" LD_LIBRARY_PATH="$D$libdir" \
      /usr/bin/python3 -c '
import sys, vram
devs = vram.devices()
maps = open("/proc/self/maps").read()
print(vram.__file__, vram.library_path, len(devs), devs[0].name)
assert sys.argv[1] + "/libvram.so" in maps, "not the installed libvram"
' "$D$libdir" 2>&1) || fail "python3 -c 'import vram; vram.devices()' with the installed package: $out"
[ "$out" = "$pydir/vram/__init__.py libvram.so.${version%%.*} 2 H100-80GB" ] ||
    fail "the installed package printed \"$out\""
[ -n "$(find "$pydir/vram" -name '*.pyc')" ] || fail "the import wrote no bytecode (the uninstall check below needs it)"
ok "the installed Python package loads the installed libvram ($out)"

# --- 2. man pages: render without warnings and list every command / option
for page in man1/vram.1 man8/vramd.8; do
    f=$D/usr/share/man/$page
    warnings=$(MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null) || fail "man -l $page failed: $warnings"
    [ -z "$warnings" ] || fail "man -l $page warns: $warnings"
    MANWIDTH=80 man -l "$f" 2>/dev/null >"$T/page.txt"
    grep -q '^NAME' "$T/page.txt" && grep -q '^SEE ALSO' "$T/page.txt" || fail "$page has no NAME or SEE ALSO"
done
man_vram=$(MANWIDTH=200 man -l "$D/usr/share/man/man1/vram.1" 2>/dev/null)
for cmd in $("$D/usr/bin/vram" --help | awk '/^commands:/ {on=1; next} /^$/ {on=0} on {print $1}'); do
    grep -qE "^ {7}$cmd\$" <<<"$man_vram" || fail "vram(1) does not list the command $cmd"
done
man_vramd=$(MANWIDTH=200 man -l "$D/usr/share/man/man8/vramd.8" 2>/dev/null)
for var in $("$D/usr/bin/vramd" --help | grep -oE '^  VRAM_[A-Z0-9_]+'); do
    grep -q -- "$var" <<<"$man_vramd" || fail "vramd(8) does not document $var"
done
ok "man -l renders vram(1) and vramd(8) without warnings, with every command and option"

# --- 3. versions, from the installed programs
v=$("$D/usr/bin/vram" --version)
[[ $v =~ ^vram\ $version\ \(.+\)$ ]] || fail "vram --version printed \"$v\""
v=$("$D/usr/bin/vramd" --version)
[[ $v =~ ^vramd\ $version\ \(.+\)$ ]] || fail "vramd --version printed \"$v\""
VRAM_SOCKET=$T/none.sock "$D/usr/bin/vram" version --json >"$T/version.json"
python3 - "$T/version.json" "$version" "$S" "$T/none.sock" <<'EOF' || fail "vram version --json: $(cat "$T/version.json")"
import json, subprocess, sys
v = json.load(open(sys.argv[1]))
assert v["vram"] == v["library"] == sys.argv[2], v
assert v["api_version"] >= 1 and v["http_api"] == "v1", v
assert sys.argv[4] in v["daemon"]["error"], v  # names the socket it tried
# The build id names a commit of this repository (the build may be older
# than the last commit, so it need not be HEAD): `git describe` gives
# TAG-N-gHASH, or HASH alone without tags; "-dirty" for local changes.
build = v["git_describe"].removesuffix("-dirty")
commit = build.rsplit("-g", 1)[-1]
try:
    known = subprocess.run(["git", "-C", sys.argv[3], "rev-parse", "--verify", "-q", commit + "^{commit}"],
                           capture_output=True).returncode == 0
    in_git = subprocess.run(["git", "-C", sys.argv[3], "rev-parse"], capture_output=True).returncode == 0
except OSError:
    known, in_git = False, False
assert known if in_git else build == "unknown", (v, commit)
EOF
ok "vram --version, vramd --version and vram version --json ($(tr -d '\n ' <"$T/version.json" | head -c 160))"

# A running daemon's version shows up in `vram version` (vramd returns once it listens).
sock=$T/vramd.sock
VRAM_SOCKET=$sock VRAM_DB=$T/vramd.db "$D/usr/bin/vramd" --listen "" 2>"$T/vramd.log" ||
    fail "vramd did not start: $(cat "$T/vramd.log")"
daemon_pid=$(curl -s --unix-socket "$sock" http://localhost/v1/health |
             python3 -c 'import json, sys; print(json.load(sys.stdin)["pid"])')
trap 'kill "$daemon_pid" 2>/dev/null || true; restore' EXIT
shown=$(VRAM_SOCKET=$sock "$D/usr/bin/vram" version --json |
        python3 -c 'import json, sys; d = json.load(sys.stdin)["daemon"]; print(d["version"], d["socket"])') ||
    fail "vram version does not show the running vramd"
[ "$shown" = "$version $sock" ] || fail "vram version shows the daemon as \"$shown\""
kill "$daemon_pid"
ok "vram version shows the running vramd $shown"

# --- 4. the systemd unit
verify_unit() { # prints systemd-analyze's complaints; empty when the unit is accepted
    (cd "$T" && MANPATH=$2 systemd-analyze verify "$1" 2>&1) || echo "(exit status $?)"
}
P=$T/prefix # a real prefix, so that the unit's programs exist on this machine
cmake --install "$B" --prefix "$P" >"$T/install2.log" || fail "install --prefix $P: $(cat "$T/install2.log")"
if ! command -v systemd-analyze >/dev/null; then
    echo "SKIP: systemd-analyze is not installed (make deps installs systemd); the unit is not verified"
else
    printf '[Unit]\nDescription=probe\n[Service]\nExecStart=/bin/true\n' >"$T/probe.service"
    probe=$(verify_unit "$T/probe.service" "$P/share/man")
    if [ -n "$probe" ]; then
        echo "SKIP: systemd-analyze cannot run here ($probe); vramd.service is not verified"
    else
        complaints=$(verify_unit "$P/lib/systemd/system/vramd.service" "$P/share/man")
        [ -z "$complaints" ] || fail "systemd-analyze verify vramd.service: $complaints"
        grep -q "^ExecStart=$P/bin/vramd " "$P/lib/systemd/system/vramd.service" ||
            fail "the unit installed with --prefix $P does not run $P/bin/vramd"
        ok "systemd-analyze verify accepts vramd.service (ExecStart $P/bin/vramd, man pages found)"
    fi
fi
grep -qx 'g vram -' "$P/lib/sysusers.d/vram.conf" || fail "sysusers.d does not create the group vram"
grep -qE '^d /run/vram +0750 root vram' "$P/lib/tmpfiles.d/vram.conf" || fail "tmpfiles.d does not create /run/vram"
ok "sysusers.d creates group vram, tmpfiles.d /run/vram 0750 root:vram"

# The program built against prefix P through PKG_CONFIG_PATH alone (no sysroot).
plibdir=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --variable=libdir vram)
[ "${plibdir#"$P"}" != "$plibdir" ] || fail "vram.pc installed with --prefix $P says libdir=$plibdir"
cc -o "$T/hello2" "$T/hello.c" $(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags --libs vram)
LD_LIBRARY_PATH=$plibdir "$T/hello2" >/dev/null || fail "the program built against $P does not run"
ok "--prefix $P: vram.pc points into the prefix"

# --- 5. bash completion, as bash itself runs it
if [ -r /usr/share/bash-completion/bash_completion ]; then
    complete_words() { # LINE -> the completions bash offers at its end
        PATH=$P/bin:$PATH bash -c '
            source /usr/share/bash-completion/bash_completion
            source "$1"
            COMP_LINE=$2; COMP_POINT=${#COMP_LINE}
            read -ra COMP_WORDS <<<"$COMP_LINE"
            [[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
            COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
            _vram vram "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf "%s\n" "${COMPREPLY[@]}"' _ "$P/share/bash-completion/completions/vram" "$1"
    }
    words=$(complete_words "vram ")
    for cmd in run jobs estimate version; do grep -qx "$cmd" <<<"$words" || fail "completion of 'vram ' lacks $cmd: $words"; done
    grep -qx -- "--mem" <<<"$(complete_words "vram run --m")" || fail "completion of 'vram run --m' lacks --mem"
    grep -qx gpt2 <<<"$(complete_words "vram estimate --model gp")" || fail "completion of --model lacks gpt2"
    ok "bash completion offers commands, flags and model names"
else
    fail "bash-completion is not installed (make deps installs it)"
fi

# --- 6. uninstall removes what the manifest lists, keeps the admin's config
DESTDIR=$D cmake --install "$B" --prefix /usr >/dev/null # the manifest now describes install 1 again
DESTDIR=$D cmake --build "$B" --target uninstall >"$T/uninstall.log" || fail "uninstall: $(cat "$T/uninstall.log")"
left=$(cd "$D" && find . -type f -o -type l | sort)
[ "$left" = "./etc/vram/vramd.conf" ] || fail "after uninstall, left: $left"
[ ! -e "$D/usr/lib/python3/dist-packages/vram" ] || fail "uninstall left the Python package's directory"
[ ! -e "$manifest" ] || fail "uninstall kept the manifest"
ok "make uninstall removes every installed file but the configuration file"

echo "$passed passed, 0 failed"
