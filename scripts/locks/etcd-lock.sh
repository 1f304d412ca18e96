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
# Lock metrics (docs/locks.md): one JSON line on standard error for each of
#   lock_contended        the lock was held when asked for: etcd granted it later than
#                         it created this holder's key (ETCD_LOCK_REV > its CreateRevision)
#   lock_lost             at release this holder's key was gone: the session's lease
#                         expired while CMD ran (CMD outlived ETCD_LOCK_TTL)
#   lock_release_failed   deleting the key failed (etcd unreachable or an error)
# The release is that delete of ETCD_LOCK_KEY (unique to this holder's session, so it
# never frees another holder's lock), made here so its answer can be seen; etcdctl's own
# release after it then finds nothing to do.
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
# Passed to the command below, and removed from CMD's environment there.
export ETCD_LOCK_SH_EVENTS
ETCD_LOCK_SH_EVENTS="$ttl:$(date +%s%3N):$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lock-events.sh"
exec etcdctl lock --ttl="$ttl" "$name" -- bash -c '
  ttl=${ETCD_LOCK_SH_EVENTS%%:*} rest=${ETCD_LOCK_SH_EVENTS#*:}; unset ETCD_LOCK_SH_EVENTS
  started=${rest%%:*}
  . "${rest#*:}"
  off=$(etcdctl get --rev="$ETCD_LOCK_REV" --print-value-only "$ETCD_FENCE_OFFSET_KEY") || {
    echo "etcd-lock.sh: cannot read $ETCD_FENCE_OFFSET_KEY at revision $ETCD_LOCK_REV" >&2; exit 69; }
  case $off in
    "") off=0 ;;
    *[!0-9]*) echo "etcd-lock.sh: $ETCD_FENCE_OFFSET_KEY holds \"$off\", not a number" >&2; exit 69 ;;
  esac
  FENCING_TOKEN=$((ETCD_LOCK_REV + off)); export FENCING_TOKEN
  granted=$(date +%s%3N)
  created=$(etcdctl get "$ETCD_LOCK_KEY" -w fields 2>/dev/null | sed -n "s/^\"CreateRevision\" : //p")
  if [[ -n $created && $ETCD_LOCK_REV != "$created" ]]; then
    lock_event lock_contended "$FENCING_LOCK" etcd-lock.sh acquired=true \
      waited_ms=$((granted - started)) token="$FENCING_TOKEN"
  fi
  "$@"
  rc=$?
  out=$(etcdctl del "$ETCD_LOCK_KEY" 2>&1)
  case $?:$out in
    0:1) ;;
    0:0) lock_event lock_lost "$FENCING_LOCK" etcd-lock.sh token="$FENCING_TOKEN" \
           ttl_ms=$((ttl * 1000)) held_ms=$(( $(date +%s%3N) - granted )) ;;
    *) lock_event lock_release_failed "$FENCING_LOCK" etcd-lock.sh token="$FENCING_TOKEN" error="$out" ;;
  esac
  exit $rc' etcd-lock "$@"
