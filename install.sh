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
# Where `ttsd tune` may keep its state (originals to restore): root-only, apart from the
# service's own RuntimeDirectory.  The configured tuning.state_file is checked too.
TUNING_DIR=/run/ttsd-tuning
TUNING_STATE_DEFAULTS=(/run/ttsd/tuning.json "$TUNING_DIR/tuning.json")
# A copy of the interpreter, when the one given lives where the service cannot see it.
PYTHON_HOME=$PREFIX/python
BINDIR=/usr/local/bin
SOCKET=/run/ttsd/ttsd.sock
USER_NAME=ttsd
APT_PACKAGES=(libportaudio2 libsonic0)  # the speaker; the time-stretch past 2x speed

ROOT=""
ACTION=install
CPU_ONLY=0
NO_START=0
NO_VENV=0
PURGE=0
# An interpreter named by --python or $PYTHON is kept (copied if need be); the default may be
# swapped for a system one the service can see.
PYTHON_EXPLICIT=0
[[ -z ${PYTHON:-} ]] || PYTHON_EXPLICIT=1
PYTHON=${PYTHON:-python3}
COPY_PYTHON=0

# The unit's ProtectHome=yes makes these empty for the service and PrivateTmp=yes gives it
# its own /tmp and /var/tmp: an interpreter, its standard library or a library it loads
# under them cannot start there (pyenv, conda, uv and asdf all install under ~).
HIDDEN_DIRS=(/root /home /run/user /tmp /var/tmp)
# System interpreters the service always sees, preferred first (the project's Python first).
SYSTEM_PYTHONS=(/usr/bin/python3.11 /usr/bin/python3 /usr/local/bin/python3.11)

usage() {
    cat <<EOF
Usage: $0 [options]

  --cpu-only       do not install the GPU extra (TensorRT) even when nvidia-smi works
  --no-start       install everything but do not enable or start the service
  --python PY      interpreter for the venv (Python >= 3.11; default: python3, or a system
                   python3.11 when python3 lives under /root or /home); one the service
                   cannot see is copied to $PYTHON_HOME
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
                PYTHON_EXPLICIT=1
                shift
                ;;
            --python=*)
                PYTHON=${1#*=}
                PYTHON_EXPLICIT=1
                ;;
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

# True when PATH is one of HIDDEN_DIRS or lies below one.
is_hidden() {
    local d p=$1
    # Under --root, a path in the tree stands for the same path on the target system.
    if [[ -n $ROOT && ($p == "$ROOT" || $p == "$ROOT"/*) ]]; then
        p=/${p#"$ROOT"}
    fi
    for d in "${HIDDEN_DIRS[@]}"; do
        [[ $p == "$d" || $p == "$d"/* ]] && return 0
    done
    return 1
}

# Print the first path interpreter PY needs at run time that the service cannot see (its
# real executable, its base prefix with the standard library, the shared libraries it
# loads); false when there is none.  A venv's python resolves to the interpreter it was
# made from.
hidden_need() {
    local py=$1 exe paths path
    exe=$("$py" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null) || return 1
    paths=$(
        printf '%s\n' "$exe"
        "$py" -c 'import os, sys; print(os.path.realpath(sys.base_prefix))'
        # pyenv builds --enable-shared with an absolute RUNPATH to libpython under ~.
        ldd "$exe" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | xargs -r realpath -e
    ) || true
    while read -r path; do
        if [[ -n $path ]] && is_hidden "$path"; then
            printf '%s\n' "$path"
            return 0
        fi
    done <<<"$paths"
    return 1
}

# Make PYTHON an interpreter the sandboxed service can run.  The default (python3 on PATH)
# under ~ gives way to a system Python >= 3.11; an interpreter asked for by name, or when
# there is no system one, is copied to PYTHON_HOME (COPY_PYTHON=1, done by copy_python).
choose_python() {
    local hidden candidate
    hidden=$(hidden_need "$PYTHON") || return 0
    note "$PYTHON needs $hidden, which the service cannot see (ProtectHome=yes, PrivateTmp=yes)"
    if ((!PYTHON_EXPLICIT)); then
        for candidate in "${SYSTEM_PYTHONS[@]}"; do
            [[ -x $candidate ]] || continue
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null || continue
            hidden_need "$candidate" >/dev/null && continue
            PYTHON=$candidate
            note "using the system interpreter $PYTHON instead"
            return 0
        done
    fi
    COPY_PYTHON=1
    note "its interpreter will be copied to $PYTHON_HOME"
}

# Copy PYTHON's installation (without its site-packages: the venv has its own) to
# PYTHON_HOME and use the copy.  Not `python -m venv --copies`: that copies the executable
# alone, and the standard library and libpython would still be read from under ~.
copy_python() {
    local src ver dst=$ROOT$PYTHON_HOME exe hidden
    ((COPY_PYTHON)) || return 0
    src=$("$PYTHON" -c 'import os, sys; print(os.path.realpath(sys.base_prefix))')
    ver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    say "Python interpreter $PYTHON_HOME (a copy of $src)"
    rm -rf -- "$dst"
    mkdir -p "$dst"
    tar -C "$src" --exclude="./lib/python$ver/site-packages/*" --exclude="./lib/python$ver/test" \
        -cf - . | tar -C "$dst" -xf - \
        || die "could not copy $src to $dst" "free some space or install python3.11 from apt, then re-run"
    exe=$dst/bin/python$ver
    # A shared build names libpython by absolute path (RUNPATH): point it at the copy.
    if readelf -d "$exe" 2>/dev/null | grep -qE '\((RUN)?PATH\)'; then
        command -v patchelf >/dev/null \
            || die "patchelf is needed to relocate the copy of $src" "apt-get install patchelf, then re-run"
        # shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not the shell
        patchelf --set-rpath '$ORIGIN/../lib' "$exe"
    fi
    if hidden=$(hidden_need "$exe"); then
        die "the copy of the interpreter at $dst still needs $hidden" \
            "install python3.11 and python3.11-venv with apt, then re-run with --python /usr/bin/python3.11"
    fi
    PYTHON=$exe
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
        ((!COPY_PYTHON)) || command -v patchelf >/dev/null \
            || die "patchelf is needed to copy the interpreter" "apt-get install patchelf, then re-run"
        return
    fi
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null | grep -qx installed \
            || missing+=("$pkg")
    done
    ((!COPY_PYTHON)) || command -v patchelf >/dev/null || missing+=(patchelf)
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
    copy_python
    say "Python environment $VENV"
    # A venv made by an older install.sh from an interpreter the service cannot see is
    # made again, and so is one that is not from the copy this run made.
    if [[ -e $venv ]] && { ! "$venv/bin/python" -c 'import sys' 2>/dev/null \
        || hidden_need "$venv/bin/python" >/dev/null \
        || { ((COPY_PYTHON)) && [[ $(readlink -f "$venv/bin/python") != "$ROOT$PYTHON_HOME"/* ]]; }; }; then
        note "making the venv again from $PYTHON"
        rm -rf -- "$venv"
    fi
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
        # pyvenv.cfg and bin/python name the interpreter: a copy in the tree moves too.
        sed -i "s|$ROOT$PYTHON_HOME|$PYTHON_HOME|g" "$venv/pyvenv.cfg"
        local link target
        for link in "$venv"/bin/*; do
            [[ -L $link ]] || continue
            target=$(readlink "$link")
            [[ $target == "$ROOT"/* ]] && ln -sfn "${target#"$ROOT"}" "$link"
        done
    fi
}

# The properties of the installed unit that decide whether its ExecStart= can run at all,
# as systemd-run options.
unit_sandbox() {
    local key value
    while IFS='=' read -r key value; do
        case $key in
            User | Group | SupplementaryGroups | ProtectHome | PrivateTmp | ProtectSystem \
                | NoNewPrivileges | ProtectProc | PrivateMounts | SystemCallFilter \
                | SystemCallArchitectures | SystemCallErrorNumber | LockPersonality)
                printf -- '-p\n%s=%s\n' "$key" "$value"
                ;;
        esac
    done <"$ROOT$UNITDIR/ttsd.service"
}

# Prove that the service can start the installed ttsd: run `ttsd --version` under the
# unit's own sandbox with systemd-run; without systemd (a container), as the service user
# with the hidden directories mounted over, where the kernel lets us; and in any case check
# that no path the interpreter needs is hidden.
check_service_python() {
    local hidden ttsd=$VENV/bin/ttsd opts=()
    ((!NO_VENV)) || return 0
    say "Checking that the service can start $ttsd"
    local what="install python3.11 and python3.11-venv with apt and re-run (install.sh then uses /usr/bin/python3.11), or pass --python PATH outside /root, /home and /tmp"
    if [[ -n $ROOT ]]; then
        # Packaging: the target system is elsewhere; check what the venv will name there.
        hidden=$(sed -n 's/^home *= *//p' "$ROOT$VENV/pyvenv.cfg")
        if is_hidden "$hidden" || [[ $hidden == "$ROOT"/* ]]; then
            die "the venv's interpreter is $hidden, which the service cannot see" "$what"
        fi
        return 0
    fi
    if hidden=$(hidden_need "$VENV/bin/python"); then
        die "$VENV/bin/python needs $hidden, hidden from the service by ProtectHome=yes or PrivateTmp=yes" "$what"
    fi
    if systemd_running; then
        mapfile -t opts < <(unit_sandbox)
        systemd-run --wait --pipe --quiet --collect "${opts[@]}" -- "$ttsd" --version \
            || die "$ttsd does not start under the unit's sandbox (see above)" "$what"
        return 0
    fi
    if unshare --mount --propagation private true 2>/dev/null; then
        # shellcheck disable=SC2016  # expanded by the inner bash
        unshare --mount --propagation private bash -c '
            ttsd=$1 user=$2
            shift 2
            for d in "$@"; do
                if [[ -d $d ]]; then mount -t tmpfs -o ro,mode=0755 ttsd-hidden "$d" || exit 1; fi
            done
            exec runuser -u "$user" -- "$ttsd" --version' \
            bash "$ttsd" "$USER_NAME" "${HIDDEN_DIRS[@]}" \
            || die "$ttsd does not start as $USER_NAME with /root, /home and /tmp hidden (see above)" "$what"
    else
        (cd / && runuser -u "$USER_NAME" -- "$ttsd" --version) \
            || die "$ttsd does not start as $USER_NAME (see above)" "$what"
    fi
}

install_files() {
    local config_new=0
    say "Files"
    mkdir -p "$ROOT$PREFIX" "$ROOT$ETCDIR" "$ROOT$UNITDIR"
    install -d -m 0750 "$ROOT$CACHEDIR"
    # -R: a cache filled by hand as root (sudo ttsd prepare) must be readable by the service;
    # systemd's CacheDirectory= does the same at start, but prepare below runs before that.
    system chown -R "$USER_NAME:$USER_NAME" "$CACHEDIR"
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

# Where speech-dispatcher finds output modules: /usr/lib/speech-dispatcher-modules, the
# multiarch /usr/lib/TRIPLET/speech-dispatcher-modules of any architecture, or /usr/libexec
# (Fedora).  A fixed list of three directories missed every other triplet (a Raspberry Pi's
# arm-linux-gnueabihf, i386, riscv64 ...), and install.sh said speech-dispatcher was not
# installed when it was.
speechd_module_dirs() {
    local d
    for d in "$ROOT"/usr/lib/speech-dispatcher-modules "$ROOT"/usr/lib/*/speech-dispatcher-modules \
        "$ROOT"/usr/libexec/speech-dispatcher-modules; do
        if [[ -d $d ]]; then
            printf '%s\n' "${d#"$ROOT"}"
        fi
    done
}

# speech-dispatcher output module (sd_ttsd): screen readers such as Orca speak through
# ttsd.  Only when speech-dispatcher is installed; the module conf is never overwritten.
# Usage: speechd_module install|uninstall.  See docs/speechd.md.
speechd_module() {
    local action=$1 dir="" candidate dirs=()
    local conf=/etc/speech-dispatcher/modules/ttsd.conf
    mapfile -t dirs < <(speechd_module_dirs)
    if [[ $action == uninstall ]]; then
        for candidate in "${dirs[@]}"; do
            if [[ -L $ROOT$candidate/sd_ttsd && $(readlink "$ROOT$candidate/sd_ttsd") == "$VENV/bin/sd_ttsd" ]]; then
                remove_path "$ROOT$candidate/sd_ttsd"
            fi
        done
        if ((PURGE)); then
            remove_path "$ROOT$conf"
        fi
        return 0
    fi
    dir=${dirs[0]:-}
    if [[ -z $dir ]]; then
        if [[ -x $ROOT/usr/bin/speech-dispatcher ]]; then
            note "speech-dispatcher is installed, but its modules directory is not in" \
                "/usr/lib, /usr/lib/*/ or /usr/libexec: no sd_ttsd module (see docs/speechd.md)"
        else
            note "speech-dispatcher is not installed: no sd_ttsd module (see docs/speechd.md)"
        fi
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
    note "/etc/speech-dispatcher/speechd.conf: DefaultModule ttsd (and restart"
    note "speech-dispatcher); users reach the daemon as members of group $USER_NAME"
}

do_install() {
    check_system "$@"
    if ((!NO_VENV)); then
        check_python
        choose_python
    fi
    install_apt_packages
    create_user
    build_venv
    check_service_python
    install_files
    speechd_module install
    prepare_models
    start_service
    print_next_steps
}

# Undo the tuning while the venv that can is still there.  The service's ExecStopPost= did
# it already when systemd stopped a running service; this covers a service that was not
# running or a revert that failed then.  `tune revert` keeps in its state file what it could
# not restore, and uninstall keeps that file (see keep_or_remove_rundir).
revert_tuning() {
    local args=(tune revert)
    [[ ! -e $ROOT$CONFIG ]] || args+=(--config "$CONFIG")
    if [[ -n $ROOT ]]; then
        system "$VENV/bin/ttsd" "${args[@]}"
        return
    fi
    [[ -x $VENV/bin/ttsd ]] || return 0
    say "Reverting the tuning"
    "$VENV/bin/ttsd" "${args[@]}" \
        || warn "'ttsd ${args[*]}' could not restore everything (see above); its state file is kept"
}

# The tuning state files that may exist: the configured one and the known defaults.
tuning_state_files() {
    local configured=""
    if [[ -e $ROOT$CONFIG && -x $ROOT$VENV/bin/python ]]; then
        configured=$("$ROOT$VENV/bin/python" -c '
import sys
from appliance.ops.config import load_config
print(load_config(sys.argv[1]).tuning.state_file)' "$ROOT$CONFIG" 2>/dev/null) || configured=""
    fi
    printf '%s\n' ${configured:+"$configured"} "${TUNING_STATE_DEFAULTS[@]}"
}

# Remove a runtime directory unless it holds a tuning state file: that file has the
# originals revert could not put back, the only record of them until the next boot.
keep_or_remove_rundir() {
    local dir=$1 file
    while read -r file; do
        if [[ ($file == "$dir"/* || $file == "$dir") && -e $ROOT$file ]]; then
            warn "kept $dir: it holds the tuning state $file with the original settings 'ttsd tune revert' could not restore; a reboot restores them (the settings and /run are not kept across boots)"
            return 0
        fi
    done < <(tuning_state_files)
    remove_path "$ROOT$dir"
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
    revert_tuning
    say "Removing files"
    keep_or_remove_rundir "$RUNDIR"
    keep_or_remove_rundir "$TUNING_DIR"
    remove_path "$ROOT$UNITDIR/ttsd.service"
    remove_path "$ROOT$UNITDIR/ttsd.socket"
    if [[ -n $ROOT ]] || systemd_running; then
        system systemctl daemon-reload
    fi
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

# Sourced (tests of the functions above), it only defines them.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    main "$@"
fi
