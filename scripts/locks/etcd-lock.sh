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
#
# Needs etcdctl v3.4+ (ETCD_LOCK_REV is set for the exec form `lock NAME -- CMD`).
set -u
usage() { echo "usage: $0 NAME -- CMD [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
name=$1
[ "$2" = "--" ] || usage
shift 2
ttl=${ETCD_LOCK_TTL:-10}
export ETCDCTL_API=3 FENCING_LOCK=$name
exec etcdctl lock --ttl="$ttl" "$name" -- \
  sh -c 'FENCING_TOKEN=$ETCD_LOCK_REV; export FENCING_TOKEN; exec "$@"' etcd-lock "$@"
