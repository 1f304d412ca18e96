#!/usr/bin/env bash
# etcd-raise-floor.sh --url FENCEKEEPER_URL --prefix P [--margin M | --token N]
#
# Repair after etcd was restored from a backup (etcdctl/etcdutl snapshot restore): the
# restored cluster's revision is the snapshot's, below revisions the lost cluster had
# already handed out as tokens (etcd-lock.sh's FENCING_TOKEN), so new holders would get
# tokens that old holders (zombies) have. For every lock at once:
#
#   1. reads the current revision R and the offset O in the key fence-offset (which
#      etcd-lock.sh adds to the revision);
#   2. raises fencekeeper's floor for prefix P above R + O and above every fence under
#      P, plus the margin (fencekeeper-raise-floor.sh; --margin M, default 1000000, or
#      --token N): from then on every token the lost cluster issued is refused;
#   3. raises fence-offset to that floor F (never lowers it): every later grant's token
#      is its revision + F > F. (A grant between the restore and this write keeps the
#      old offset: below F it is refused, at or above F it cannot equal a lost token,
#      which are all below F.)
#
# The margin must exceed the revisions the lost cluster made after the snapshot (writes
# of any kind count, not only locks): its revision when it was lost minus the
# snapshot's revision (`etcdutl snapshot status` shows the latter). Take it from your
# monitoring (etcd_debugging_mvcc_current_revision) or be generous: tokens are 64-bit.
#
# On etcd v3.5.10 and later there is an alternative without the offset: restore with
# `etcdutl snapshot restore --bump-revision B --mark-compacted`, B larger than that
# same difference, then raise the floor to the restored cluster's revision with
# fencekeeper-raise-floor.sh --token (docs/locks.md).
#
# Order: fencekeeper first (the floor stops the zombies), then the offset (it lets new
# holders through): stopped in between, every holder is refused until a rerun.
#
# Environment: ETCDCTL_ENDPOINTS and etcdctl's other variables; ETCD_FENCE_OFFSET_KEY
#   (default fence-offset); FENCEKEEPER_TOKEN for fencekeeper's auth.
# Needs etcdctl (v3 API), curl, python3.
# Exit status: 0 done, 2 usage, 69 when etcd or fencekeeper fail.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { echo "usage: $0 --url FENCEKEEPER_URL --prefix P [--margin M | --token N]" >&2; exit 2; }
die() { echo "$0: $*" >&2; exit 69; }
isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }

url='' prefix='' have_prefix='' pass=()
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=$2; shift 2 ;;
    --prefix) prefix=$2; have_prefix=1; shift 2 ;;
    --margin | --token) [ $# -ge 2 ] || usage; pass+=("$1" "$2"); shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$url" ] && [ -n "$have_prefix" ] || usage
export ETCDCTL_API=3
key=${ETCD_FENCE_OFFSET_KEY:-fence-offset}

# get KEY -> "revision offset" (offset 0 when the key does not exist)
read_offset() {
  local out
  out=$(etcdctl get "$key" -w json 2>&1) || die "etcdctl get $key failed: $out"
  printf '%s' "$out" | python3 -c '
import base64, json, sys
d = json.load(sys.stdin)
kvs = d.get("kvs") or []
print(d["header"]["revision"], base64.b64decode(kvs[0]["value"]).decode() if kvs else "")' ||
    die "unexpected etcdctl output: $out"
}
read -r rev off <<<"$(read_offset)"
[ -n "${off:-}" ] || off=0
isnum "$rev" && isnum "$off" || die "$key holds '$off' (revision '$rev')"
echo "etcd: revision $rev, $key $off: the next grant's token is above $((rev + off))"

floor=$("$here/fencekeeper-raise-floor.sh" --url "$url" --prefix "$prefix" --at-least $((rev + off)) \
  "${pass[@]}") || exit $?
isnum "$floor" || die "fencekeeper-raise-floor.sh printed '$floor'"

if [ "$off" -ge "$floor" ]; then
  echo "$key is already $off >= the floor $floor: done"
  exit 0
fi
out=$(etcdctl put "$key" "$floor" -w json 2>&1) || die "etcdctl put $key failed: $out" \
  "(fencekeeper's floor of '$prefix' is $floor: every holder is refused until $key is raised; rerun)"
wrev=$(printf '%s' "$out" | python3 -c 'import json, sys; print(json.load(sys.stdin)["header"]["revision"])')
isnum "$wrev" || die "unexpected etcdctl output: $out"
echo "fencekeeper floor of '$prefix': $floor; $key: $floor (was $off) from revision $wrev;" \
  "every grant from then on has a token above $floor"
