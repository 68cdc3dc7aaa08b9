#!/bin/sh
# The Debian packages `make run` and `make test` use, installed with apt-get when they are
# missing and we are root; otherwise the exact command is printed.
#
#   sh scripts/debian-packages.sh update PACKAGE...   one `apt-get update`, if any is missing
#   sh scripts/debian-packages.sh install PACKAGE...  one `apt-get install` of the missing ones
#
# The Makefile runs `update` once for all the packages a target uses, then `install` of
# python3-venv (the venv needs it) and `install` of the others while pip fills the venv:
# apt-get and dpkg against pip's network and CPU.  When the packages will not install
# together, each is tried alone, so that one the archive lacks keeps no other out.
#
#   python3-venv  `python3 -m venv` (Debian leaves venv and ensurepip out of python3)
#   graphviz      Graphviz's `dot`: export to PDF, SVG and PNG
#   trace-cmd     turns the binary trace.dat of `trace-cmd record` into the text `replay` reads
#   chromium      headless Chromium for the browser-mode test (tests/test_serve.py)
#
# Without recommends: Chromium's (system-config-printer with samba and avahi, upower,
# udev, a notification daemon; installing chromium with them added 115 packages on a
# Debian 12 machine) serve a desktop, and the headless browser-mode test passes without
# them.  Graphviz's one, fonts-liberation2, is named
# (with() below): dot lays out its SVG, PDF and PNG text in those fonts.
set -u

PYTHON=${PYTHON:-python3}

present() {
    case $1 in
    python3-venv) "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1 ;;
    graphviz) command -v dot >/dev/null 2>&1 ;;
    chromium) command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 ;;
    *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

# the package and what it recommends that we use
with() {
    case $1 in
    graphviz) echo "graphviz fonts-liberation2" ;;
    *) echo "$1" ;;
    esac
}

# what the package is for, when it is installed
purpose() {
    case $1 in
    python3-venv) echo "python3-venv (for the project's .venv)" ;;
    graphviz) echo "Graphviz (dot)" ;;
    trace-cmd) echo "trace-cmd (to replay trace.dat files)" ;;
    chromium) echo "Chromium (for the browser-mode test)" ;;
    *) echo "$1" ;;
    esac
}

# what a user without root or apt-get reads; python3-venv alone stops the set-up
absent() {
    case $1 in
    python3-venv)
        echo "python3 cannot create a virtual environment: run  sudo apt-get install python3-venv"
        exit 2 ;;
    graphviz) echo "Graphviz 'dot' is missing (PDF/SVG/PNG export needs it): run  sudo apt-get install graphviz" ;;
    trace-cmd) echo "trace-cmd is missing (replaying a binary trace.dat needs it): run  sudo apt-get install trace-cmd" ;;
    chromium) echo "Chromium is missing (the browser-mode test is skipped without it): run  sudo apt-get install chromium" ;;
    *) echo "$1 is missing: run  sudo apt-get install $1" ;;
    esac
}

# when apt-get could not install it; python3-venv and graphviz stop the set-up
failed() {
    case $1 in
    python3-venv) echo "could not install python3-venv: python3 cannot create a virtual environment"; exit 2 ;;
    graphviz) echo "could not install Graphviz: export to PDF, SVG and PNG needs its 'dot'"; exit 1 ;;
    trace-cmd) echo "could not install trace-cmd: replay reads text; run  trace-cmd report -i trace.dat > trace.txt  elsewhere" ;;
    chromium) echo "could not install Chromium: the browser-mode test will be skipped" ;;
    *) echo "could not install $1" ;;
    esac
}

apt_get() {
    DEBIAN_FRONTEND=noninteractive apt-get -qq "$@"
}

mode=${1:?usage: debian-packages.sh update|install PACKAGE...}
shift
missing=
for package in "$@"; do
    present "$package" || missing="$missing $package"
done
[ -n "$missing" ] || exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    [ "$mode" = install ] || exit 0
    for package in $missing; do absent "$package"; done
    exit 0
fi
case $mode in
update)
    # without fresh lists the install below says which package did not come
    apt_get update || true ;;
install)
    wanted=
    for package in $missing; do
        echo "installing $(purpose "$package") with apt-get"
        wanted="$wanted $(with "$package")"
    done
    # shellcheck disable=SC2086  # one word per package
    apt_get install -y --no-install-recommends $wanted >/dev/null || for package in $missing; do
        apt_get install -y --no-install-recommends $(with "$package") >/dev/null || failed "$package"
    done ;;
*)
    echo "debian-packages.sh: no mode $mode (update or install)" >&2
    exit 2 ;;
esac
