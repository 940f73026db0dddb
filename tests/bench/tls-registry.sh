#!/usr/bin/env bash
# An HTTPS twin of a tests/lib/registry.sh registry, on the same storage,
# with a throw-away self-signed certificate (ch-image 0.31 speaks only
# HTTPS).  Listens on 127.0.0.1 only and stops by itself after 3 hours.
#
#   bash tests/bench/tls-registry.sh start REGDIR TLSDIR   # prints the port
#   bash tests/bench/tls-registry.sh stop TLSDIR
set -euo pipefail
case ${1:-} in
start)
  regdir=${2:?REGDIR} tlsdir=${3:?TLSDIR}
  mkdir -p "$tlsdir"
  if [ ! -s "$tlsdir/cert.pem" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=127.0.0.1 \
      -addext subjectAltName=IP:127.0.0.1 -keyout "$tlsdir/key.pem" -out "$tlsdir/cert.pem" 2>/dev/null
  fi
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat > "$tlsdir/config.yml" <<YML
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $regdir/data
http:
  addr: 127.0.0.1:$port
  tls:
    certificate: $tlsdir/cert.pem
    key: $tlsdir/key.pem
YML
  setsid timeout 10800 docker-registry serve "$tlsdir/config.yml" >"$tlsdir/log" 2>&1 </dev/null &
  echo $! > "$tlsdir/pid"
  for _ in $(seq 1 100); do
    curl -ksf "https://127.0.0.1:$port/v2/" >/dev/null 2>&1 && break
    sleep 0.1
  done
  if ! curl -ksf "https://127.0.0.1:$port/v2/" >/dev/null; then
    echo "HTTPS registry did not start: $(tail -n 3 "$tlsdir/log")" >&2
    exit 1
  fi
  echo "$port" ;;
stop)
  tlsdir=${2:?TLSDIR}
  if [ -f "$tlsdir/pid" ]; then kill "$(cat "$tlsdir/pid")" 2>/dev/null || true; rm -f "$tlsdir/pid"; fi ;;
*) echo "usage: $0 start REGDIR TLSDIR | stop TLSDIR" >&2; exit 2 ;;
esac
