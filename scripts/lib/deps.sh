# Sourced by the scripts: installs missing Debian packages (as root) or says exactly how to.
# usage: need_packages PKG...
need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "micro: missing Debian packages; run as root:" >&2
        echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
        exit 2
    fi
    echo "installing: ${missing[*]}" >&2
    # A fresh machine has no package lists: update before installing.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

BUILD_PACKAGES=(meson ninja-build pkg-config gcc libc6-dev libopenblas-dev libstb-dev libpcre2-dev)

# Configures (once) and builds a build directory: build_micro DIR [meson options...]
build_micro() {
    local dir=$1
    shift
    if [ ! -f "$dir/build.ninja" ]; then
        meson setup "$dir" "$@" >&2
    fi
    ninja -C "$dir" >&2
}
