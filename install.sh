#!/usr/bin/env bash
# Install ttsd as a supervised systemd service on Debian/Ubuntu, or remove it again.
# SPDX-License-Identifier: GPL-3.0-or-later
#
#   sudo ./install.sh                 install (or upgrade) and start
#   sudo ./install.sh --uninstall     remove; keeps /etc/ttsd/config.yaml unless --purge
#   ./install.sh --root DIR           install into DIR (packaging, tests): no useradd, apt
#                                     or systemctl; prints what it would have run instead
#
# Safe to run again: files are only replaced when they differ, an existing config is kept.
# See docs/service.md.

set -Eeuo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Paths on the target system (the tree under --root mirrors them).
PREFIX=/opt/ttsd
VENV=$PREFIX/venv
DOCDIR=$PREFIX/doc
ETCDIR=/etc/ttsd
CONFIG=$ETCDIR/config.yaml
EXAMPLE=$ETCDIR/config.example.yaml
UNITDIR=/etc/systemd/system
CACHEDIR=/var/cache/ttsd
RUNDIR=/run/ttsd
BINDIR=/usr/local/bin
SOCKET=/run/ttsd/ttsd.sock
USER_NAME=ttsd
APT_PACKAGES=(libportaudio2)

ROOT=""
ACTION=install
CPU_ONLY=0
NO_START=0
NO_VENV=0
PURGE=0
PYTHON=${PYTHON:-python3}

usage() {
    cat <<EOF
Usage: $0 [options]

  --cpu-only       do not install the GPU extra (TensorRT) even when nvidia-smi works
  --no-start       install everything but do not enable or start the service
  --python PY      interpreter for the venv (Python >= 3.11; default: python3)
  --uninstall      stop and remove ttsd; /etc/ttsd/config.yaml is kept
  --purge          with --uninstall: also remove /etc/ttsd and the ttsd user and group
  --root DIR       install into the tree DIR instead of this system: no useradd, apt-get
                   or systemctl (printed instead); ownership is left to the packager
  --no-venv        with --root: skip building the venv (tests of the file layout)
  -h, --help       this text
EOF
}

say() { printf '==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }

# die MESSAGE WHAT-TO-DO
die() {
    printf '\nerror: %s\n' "$1" >&2
    printf '  what to do: %s\n' "$2" >&2
    exit 1
}

on_error() {
    printf '\nerror: install.sh stopped at line %s: %s\n' "$1" "$2" >&2
    printf '  what to do: fix the cause reported above and run install.sh again (it is safe to re-run).\n' >&2
}
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR

# Run a command on the real system; under --root only show it.
system() {
    if [[ -n $ROOT ]]; then
        local arg line="    would run:"
        for arg in "$@"; do
            if [[ $arg =~ ^[-A-Za-z0-9_./:=@+,]+$ ]]; then
                line+=" $arg"
            else
                line+=" '${arg//\'/\'\\\'\'}'"
            fi
        done
        printf '%s\n' "$line"
    else
        "$@"
    fi
}

parse_args() {
    while (($#)); do
        case $1 in
            --cpu-only) CPU_ONLY=1 ;;
            --no-start) NO_START=1 ;;
            --no-venv) NO_VENV=1 ;;
            --uninstall) ACTION=uninstall ;;
            --purge) PURGE=1 ;;
            --python)
                (($# >= 2)) || die "--python needs an interpreter" "pass e.g. --python python3.11"
                PYTHON=$2
                shift
                ;;
            --python=*) PYTHON=${1#*=} ;;
            --root)
                (($# >= 2)) || die "--root needs a directory" "pass e.g. --root /tmp/ttsd-root"
                ROOT=$2
                shift
                ;;
            --root=*) ROOT=${1#*=} ;;
            -h | --help)
                usage
                exit 0
                ;;
            *)
                usage >&2
                die "unknown option: $1" "see the options above"
                ;;
        esac
        shift
    done
    if [[ -n $ROOT ]]; then
        ROOT=$(realpath -m -- "$ROOT")
        [[ $ROOT != / ]] || die "--root / would be this system" "leave out --root to install here"
    fi
    if ((NO_VENV)) && [[ -z $ROOT ]]; then
        die "--no-venv only works with --root" "leave out --no-venv: the service needs the venv"
    fi
    if ((PURGE)) && [[ $ACTION != uninstall ]]; then
        die "--purge only works with --uninstall" "run: $0 --uninstall --purge"
    fi
}

check_system() {
    if [[ -n $ROOT ]]; then
        return
    fi
    ((EUID == 0)) || die "install.sh must run as root" "run: sudo $0 $*"
    local id="" id_like=""
    if [[ -r /etc/os-release ]]; then
        # shellcheck source=/dev/null
        id=$(. /etc/os-release && echo "${ID:-}")
        # shellcheck source=/dev/null
        id_like=$(. /etc/os-release && echo "${ID_LIKE:-}")
    fi
    case " $id $id_like " in
        *" debian "* | *" ubuntu "*) ;;
        *) die "this installer supports Debian and Ubuntu (found: ${id:-unknown})" \
            "install by hand as docs/service.md describes, or use --root DIR to build a tree" ;;
    esac
    if [[ $ACTION == install ]]; then
        command -v systemctl >/dev/null \
            || die "systemctl not found" "install systemd (apt-get install systemd), then re-run"
    fi
}

check_python() {
    command -v "$PYTHON" >/dev/null \
        || die "Python interpreter '$PYTHON' not found" \
            "install Python 3.11 or newer (apt-get install python3) or pass --python PATH"
    "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "$("$PYTHON" -V 2>&1) is too old; ttsd needs Python 3.11 or newer" \
            "install python3.11 (and python3.11-venv), then re-run with --python python3.11"
}

# Copy only when the content or mode differs, so a re-run changes nothing.
put_file() {
    local mode=$1 src=$2 dst=$3
    if [[ -f $dst ]] && cmp -s "$src" "$dst"; then
        chmod "$mode" "$dst"
        return 0
    fi
    install -D -m "$mode" "$src" "$dst"
    note "installed $dst"
}

put_link() {
    local target=$1 link=$2
    if [[ -L $link && $(readlink "$link") == "$target" ]]; then
        return
    fi
    mkdir -p "$(dirname "$link")"
    ln -sfn "$target" "$link"
    note "linked $link -> $target"
}

install_apt_packages() {
    local missing=() pkg venv_pkg
    if [[ -n $ROOT ]]; then
        say "apt packages (when missing): ${APT_PACKAGES[*]}"
        system apt-get install -y --no-install-recommends "${APT_PACKAGES[@]}"
        return
    fi
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed \
            || missing+=("$pkg")
    done
    # Debian ships venv's pip bootstrap separately (python3.X-venv).
    if ((!NO_VENV)) && ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
        venv_pkg=$("$PYTHON" -c 'import sys; print(f"python3.{sys.version_info[1]}-venv")')
        missing+=("$venv_pkg")
    fi
    ((${#missing[@]})) || return 0
    say "Installing apt packages: ${missing[*]}"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; then
        note "retrying after apt-get update"
        { DEBIAN_FRONTEND=noninteractive apt-get update \
            && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } \
            || die "apt-get could not install ${missing[*]}" \
                "check the network and /etc/apt/sources.list, run 'apt-get install ${missing[*]}' by hand, then re-run"
    fi
}

create_user() {
    say "User and group $USER_NAME"
    if [[ -n $ROOT ]]; then
        system groupadd --system "$USER_NAME"
        system useradd --system --gid "$USER_NAME" --home-dir /nonexistent --no-create-home \
            --shell /usr/sbin/nologin --comment "ttsd text-to-speech daemon" "$USER_NAME"
        return
    fi
    if ! getent group "$USER_NAME" >/dev/null; then
        groupadd --system "$USER_NAME" \
            || die "could not create group $USER_NAME" "create it by hand (groupadd --system $USER_NAME), then re-run"
    fi
    if ! getent passwd "$USER_NAME" >/dev/null; then
        useradd --system --gid "$USER_NAME" --home-dir /nonexistent --no-create-home \
            --shell /usr/sbin/nologin --comment "ttsd text-to-speech daemon" "$USER_NAME" \
            || die "could not create user $USER_NAME" "create it by hand (useradd --system --gid $USER_NAME $USER_NAME), then re-run"
    fi
}

gpu_present() {
    command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1
}

build_venv() {
    local venv=$ROOT$VENV spec=$SRC
    if ((NO_VENV)); then
        say "Skipping the venv ($VENV) as asked (--no-venv)"
        return
    fi
    if ((CPU_ONLY)); then
        note "--cpu-only: installing without the gpu extra"
    elif gpu_present; then
        spec="${SRC}[gpu]"
        note "nvidia-smi works: installing with the gpu extra (TensorRT)"
    else
        note "no working nvidia-smi: installing for the CPU"
    fi
    say "Python environment $VENV"
    if ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
        "$PYTHON" -m venv "$venv" \
            || die "could not create the venv at $venv" \
                "install the venv module (apt-get install python3-venv), then re-run"
    fi
    "$venv/bin/python" -m pip install --disable-pip-version-check --quiet "$spec" \
        || die "pip could not install $spec" \
            "check network access to PyPI (or your pip.conf) in the messages above; on a GPU box re-run with --cpu-only to skip TensorRT"
    if [[ -n $ROOT ]]; then
        # A venv is not relocatable: its scripts name the interpreter by absolute path.
        # Point them at the final location, not at the staging tree.
        grep -rlF -- "$venv" "$venv/bin" | while read -r f; do
            sed -i "s|$venv|$VENV|g" "$f"
        done || true
    fi
}

install_files() {
    local config_new=0
    say "Files"
    mkdir -p "$ROOT$PREFIX" "$ROOT$ETCDIR" "$ROOT$UNITDIR"
    install -d -m 0750 "$ROOT$CACHEDIR"
    system chown "$USER_NAME:$USER_NAME" "$CACHEDIR"
    put_link "$VENV/bin/ttsd" "$ROOT$BINDIR/ttsd"
    put_link "$VENV/bin/ttsctl" "$ROOT$BINDIR/ttsctl"
    put_file 0644 "$SRC/docs/service.md" "$ROOT$DOCDIR/service.md"
    put_file 0644 "$SRC/systemd/config.example.yaml" "$ROOT$EXAMPLE"
    if [[ -e $ROOT$CONFIG ]]; then
        note "keeping the existing $CONFIG (the current example is $EXAMPLE)"
    else
        install -m 0640 "$SRC/systemd/config.example.yaml" "$ROOT$CONFIG"
        note "installed $ROOT$CONFIG"
        config_new=1
    fi
    # The daemon reads the config as group ttsd; only root may change it.
    system chown "root:$USER_NAME" "$CONFIG"
    put_file 0644 "$SRC/systemd/ttsd.service" "$ROOT$UNITDIR/ttsd.service"
    put_file 0644 "$SRC/systemd/ttsd.socket" "$ROOT$UNITDIR/ttsd.socket"
    if ((!config_new)) && [[ -z $ROOT ]] && [[ -x $VENV/bin/ttsd ]]; then
        "$VENV/bin/ttsd" check-config "$CONFIG" \
            || die "the existing $CONFIG is not valid (see above)" \
                "fix it (every key is documented in $EXAMPLE), check with 'ttsd check-config $CONFIG', then re-run"
    fi
}

prepare_models() {
    say "Preparing voices as $USER_NAME (model split; TensorRT engines on a GPU box)"
    if [[ -n $ROOT ]]; then
        system runuser -u "$USER_NAME" -- "$VENV/bin/ttsd" prepare --config "$CONFIG"
        return
    fi
    (cd / && runuser -u "$USER_NAME" -- "$VENV/bin/ttsd" prepare --config "$CONFIG") \
        || die "'ttsd prepare' failed (see above)" \
            "fix the cause, then re-run install.sh, or run 'sudo -u $USER_NAME $VENV/bin/ttsd prepare --config $CONFIG' by hand"
}

systemd_running() {
    [[ -d /run/systemd/system ]]
}

start_service() {
    say "systemd units"
    if [[ -n $ROOT ]]; then
        system systemctl daemon-reload
        ((NO_START)) || system systemctl enable --now ttsd.socket ttsd.service
        return
    fi
    if ! systemd_running; then
        warn "systemd is not running here (a container?): the units are installed but not started"
        note "start the daemon by hand: sudo -u $USER_NAME $VENV/bin/ttsd serve --config $CONFIG"
        return
    fi
    systemctl daemon-reload
    if ((NO_START)); then
        note "--no-start: start it later with: systemctl enable --now ttsd.socket ttsd.service"
        return
    fi
    # An upgrade (new package or units) takes effect only after a restart.
    if systemctl is-active --quiet ttsd.service; then
        note "restarting the running service to pick up this version"
        systemctl restart ttsd.service \
            || die "ttsd did not restart" "see 'journalctl -u ttsd -b', fix the cause, then 'systemctl restart ttsd'"
    fi
    systemctl enable --now ttsd.socket ttsd.service \
        || die "ttsd did not start" \
            "see 'journalctl -u ttsd -b' and 'ttsd check-config $CONFIG', fix the cause, then 'systemctl restart ttsd'"
    systemctl --no-pager --lines=5 status ttsd.service || true
}

print_next_steps() {
    echo
    if [[ -n $ROOT ]]; then
        say "Installed into $ROOT"
        return
    fi
    say "ttsd is installed"
    cat <<EOF
    config:   $CONFIG  (check it: ttsd check-config; every key: $EXAMPLE)
    socket:   $SOCKET  (group $USER_NAME)
    logs:     journalctl -u ttsd -f
    Try it:   sudo ttsctl say "Hello from ttsd"
    As yourself, join the group first (then log in again):
              sudo usermod -aG $USER_NAME ${SUDO_USER:-\$USER}
              ttsctl say "Hello from ttsd"
EOF
}

# speech-dispatcher output module (sd_ttsd): screen readers such as Orca speak through
# ttsd.  Only when speech-dispatcher is installed; the module conf is never overwritten.
# Usage: speechd_module install|uninstall.  See docs/speechd.md.
speechd_module() {
    local action=$1 dir="" candidate
    local conf=/etc/speech-dispatcher/modules/ttsd.conf
    for candidate in /usr/lib/speech-dispatcher-modules \
        /usr/lib/x86_64-linux-gnu/speech-dispatcher-modules \
        /usr/lib/aarch64-linux-gnu/speech-dispatcher-modules; do
        if [[ -d $ROOT$candidate ]]; then
            dir=$candidate
            break
        fi
    done
    if [[ $action == uninstall ]]; then
        for candidate in /usr/lib/speech-dispatcher-modules \
            /usr/lib/x86_64-linux-gnu/speech-dispatcher-modules \
            /usr/lib/aarch64-linux-gnu/speech-dispatcher-modules; do
            if [[ -L $ROOT$candidate/sd_ttsd && $(readlink "$ROOT$candidate/sd_ttsd") == "$VENV/bin/sd_ttsd" ]]; then
                remove_path "$ROOT$candidate/sd_ttsd"
            fi
        done
        if ((PURGE)); then
            remove_path "$ROOT$conf"
        fi
        return 0
    fi
    if [[ -z $dir ]]; then
        note "speech-dispatcher is not installed: no sd_ttsd module (see docs/speechd.md)"
        return 0
    fi
    say "speech-dispatcher module sd_ttsd"
    put_link "$VENV/bin/sd_ttsd" "$ROOT$dir/sd_ttsd"
    if [[ -e $ROOT$conf ]]; then
        note "keeping the existing $conf"
    else
        install -D -m 0644 "$SRC/speechd/ttsd.conf" "$ROOT$conf"
        note "installed $ROOT$conf"
    fi
    note "speech-dispatcher finds the module by itself; to make it the default, add to"
    note "/etc/speech-dispatcher/speechd.conf: DefaultModule ttsd (and run spd-conf or"
    note "restart speech-dispatcher); users reach the daemon as members of group $USER_NAME"
}

do_install() {
    check_system "$@"
    ((NO_VENV)) || check_python
    install_apt_packages
    create_user
    build_venv
    install_files
    speechd_module install
    prepare_models
    start_service
    print_next_steps
}

remove_path() {
    local path=$1
    if [[ -e $path || -L $path ]]; then
        rm -rf -- "$path"
        note "removed $path"
    fi
}

do_uninstall() {
    check_system "$@"
    say "Stopping ttsd (its ExecStopPost= reverts the tuning)"
    if [[ -n $ROOT ]]; then
        system systemctl disable --now ttsd.service ttsd.socket
    elif systemd_running && [[ -e $UNITDIR/ttsd.service || -e $UNITDIR/ttsd.socket ]]; then
        systemctl disable --now ttsd.service ttsd.socket \
            || die "could not stop ttsd" "see 'systemctl status ttsd', stop it by hand, then re-run"
    fi
    say "Removing files"
    remove_path "$ROOT$UNITDIR/ttsd.service"
    remove_path "$ROOT$UNITDIR/ttsd.socket"
    system systemctl daemon-reload
    local name
    for name in ttsd ttsctl; do
        # Only our own links: never a ttsd someone else put there.
        if [[ -L $ROOT$BINDIR/$name && $(readlink "$ROOT$BINDIR/$name") == "$VENV/bin/$name" ]]; then
            remove_path "$ROOT$BINDIR/$name"
        fi
    done
    speechd_module uninstall
    remove_path "$ROOT$PREFIX"
    remove_path "$ROOT$CACHEDIR"
    remove_path "$ROOT$RUNDIR"
    remove_path "$ROOT$EXAMPLE"
    if ((PURGE)); then
        remove_path "$ROOT$ETCDIR"
        if [[ -n $ROOT ]]; then
            system userdel "$USER_NAME"
            system groupdel "$USER_NAME"
        else
            if getent passwd "$USER_NAME" >/dev/null; then
                userdel "$USER_NAME" || die "could not remove user $USER_NAME" "remove it by hand: userdel $USER_NAME"
            fi
            if getent group "$USER_NAME" >/dev/null; then
                groupdel "$USER_NAME" || die "could not remove group $USER_NAME" "remove it by hand: groupdel $USER_NAME"
            fi
        fi
    else
        if [[ -e $ROOT$CONFIG ]]; then
            note "kept $CONFIG (remove it too with: $0 --uninstall --purge)"
        fi
        rmdir "$ROOT$ETCDIR" 2>/dev/null || true
    fi
    say "ttsd is uninstalled"
}

main() {
    parse_args "$@"
    if [[ $ACTION == uninstall ]]; then
        do_uninstall "$@"
    else
        do_install "$@"
    fi
}

main "$@"
