#!/bin/sh
# Start coturn from TURN_* environment variables; arguments are extra turnserver flags.
#
#   TURN_PASSWORD     required: the password of the static user (long-term credentials)
#   TURN_USERNAME     that user's name (default parley)
#   TURN_REALM        realm (default parley)
#   TURN_PORT         listening port, UDP and TCP (default 3478)
#   TURN_MIN_PORT, TURN_MAX_PORT   relay port range, UDP (default 49160-49200)
#   TURN_EXTERNAL_IP  the public address clients reach, when the host is behind 1:1 NAT
#                     (e.g. a cloud VM): "203.0.113.7" or "203.0.113.7/10.0.0.5"
set -eu

if [ -z "${TURN_PASSWORD:-}" ]; then
  echo "parley-turn: set TURN_PASSWORD (and tell Parley through PARLEY_ICE_SERVERS)" >&2
  exit 2
fi

set -- \
  --no-cli --no-tls --no-dtls --fingerprint --lt-cred-mech \
  --log-file=stdout --simple-log --pidfile=/tmp/turnserver.pid \
  --realm="${TURN_REALM:-parley}" \
  --user="${TURN_USERNAME:-parley}:${TURN_PASSWORD}" \
  --listening-port="${TURN_PORT:-3478}" \
  --min-port="${TURN_MIN_PORT:-49160}" --max-port="${TURN_MAX_PORT:-49200}" \
  ${TURN_EXTERNAL_IP:+--external-ip="$TURN_EXTERNAL_IP"} \
  "$@"
exec turnserver -n "$@"
