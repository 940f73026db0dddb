#!/usr/bin/env bash
# Start Debian's docker-registry (CNCF distribution) on 127.0.0.1 on a free
# port picked now, with its own config and storage under DIR.
#   registry.sh start DIR   -> prints the port; pid in DIR/pid
#   registry.sh stop DIR
# The server stops by itself after IMGBUILD_REGISTRY_LIFETIME seconds
# (default 3 h) if nobody stops it.
# Optional, from the environment:
#   REGISTRY_ACCESSLOG=1        log every request (method, URI, status) to DIR/log
#   REGISTRY_TLS_CERT, REGISTRY_TLS_KEY   serve HTTPS with this certificate
#   REGISTRY_TLS_CLIENTCA       ... and require client certificates signed by this CA
# With TLS the readiness check
# uses curl -k (and the client certificate REGISTRY_TLS_CLIENT_CERT/_KEY
# when a client CA is set).
set -euo pipefail
cmd=$1 dir=$2
case "$cmd" in
start)
  mkdir -p "$dir/data"
  accesslog_off=true
  [ "${REGISTRY_ACCESSLOG:-}" = 1 ] && accesslog_off=false
  probe=(curl -fsS "http://127.0.0.1:PORT/v2/")
  if [ -n "${REGISTRY_TLS_CERT:-}" ]; then
    probe=(curl -fsSk "https://127.0.0.1:PORT/v2/")
    [ -n "${REGISTRY_TLS_CLIENTCA:-}" ] && probe+=(--cert "$REGISTRY_TLS_CLIENT_CERT" --key "$REGISTRY_TLS_CLIENT_KEY")
  fi
  for attempt in 1 2 3 4 5; do
    port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat > "$dir/config.yml" <<YML
version: 0.1
log:
  level: error
  accesslog:
    disabled: $accesslog_off
storage:
  filesystem:
    rootdirectory: $dir/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
YML
    if [ -n "${REGISTRY_TLS_CERT:-}" ]; then
      {
        echo "  tls:"
        echo "    certificate: $REGISTRY_TLS_CERT"
        echo "    key: $REGISTRY_TLS_KEY"
        if [ -n "${REGISTRY_TLS_CLIENTCA:-}" ]; then
          echo "    clientcas:"
          echo "      - $REGISTRY_TLS_CLIENTCA"
        fi
      } >> "$dir/config.yml"
    fi
    setsid timeout "${IMGBUILD_REGISTRY_LIFETIME:-10800}" docker-registry serve "$dir/config.yml" \
      >"$dir/log" 2>&1 </dev/null &
    echo $! > "$dir/pid"
    for _ in $(seq 1 100); do
      if "${probe[@]//PORT/$port}" >/dev/null 2>&1; then
        echo "$port" > "$dir/port"
        echo "$port"
        exit 0
      fi
      kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
      sleep 0.1
    done
    kill "$(cat "$dir/pid")" 2>/dev/null || true
  done
  echo "registry.sh: docker-registry did not start; log: $(tail -n 5 "$dir/log")" >&2
  exit 1
  ;;
stop)
  if [ -f "$dir/pid" ]; then
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    rm -f "$dir/pid"
  fi
  ;;
*) echo "usage: registry.sh start|stop DIR" >&2; exit 2 ;;
esac
