#!/usr/bin/env bash
# etcd-lock.sh NAME -- CMD [ARGS...]
#
# Takes the etcd lock NAME with `etcdctl lock` (waits until it is free), runs CMD while
# holding it, and releases it when CMD exits. CMD sees:
#
#   FENCING_TOKEN   $ETCD_LOCK_REV: the etcd revision of the response that granted
#                   the lock (for a waiter: the revision at which the previous holder's
#                   key was deleted). Revisions never go back and each holder gets the
#                   lock after the previous one let go, so every later holder of NAME
#                   gets a higher number: a fencing token, for free.
#                   Plus the offset in the key fence-offset as of that same revision
#                   (0 when the key does not exist): etcd-raise-floor.sh sets it after a
#                   restore from backup reissued revisions. Read at the grant's revision,
#                   the offset is a function of the grant alone, so tokens still grow
#                   with every holder, and a holder paused between the grant and the
#                   read gets the same token as if it had not paused (or, if the
#                   revision was compacted meanwhile, no token at all: exit 69).
#   FENCING_LOCK    NAME
#   ETCD_LOCK_KEY, ETCD_LOCK_REV   as set by etcdctl
#
# Environment:
#   ETCDCTL_ENDPOINTS   e.g. 127.0.0.1:2379 (etcdctl's own variables all apply)
#   ETCD_LOCK_TTL       session TTL in seconds (default 10; etcd's minimum is about 2).
#                       When etcdctl cannot renew the lease for this long (process
#                       frozen, network cut) the lock is released and the next waiter
#                       gets it, while CMD may still be running: fencekeeper is what
#                       stops CMD's late writes.
#   ETCD_FENCE_OFFSET_KEY  the offset key (default fence-offset)
#
# Needs etcdctl v3.4+ (ETCD_LOCK_REV is set for the exec form `lock NAME -- CMD`).
set -u
usage() { echo "usage: $0 NAME -- CMD [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
name=$1
[ "$2" = "--" ] || usage
shift 2
ttl=${ETCD_LOCK_TTL:-10}
export ETCDCTL_API=3 FENCING_LOCK=$name ETCD_FENCE_OFFSET_KEY=${ETCD_FENCE_OFFSET_KEY:-fence-offset}
exec etcdctl lock --ttl="$ttl" "$name" -- sh -c '
  off=$(etcdctl get --rev="$ETCD_LOCK_REV" --print-value-only "$ETCD_FENCE_OFFSET_KEY") || {
    echo "etcd-lock.sh: cannot read $ETCD_FENCE_OFFSET_KEY at revision $ETCD_LOCK_REV" >&2; exit 69; }
  case $off in
    "") off=0 ;;
    *[!0-9]*) echo "etcd-lock.sh: $ETCD_FENCE_OFFSET_KEY holds \"$off\", not a number" >&2; exit 69 ;;
  esac
  FENCING_TOKEN=$((ETCD_LOCK_REV + off)); export FENCING_TOKEN; exec "$@"' etcd-lock "$@"
