#!/usr/bin/env bash
# Start Debian's docker-registry (CNCF distribution) on 127.0.0.1 on a free
# port picked now, with its own config and storage under DIR.
#   registry.sh start DIR [open|basic|token]   -> prints the port; pid in DIR/pid
#   registry.sh stop DIR
# Modes:
#   open  (default) no authentication.
#   basic htpasswd (bcrypt) Basic auth: user $IMGBUILD_TEST_USER_NAME
#         (default tester) with password $IMGBUILD_TEST_PASSWORD
#         (default tester-secret-1).
#   token the distribution token spec: a token server (tests/lib/token-server.py)
#         on another free port signs RS256 JWTs with a key and self-signed
#         certificate made here with openssl (never kept); the same user gets
#         every scope, anonymous users pull on public/* only; refresh token
#         $IMGBUILD_TEST_REFRESH_TOKEN (default tester-refresh-1) for the user;
#         tokens live $IMGBUILD_TOKEN_EXPIRES_IN seconds (default 300).
#         Token server port in DIR/token-port, its request log DIR/token-log.
# The servers stop by themselves after IMGBUILD_REGISTRY_LIFETIME seconds
# (default 3 h) if nobody stops them.
# Optional, from the environment:
#   REGISTRY_ACCESSLOG=1        log every request (method, URI, status) to DIR/log
#   REGISTRY_TLS_CERT, REGISTRY_TLS_KEY   serve HTTPS with this certificate
#   REGISTRY_TLS_CLIENTCA       ... and require client certificates signed by this CA
# With TLS the readiness check uses curl -k (and the client certificate
# REGISTRY_TLS_CLIENT_CERT/_KEY when a client CA is set).
set -euo pipefail
cmd=$1 dir=$2 mode=${3:-open}
here=$(cd "$(dirname "$0")" && pwd)
lifetime=${IMGBUILD_REGISTRY_LIFETIME:-10800}
user=${IMGBUILD_TEST_USER_NAME:-tester}
password=${IMGBUILD_TEST_PASSWORD:-tester-secret-1}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
case "$cmd" in
start)
  mkdir -p "$dir/data"
  auth_yml=
  case "$mode" in
  open) ;;
  basic)
    htpasswd -Bbn "$user" "$password" > "$dir/htpasswd"
    auth_yml="auth:
  htpasswd:
    realm: imgbuild-test
    path: $dir/htpasswd"
    ;;
  token)
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$dir/token.key" -out "$dir/token.crt" \
      -days 2 -subj /CN=imgbuild-test-token >/dev/null 2>&1
    rm -f "$dir/token-port"
    : > "$dir/token-log"
    setsid timeout "$lifetime" /usr/bin/python3 "$here/token-server.py" \
      --key "$dir/token.key" --cert "$dir/token.crt" \
      --issuer imgbuild-test-issuer --service imgbuild-test-registry \
      --user "$user:$password" \
      --refresh-token "$user:${IMGBUILD_TEST_REFRESH_TOKEN:-tester-refresh-1}" \
      --expires-in "${IMGBUILD_TOKEN_EXPIRES_IN:-300}" --lifetime "$lifetime" \
      --port-file "$dir/token-port" --log "$dir/token-log" \
      >"$dir/token-server.out" 2>&1 </dev/null &
    echo $! > "$dir/token-pid"
    for _ in $(seq 1 100); do
      [ -s "$dir/token-port" ] && break
      kill -0 "$(cat "$dir/token-pid")" 2>/dev/null || break
      sleep 0.1
    done
    if [ ! -s "$dir/token-port" ]; then
      echo "registry.sh: token server did not start: $(tail -n 5 "$dir/token-server.out")" >&2
      exit 1
    fi
    auth_yml="auth:
  token:
    realm: http://127.0.0.1:$(cat "$dir/token-port")/token
    service: imgbuild-test-registry
    issuer: imgbuild-test-issuer
    rootcertbundle: $dir/token.crt"
    ;;
  *) echo "registry.sh: mode must be open, basic or token, not '$mode'" >&2; exit 2 ;;
  esac
  accesslog_off=true
  [ "${REGISTRY_ACCESSLOG:-}" = 1 ] && accesslog_off=false
  scheme=http
  probe_opts=()
  tls_yml=
  if [ -n "${REGISTRY_TLS_CERT:-}" ]; then
    scheme=https
    probe_opts=(-k)
    tls_yml="  tls:
    certificate: $REGISTRY_TLS_CERT
    key: $REGISTRY_TLS_KEY"
    if [ -n "${REGISTRY_TLS_CLIENTCA:-}" ]; then
      probe_opts+=(--cert "$REGISTRY_TLS_CLIENT_CERT" --key "$REGISTRY_TLS_CLIENT_KEY")
      tls_yml="$tls_yml
    clientcas:
      - $REGISTRY_TLS_CLIENTCA"
    fi
  fi
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
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
$tls_yml
$auth_yml
YML
    setsid timeout "$lifetime" docker-registry serve "$dir/config.yml" \
      >"$dir/log" 2>&1 </dev/null &
    echo $! > "$dir/pid"
    for _ in $(seq 1 100); do
      code=$(curl -sS "${probe_opts[@]}" -o /dev/null -w '%{http_code}' "$scheme://127.0.0.1:$port/v2/" 2>/dev/null || true)
      if [ "$code" = 200 ] || [ "$code" = 401 ]; then
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
  for f in pid token-pid; do
    if [ -f "$dir/$f" ]; then
      kill "$(cat "$dir/$f")" 2>/dev/null || true
      rm -f "$dir/$f"
    fi
  done
  ;;
*) echo "usage: registry.sh start DIR [open|basic|token] | stop DIR" >&2; exit 2 ;;
esac
