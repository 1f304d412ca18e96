# Sourced by the scripts that start private servers (demo.sh, zombie-check.sh).
# shellcheck shell=bash

# port_free PORT: true when nothing answers on 127.0.0.1:PORT.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port: prints a loopback port in 20000-59999 that nothing answers on; fails after
# 100 tries. Nothing reserves it: a caller whose server cannot bind tries another.
free_port() {
  local p
  for _ in $(seq 100); do
    p=$((20000 + RANDOM % 40000))
    port_free "$p" && { echo "$p"; return 0; }
  done
  return 1
}
