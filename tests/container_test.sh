#!/usr/bin/env bash
# `make container-test`: build the image with podman, run it, and talk to it from the host.
#
# 1. podman, runc and debootstrap from Debian if missing (sudo when not root);
# 2. podman configured for machines without systemd or a working crun (own storage folder);
# 3. a base image made from Debian packages (no registry is needed), once per storage folder;
# 4. the image built (cold build time and size printed), checked for a non-root user and
#    for the absence of build tools;
# 5. the TURN image (Dockerfile.turn, about 15 s) run on the host's network;
# 6. a container on a random 127.0.0.1 port, healthy (HEALTHCHECK) within 20 s, then
#    tests/container_check.py: /health, a real offer/answer and the RTVI handshake, the
#    greeting and a text turn, then a second client whose media is relayed by the TURN server;
# 7. both containers (and their anonymous volumes) are removed whatever happens.
#
# Environment: PY (python with the dev extra, default .venv/bin/python),
# PARLEY_CONTAINER_STATE (podman's storage and config, default /var/tmp/parley-container),
# PARLEY_IMAGE (default localhost/parley:test), PARLEY_CONTAINER_TURN=0 skips the TURN part.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PY:-.venv/bin/python}
STATE=${PARLEY_CONTAINER_STATE:-/var/tmp/parley-container}
IMAGE=${PARLEY_IMAGE:-localhost/parley:test}
TURN_IMAGE=localhost/parley-turn:test
WITH_TURN=${PARLEY_CONTAINER_TURN:-1}
BASE_IMAGE=localhost/debian-base:bookworm
# The embedded Qwen (1.1 GB) loads before the server listens (llama.cpp holds the GIL while it
# loads, so /health could not answer meanwhile anyway): ~10 s idle, more on a busy machine.
HEALTHY_WITHIN=120
NAME="parley-container-test-$$"
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)

say() { printf '\n== %s\n' "$*"; }
fail() { printf 'container-test: FAILED: %s\n' "$*" >&2; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[ -x "$PY" ] || fail "$PY is missing: run \`make install-dev\` (or \`make test\`) first"

say "tools"
missing=""
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || [ -x "/usr/sbin/$tool" ] || missing="$missing $tool"
done
if [ -n "$missing" ]; then
  echo "installing from Debian:$missing"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    -o DPkg::Lock::Timeout=300 $missing >/dev/null
fi

# crun cannot start containers on these machines and the default ulimits are refused;
# podman's own health-check timers need systemd, so the health check is polled below.
# Ours, not root's: the logs below are written by this shell (podman itself runs as root).
mkdir -p "$STATE"
cat >"$STATE/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
cat >"$STATE/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$STATE/storage"
runroot = "$STATE/run"
EOF
pod() {
  $SUDO env CONTAINERS_CONF="$STATE/containers.conf" \
    CONTAINERS_STORAGE_CONF="$STATE/storage.conf" podman "$@"
}
podman --version

say "base image"
if pod image exists "$BASE_IMAGE"; then
  echo "$BASE_IMAGE exists"
else
  # The mirror apt already uses; nothing is pulled from a container registry.
  mirror=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null \
    || true)
  if [ -z "$mirror" ]; then
    mirror=$(awk '$1 == "deb" && $0 !~ /security/ { print $2; exit }' /etc/apt/sources.list \
      2>/dev/null || true)
  fi
  [ -n "$mirror" ] || fail "no Debian mirror found in apt's sources"
  started=$(now)
  rootfs="$STATE/rootfs"
  $SUDO rm -rf "$rootfs"
  $SUDO debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$STATE/debootstrap.log" \
    || { tail -20 "$STATE/debootstrap.log"; fail "debootstrap"; }
  $SUDO tar -C "$rootfs" -c . | pod import - "$BASE_IMAGE" >/dev/null
  $SUDO rm -rf "$rootfs"
  echo "base image made in $(since "$started") s (debootstrap from $mirror)"
fi

say "build $IMAGE"
secret=()
ca=/etc/ssl/certs/ca-certificates.crt
# Only used where outbound TLS is re-signed by a local CA; harmless elsewhere.
[ -s "$ca" ] && secret=(--secret "id=pip_ca,src=$ca")
started=$(now)
pod build --format docker "${secret[@]}" --build-arg "BASE_IMAGE=$BASE_IMAGE" \
  -t "$IMAGE" . >"$STATE/build.log" 2>&1 || { tail -40 "$STATE/build.log"; fail "build"; }
build_seconds=$(since "$started")
size_mb=$(pod image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%d", $1 / 1e6 }')
echo "built in $build_seconds s; image size $size_mb MB"

say "image checks"
user=$(pod image inspect --format '{{.Config.User}}' "$IMAGE")
case "${user%%:*}" in
  "" | root | 0) fail "the image runs as root (USER '$user')" ;;
esac
echo "runs as user $user"
tools=$(pod run --rm --no-healthcheck --entrypoint /bin/sh "$IMAGE" -c \
  'for t in gcc cc c++ g++ clang make ld as; do command -v "$t" || true; done')
[ -z "$tools" ] || fail "build tools in the image: $tools"
echo "no build tools (gcc cc c++ g++ clang make ld as)"

cleanup() {
  status=$?
  for name in "$NAME" "$NAME-turn"; do
    if [ "$status" != 0 ] && pod container exists "$name" 2>/dev/null; then
      echo "--- $name log (last 60 lines)"
      pod logs --tail 60 "$name" 2>&1 || true
    fi
    pod rm -f -v -t 5 "$name" >/dev/null 2>&1 || true
  done
  exit "$status"
}
trap cleanup EXIT INT TERM
free_port() {
  "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# `podman run -d` without a health-check timer (it needs systemd, and podman complains
# even when it is disabled): wait_healthy runs the image's check itself.
start_detached() {
  pod run -d --health-interval disable "$@" >/dev/null 2>"$STATE/run.err" \
    || { cat "$STATE/run.err"; fail "podman run $*"; }
}
# Waits for a container's own HEALTHCHECK to pass; prints the seconds since $2.
wait_healthy() {
  until pod healthcheck run "$1" >/dev/null 2>&1; do
    state=$(pod inspect --format '{{.State.Status}}' "$1")
    [ "$state" = running ] || fail "$1 is $state"
    if awk -v t="$(since "$2")" -v max="$HEALTHY_WITHIN" 'BEGIN { exit !(t > max) }'; then
      fail "$1 not healthy within $HEALTHY_WITHIN s"
    fi
    sleep 0.25
  done
  since "$2"
}

turn_args=()
if [ "$WITH_TURN" = 1 ]; then
  say "TURN server (Dockerfile.turn)"
  started=$(now)
  pod build --format docker -f Dockerfile.turn --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    -t "$TURN_IMAGE" . >"$STATE/build-turn.log" 2>&1 \
    || { tail -40 "$STATE/build-turn.log"; fail "TURN build"; }
  turn_build_seconds=$(since "$started")
  echo "built in $turn_build_seconds s"
  # The relay address must be one both the host and the Parley container reach: the host's
  # own address on its default route (not loopback, which the container cannot reach).
  host_ip=$("$PY" -c 'import socket; s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(("192.0.2.1", 9)); print(s.getsockname()[0])')
  turn_port=$(free_port)
  turn_password=$("$PY" -c 'import secrets; print(secrets.token_hex(12))')
  started=$(now)
  start_detached --name "$NAME-turn" --network host \
    -e TURN_PASSWORD="$turn_password" -e TURN_PORT="$turn_port" \
    "$TURN_IMAGE" --relay-ip="$host_ip"
  turn_healthy=$(wait_healthy "$NAME-turn" "$started")
  echo "listening on $host_ip:$turn_port, healthy after $turn_healthy s"
  turn_args=(--turn "turn:$host_ip:$turn_port" --turn-user parley --turn-password "$turn_password")
fi

say "run"
port=$(free_port)
started=$(now)
# Short answers: the text turn checks that the embedded LLM runs, not what it says.
start_detached --name "$NAME" -p "127.0.0.1:$port:7860" -e PARLEY_LLM_MAX_TOKENS=24 "$IMAGE"
healthy_seconds=$(wait_healthy "$NAME" "$started")
echo "healthy $healthy_seconds s after podman run (limit $HEALTHY_WITHIN s)"
uid=$(pod exec "$NAME" id -u)
[ "$uid" != 0 ] || fail "the server process runs as root"
echo "the server runs as uid $uid"

say "talk to it on 127.0.0.1:$port"
"$PY" -m tests.container_check "http://127.0.0.1:$port" "${turn_args[@]}"

say "summary"
echo "build ${build_seconds} s · image ${size_mb} MB · healthy after ${healthy_seconds} s"
[ "$WITH_TURN" != 1 ] || echo "TURN image build ${turn_build_seconds} s"
echo "container-test: OK"
