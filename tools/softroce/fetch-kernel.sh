#!/usr/bin/env bash
# Prepares what the Soft-RoCE VM boots: a Debian 6.1 kernel (which, unlike the
# host kernel, ships rdma_rxe and friends as modules) and a tiny busybox
# initramfs whose only job is to mount the host root over 9p and chroot into it.
#
#   tools/softroce/fetch-kernel.sh [--refresh] [--quiet]
#
# Idempotent: every step is skipped when its result is already there, so the
# second `make deps` costs a few stat() calls.  `--refresh` re-picks the newest
# kernel from apt (otherwise the one already prepared is kept, so the test bed
# does not change under our feet and works offline once prepared).
#
# Layout (see README.md):
#   $CACHE/<kver>/linux-image-*.deb    the downloaded package (70 MB)
#   $CACHE/<kver>/root/                dpkg-deb -x of it, depmod'ed
#   $CACHE/<kver>/.ok                  written last: the unpack is complete
#   $CACHE/<kver>/vmlinux              uncompressed kernel, booted via PVH
#   $OUT/kernel -> $CACHE/<kver>       the kernel this checkout boots
#   $OUT/initramfs.cpio.gz             busybox + 9p/virtio modules + init
#   $OUT/initramfs.stamp               hash of the inputs of that initramfs
# CACHE defaults to /var/cache/xpress-softroce (shared by every checkout on the
# machine, survives `make clean`) when writable, else $OUT/cache.
# OUT defaults to <repo>/build/softroce.  Both can be overridden with
# XPRESS_SOFTROCE_CACHE / XPRESS_SOFTROCE_DIR; XPRESS_SOFTROCE_KVER pins a
# kernel ABI such as 6.1.0-57-amd64.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
OUT=${XPRESS_SOFTROCE_DIR:-$repo/build/softroce}
refresh=0 quiet=0
for a in "$@"; do
  case $a in
    --refresh) refresh=1 ;;
    --quiet) quiet=1 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "fetch-kernel: unknown argument $a" >&2; exit 2 ;;
  esac
done
log() { [ $quiet = 1 ] || echo "softroce: $*"; }
die() { echo "softroce: ERROR: $*" >&2; exit 1; }

if [ -n "${XPRESS_SOFTROCE_CACHE:-}" ]; then
  CACHE=$XPRESS_SOFTROCE_CACHE
elif mkdir -p /var/cache/xpress-softroce 2>/dev/null && [ -w /var/cache/xpress-softroce ]; then
  CACHE=/var/cache/xpress-softroce
else
  CACHE=$OUT/cache
fi
mkdir -p "$OUT" "$CACHE"
# Serialise concurrent runs (two checkouts, or `vm` rebuilding the initramfs
# while `make deps` runs): they share the cache.
if command -v flock >/dev/null; then
  exec 9>>"$CACHE/.lock"
  flock -w 900 9 || die "timed out waiting for another fetch-kernel.sh ($CACHE/.lock)"
fi

for tool in dpkg-deb depmod cpio gzip; do
  command -v "$tool" >/dev/null || die "$tool missing (install packages dpkg, kmod, cpio, gzip: make deps)"
done
BUSYBOX=""
for b in /bin/busybox /usr/bin/busybox; do
  # The initramfs has no libc: only the static busybox (package busybox-static) works.
  if [ -x "$b" ] && ! LC_ALL=C ldd "$b" >/dev/null 2>&1; then BUSYBOX=$b; break; fi
done
[ -n "$BUSYBOX" ] || die "no static busybox (apt-get install busybox-static)"

# --- 1. pick the kernel -------------------------------------------------------
# Candidates: linux-image-6.1.0-N-amd64 (signed) and -unsigned, newest ABI
# first.  Only packages with an apt candidate count: the index lists names of
# versions the mirror no longer carries.
candidates() {
  apt-cache pkgnames linux-image-6.1.0- 2>/dev/null |
    grep -E '^linux-image-6\.1\.0-[0-9]+-amd64(-unsigned)?$' |
    while read -r p; do
      v=$(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ {print $2}')
      [ -n "$v" ] && [ "$v" != "(none)" ] && echo "$p"
    done | sort -t- -k4,4nr -k6,6  # ABI number desc; signed before -unsigned
}
kver_of() { sed -E 's/^linux-image-(6\.1\.0-[0-9]+-amd64).*/\1/' <<<"$1"; }

current=""
if [ -L "$OUT/kernel" ] && [ -f "$OUT/kernel/.ok" ]; then current=$(cat "$OUT/kernel/.ok"); fi
pin=${XPRESS_SOFTROCE_KVER:-}

K=""
if [ -n "$current" ] && [ $refresh = 0 ] && { [ -z "$pin" ] || [ "$pin" = "$current" ]; }; then
  # Already prepared for this checkout (possibly in another cache dir): keep it.
  kver=$current
  K=$(readlink -f "$OUT/kernel")
elif [ -n "$pin" ] && [ -f "$CACHE/$pin/.ok" ]; then
  kver=$pin
else
  kver=$pin
  mapfile -t cands < <(candidates)
  if [ ${#cands[@]} = 0 ] && [ "$(id -u)" = 0 ]; then
    log "no linux-image-6.1.0-*-amd64 in the apt index; running apt-get update"
    apt-get update -qq || true
    mapfile -t cands < <(candidates)
  fi
  if [ -n "$kver" ]; then
    # Pinned ABI: only its packages.
    mapfile -t cands < <(printf '%s\n' "${cands[@]}" | grep -E "^linux-image-$kver(-unsigned)?$" || true)
  fi
  got=""
  # A cached, completely unpacked kernel of the newest ABI needs no download.
  for p in "${cands[@]}"; do
    k=$(kver_of "$p")
    if [ -f "$CACHE/$k/.ok" ]; then got=$k; break; fi
    mkdir -p "$CACHE/$k"
    if ! ls "$CACHE/$k"/linux-image-*.deb >/dev/null 2>&1; then
      log "downloading $p (about 70 MB)"
      tmp=$(mktemp -d "$CACHE/dl.XXXXXX")
      # apt-get download warns when run as root that the _apt sandbox user
      # cannot write here; letting _apt own the temp dir avoids the noise.
      chown _apt "$tmp" 2>/dev/null || true
      if (cd "$tmp" && timeout 600 apt-get download -q "$p" >/dev/null); then
        mv "$tmp"/*.deb "$CACHE/$k/"
        rm -rf "$tmp"
      else
        rm -rf "$tmp"
        log "could not download $p, trying the next candidate"
        continue
      fi
    fi
    got=$k; break
  done
  if [ -z "$got" ]; then
    # Offline fallback: the newest kernel already in the cache.
    got=$(ls -d "$CACHE"/6.1.0-*-amd64 2>/dev/null | xargs -rn1 basename | sort -t- -k4,4nr |
          while read -r k; do
            if [ -f "$CACHE/$k/.ok" ] || ls "$CACHE/$k"/linux-image-*.deb >/dev/null 2>&1; then echo "$k"; break; fi
          done)
    [ -n "$got" ] || die "no linux-image-6.1.0-*-amd64 package could be downloaded (needs a Debian bookworm apt source)"
  fi
  [ -z "$pin" ] || [ "$got" = "$pin" ] || die "pinned kernel $pin is neither in the apt index nor in $CACHE"
  kver=$got
fi

# --- 2. unpack + depmod -------------------------------------------------------
[ -n "$K" ] || K=$CACHE/$kver
if [ ! -f "$K/.ok" ]; then
  deb=$(ls "$K"/linux-image-*.deb | head -n1)
  log "unpacking $(basename "$deb")"
  rm -rf "$K/root" "$K/root.tmp"
  dpkg-deb -x "$deb" "$K/root.tmp"
  # The package carries ~400 MB of modules; the guest loads a handful, but
  # tests may want any of them (sch_netem, bonding, ...), so keep them all.
  depmod -b "$K/root.tmp" "$kver"
  [ -f "$K/root.tmp/boot/vmlinuz-$kver" ] || die "vmlinuz-$kver missing from $deb"
  mv "$K/root.tmp" "$K/root"
  echo "$kver" > "$K/.ok"
fi
if [ "$(readlink "$OUT/kernel" 2>/dev/null || true)" != "$K" ]; then
  ln -sfn "$K" "$OUT/kernel"
fi
# Old ABIs are 400 MB each; on --refresh drop the ones this checkout left.
if [ $refresh = 1 ]; then
  for d in "$CACHE"/6.1.0-*-amd64; do
    [ -d "$d" ] && [ "$d" != "$K" ] || continue
    log "removing old kernel $(basename "$d")"; rm -rf "$d"
  done
fi

# --- 3. uncompressed vmlinux ---------------------------------------------------
# qemu boots an ELF vmlinux directly through its PVH entry point (CONFIG_PVH=y
# in Debian's kernel), skipping the real-mode setup and the xz decompression
# of the bzImage: about 3 s of the boot under TCG.  `vm` falls back to the
# bzImage when this file is missing.
if [ ! -s "$K/vmlinux" ]; then
  log "extracting vmlinux for PVH boot"
  vz=$K/root/boot/vmlinuz-$kver
  off=$(LC_ALL=C grep -obUaP '\xFD7zXZ\x00' "$vz" | head -n1 | cut -d: -f1 || true)
  rm -f "$K/vmlinux.tmp"
  if [ -n "$off" ] && command -v xz >/dev/null; then
    # --single-stream: the bzImage continues after the xz stream.
    tail -c +$((off + 1)) "$vz" | xz -dc --single-stream > "$K/vmlinux.tmp" 2>/dev/null || true
  elif [ -n "$off" ] && command -v python3 >/dev/null; then
    python3 -c 'import lzma,sys; d=open(sys.argv[1],"rb").read()[int(sys.argv[2]):]; sys.stdout.buffer.write(lzma.LZMADecompressor().decompress(d))' \
      "$vz" "$off" > "$K/vmlinux.tmp" 2>/dev/null || true
  fi
  if [ "$(head -c4 "$K/vmlinux.tmp" 2>/dev/null | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
    mv "$K/vmlinux.tmp" "$K/vmlinux"
  else
    rm -f "$K/vmlinux.tmp"
    log "could not extract vmlinux (needs xz or python3); the VM boots the bzImage, ~3 s slower"
  fi
fi

# --- 4. initramfs -------------------------------------------------------------
# Only what is needed before the host root is mounted: virtio PCI, 9p, and the
# virtio console ports that carry the command's stdout/stderr to the host.
# Everything else (rdma_rxe, veth, sch_netem...) is loaded later from the host
# share with kmod's `modprobe -d`.
EARLY_MODS="virtio_pci 9pnet_virtio 9p virtio_console"
init_src=$here/initramfs-init
stamp=$( { echo "$kver"; echo "$EARLY_MODS"; sha256sum "$init_src" "$0" "$BUSYBOX" | cut -d' ' -f1; } | sha256sum | cut -c1-16)
if [ -f "$OUT/initramfs.cpio.gz" ] && [ "$(cat "$OUT/initramfs.stamp" 2>/dev/null)" = "$stamp" ]; then
  log "kernel $kver and initramfs ready in $OUT (nothing to do)"
  exit 0
fi
log "building initramfs for $kver"
M=$K/root/lib/modules/$kver
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{bin,dev,proc,sys,mnt,mods}
cp "$BUSYBOX" "$work/bin/busybox"
cp "$init_src" "$work/init"
chmod 755 "$work/init" "$work/bin/busybox"
# Dependency closure in load order: modules.dep lists a module's dependencies
# after it, deepest last, so reverse its list and load each once.
declare -A seen=()
order=()
add_mod() {
  local name=$1 line path deps d
  line=$(grep -E "(^|/)${name//_/[-_]}\.ko(\.[a-z]+)?:" "$M/modules.dep" || true)
  if [ -z "$line" ]; then
    grep -qE "(^|/)${name//_/[-_]}\.ko$" "$M/modules.builtin" || die "module $name not in $kver"
    return 0  # built into the kernel
  fi
  path=${line%%:*}
  [ -z "${seen[$path]:-}" ] || return 0
  deps=${line#*:}
  for d in $(tr ' ' '\n' <<<"$deps" | tac); do
    [ -z "${seen[$d]:-}" ] || continue
    seen[$d]=1; order+=("$d")
  done
  seen[$path]=1; order+=("$path")
}
for m in $EARLY_MODS; do add_mod "$m"; done
: > "$work/mods/order"
for p in "${order[@]}"; do
  cp "$M/$p" "$work/mods/"
  basename "$p" >> "$work/mods/order"
done
(cd "$work" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$OUT/initramfs.cpio.gz.tmp.$$"
mv "$OUT/initramfs.cpio.gz.tmp.$$" "$OUT/initramfs.cpio.gz"
echo "$stamp" > "$OUT/initramfs.stamp"
log "ready: $OUT (kernel $kver, initramfs $(du -k "$OUT/initramfs.cpio.gz" | cut -f1) KiB)"
