#!/usr/bin/env bash
# Builds build/xpress_<version>_<arch>.deb from an installed tree: `make
# install` into a staging root with Debian's paths, then dpkg-deb.  No
# debhelper: the tree is small and its contents are checked by lintian in
# `make test-install`.
# usage: build.sh VERSION BUILD_DIR
set -euo pipefail
version=$1 build=$2
cd "$(dirname "$0")/../.."
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
root=$build/deb/root
rm -rf "$build/deb"
mkdir -p "$root/DEBIAN"
make --no-print-directory install DESTDIR="$root" PREFIX=/usr LIBDIR="/usr/lib/$multiarch" >/dev/null
# Debian wants installed objects stripped of debug information, and
# compressed manual pages.
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$root/usr/lib/$multiarch/libxpress.so.$version" "$root/usr/bin/xpress-stat" \
  "$root/usr/bin/xpress-probe"
gzip -9n "$root"/usr/share/man/man*/*
doc=$root/usr/share/doc/xpress
install -d "$doc"
install -m 0644 packaging/deb/copyright "$doc/copyright"
sed "s/@VERSION@/$version/" packaging/deb/changelog | gzip -9n > "$doc/changelog.gz"
# The library is preloaded, never linked against: it is not a public
# library package (no symbols file, no -dev package).
cat > "$root/DEBIAN/triggers" <<T
activate-noawait ldconfig
T
echo "libxpress ${version%%.*} xpress (>= $version)" > "$root/DEBIAN/shlibs"
# It is loaded by name (LD_PRELOAD=libxpress.so), so the unversioned link
# belongs with it, and one package holds the library and its tools.
install -d "$root/usr/share/lintian/overrides"
cat > "$root/usr/share/lintian/overrides/xpress" <<O
# A preload library: loaded as LD_PRELOAD=libxpress.so, never linked against.
xpress: link-to-shared-library-in-wrong-package *
xpress: package-name-doesnt-match-sonames libxpress0
# Lazy binding on purpose: every preloaded process would otherwise bind all
# of the library's imports at exec (Makefile, LIB_LDFLAGS).
xpress: hardening-no-bindnow [usr/lib/*/libxpress.so.*]
O
# Dependencies from the binaries' own needs (dpkg-shlibdeps wants a source
# tree's debian/control: a minimal one in a scratch directory).  rdma-core
# and libsodium are dlopen'd, which dpkg-shlibdeps cannot see: named below
# (libunwind, for backtraces only, is a Recommends of the control file).
work=$build/deb/shlibdeps
mkdir -p "$work/debian"
printf 'Source: xpress\n\nPackage: xpress\nArchitecture: any\n' > "$work/debian/control"
deps=$(cd "$work" && dpkg-shlibdeps -O -e"$(readlink -f "../root/usr/lib/$multiarch/libxpress.so.$version")" \
  -e"$(readlink -f ../root/usr/bin/xpress-stat)" -e"$(readlink -f ../root/usr/bin/xpress-probe)" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$deps" ] || { echo "deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
# The dlopen'd libraries, each once: xpress-probe links rdma-core itself,
# so dpkg-shlibdeps may have named them already (with a version).
for p in libibverbs1 librdmacm1 ibverbs-providers libsodium23; do
  grep -qE "(^|, )$p( |,|$)" <<<"$deps" || deps="$deps, $p"
done
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@DEPENDS@/$deps/" -e "s/@SIZE@/$size/" \
  packaging/deb/control > "$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z | xargs -0 md5sum) > "$root/DEBIAN/md5sums"
# Every file root-owned in the package, whoever builds it.
out=$build/xpress_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
echo "deb: $out"
