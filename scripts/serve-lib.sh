# Shell helpers for the serve test runners (sourced): start `toy serve` on a free loopback port and stop it.
# serve_start ARGS... (the binary: $TOY, default target/release/toy) sets $serve_pid and $serve_url and waits (up to 120 s) for GET /health to answer 200;
# the caller sets `trap serve_stop EXIT` (plus its own cleanup) first.
serve_start() {
  local py=${PY:-python3}
  local port
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  serve_url="http://127.0.0.1:$port"
  "${TOY:-target/release/toy}" serve --port "$port" "$@" &
  serve_pid=$!
  local i
  for i in $(seq 1 600); do
    if ! kill -0 "$serve_pid" 2>/dev/null; then
      echo "toy serve exited before answering /health" >&2
      return 1
    fi
    if "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/health", timeout=2)' "$serve_url" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  echo "toy serve did not answer $serve_url/health within 120 s" >&2
  return 1
}
serve_stop() {
  if [ -n "${serve_pid:-}" ] && kill -0 "$serve_pid" 2>/dev/null; then
    kill "$serve_pid"
    wait "$serve_pid" 2>/dev/null || true
  fi
  serve_pid=
}
