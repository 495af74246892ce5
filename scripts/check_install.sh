#!/usr/bin/env bash
# Installs a built kiln tree in the layouts users get and builds README's example
# (examples/quickstart.c) against each through pkg-config, linked statically and shared, as
# README says; each must print 128.0. Layouts: a private prefix with a multiarch libdir, moved
# after installing (kiln.pc must follow it); /usr (Debian gives it lib/<multiarch>); /usr/local
# (lib). Each layout is also found by find_package(kiln) from a small CMake project (kiln::kiln
# and kiln::static). /usr and /usr/local are staged with DESTDIR: the .pc and the tree are those a user
# gets, but the machine's own /usr, which other builds may see, is never written.
# Usage: check_install.sh BUILD-DIR WORK-DIR. BUILD-DIR is re-configured for each layout (only
# where it installs changes, nothing is rebuilt) and left configured for /usr/local, the default.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1 work=$(realpath -m "$2")
multiarch=$(cc -print-multiarch 2>/dev/null || true)

fail() { echo "FAIL $*"; exit 1; }

install_layout() { # prefix destdir cmake-args...
    local prefix=$1 destdir=$2
    shift 2
    cmake -S . -B "$build" -U CMAKE_INSTALL_LIBDIR -DCMAKE_INSTALL_PREFIX="$prefix" "$@" >/dev/null
    DESTDIR=$destdir cmake --install "$build" >/dev/null
}

check_layout() { # name installed-prefix: pkg-config gives this install's dirs; quickstart works
    local name=$1 root=$2 pc inc lib
    pc=$(find "$root" -name kiln.pc)
    [ -f "$pc" ] || fail "$name: no single kiln.pc under $root"
    export PKG_CONFIG_LIBDIR=${pc%/kiln.pc} # this install only, not the machine's
    inc=$(pkg-config --cflags-only-I kiln | sed 's/^ *-I//; s/ *$//')
    lib=$(pkg-config --variable=libdir kiln)
    [ -f "$inc/kiln.h" ] && [ -f "$inc/kiln/core.h" ] || fail "$name: pkg-config --cflags gives -I$inc, without kiln.h"
    [ "$(realpath "$inc")" = "$root/include" ] || fail "$name: includedir $inc is not $root/include"
    [ "$(realpath "$lib")" = "$(realpath "$PKG_CONFIG_LIBDIR/..")" ] || fail "$name: libdir $lib does not hold kiln.pc"

    local exe=$work/quickstart-$name
    cc -std=c11 -Wall -Werror examples/quickstart.c -o "$exe-static" $(pkg-config --cflags kiln) \
        $(pkg-config --libs --static kiln | sed 's/-lkiln\b/-l:libkiln.a/')
    ! readelf -d "$exe-static" | grep -q 'NEEDED.*libkiln' || fail "$name: the static build needs libkiln.so"
    cc -std=c11 -Wall -Werror examples/quickstart.c -o "$exe-shared" $(pkg-config --cflags --libs kiln) \
        -Wl,-rpath,"$(pkg-config --variable=libdir kiln)"
    local found
    found=$(ldd "$exe-shared" | awk '/libkiln/ { print $3 }')
    [ -n "$found" ] && [ "$(realpath "$found")" = "$(realpath "$lib/libkiln.so.0")" ] ||
        fail "$name: the shared build loads libkiln from '$found', not from $lib"
    for kind in static shared; do
        out=$("$exe-$kind") || fail "$name: quickstart ($kind) failed: $out"
        [ "$out" = "128.0" ] || fail "$name: quickstart ($kind) printed '$out', not 128.0"
    done
    echo "ok   $name: pkg-config gives $(realpath "$inc") and $(realpath "$lib"); quickstart static and shared print 128.0"
}

check_cmake() { # name installed-prefix: find_package(kiln) from a CMake project; kiln::kiln
    # (shared), kiln::static and the "static" component each build quickstart, which prints 128.0
    local name=$1 root=$2
    local project=$work/cmake-$name
    mkdir -p "$project"
    cp examples/quickstart.c "$project/"
    cat >"$project/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(kiln_consumer C)
find_package(kiln 0.1 REQUIRED)
add_executable(quickstart_default quickstart.c)
target_link_libraries(quickstart_default PRIVATE kiln::kiln)
add_executable(quickstart_static quickstart.c)
target_link_libraries(quickstart_static PRIVATE kiln::static)
find_package(kiln 0.1 REQUIRED COMPONENTS static)
CMAKE
    cmake -S "$project" -B "$project/build" -DCMAKE_PREFIX_PATH="$root" -Dkiln_DIR= >"$project/log" 2>&1 ||
        fail "$name: find_package(kiln) failed: $(tail -5 "$project/log")"
    cmake --build "$project/build" >>"$project/log" 2>&1 || fail "$name: the CMake project did not build: $(tail -5 "$project/log")"
    local dir
    dir=$(grep '^kiln_DIR:' "$project/build/CMakeCache.txt" | cut -d= -f2)
    [ "$(realpath "$dir")" = "$(realpath "$(dirname "$(find "$root" -name kilnConfig.cmake)")")" ] ||
        fail "$name: find_package found kiln in $dir, not in $root"
    ! readelf -d "$project/build/quickstart_static" | grep -q 'NEEDED.*libkiln' || fail "$name: kiln::static needs libkiln.so"
    readelf -d "$project/build/quickstart_default" | grep -q 'NEEDED.*libkiln' || fail "$name: kiln::kiln is not the shared library"
    for exe in quickstart_default quickstart_static; do
        out=$("$project/build/$exe") || fail "$name: $exe failed: $out"
        [ "$out" = "128.0" ] || fail "$name: $exe printed '$out', not 128.0"
    done
    echo "ok   $name: find_package(kiln) from $(realpath "$dir"); kiln::kiln (shared) and kiln::static print 128.0"
}

rm -rf "$work"
mkdir -p "$work"
install_layout "$work/prefix-before-move" "" -DCMAKE_INSTALL_LIBDIR="lib/${multiarch:-x86_64-linux-gnu}"
mv "$work/prefix-before-move" "$work/prefix"
check_layout private "$work/prefix"
check_cmake private "$work/prefix"
install_layout /usr "$work/stage-usr"
check_layout usr "$work/stage-usr/usr"
check_cmake usr "$work/stage-usr/usr"
install_layout /usr/local "$work/stage-usr-local"
check_layout usr-local "$work/stage-usr-local/usr/local"
check_cmake usr-local "$work/stage-usr-local/usr/local"
