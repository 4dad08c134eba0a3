#!/usr/bin/env bash
# Start a throwaway PostgreSQL server on 127.0.0.1:${PGPORT:-54329} (trust auth) for the tests.
# Installs Debian's postgresql if missing. Prints the URL for QUANTS_TEST_PG_URL on stdout.
set -euo pipefail
port=${PGPORT:-54329}
data=${PGDATA_DIR:-/tmp/quants-pg-$port}
if ! ls -d /usr/lib/postgresql/*/bin >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq postgresql >&2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
if ! as_pg "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; then
  rm -rf "$data"
  mkdir -p "$data"
  [ "$(id -u)" = 0 ] && chown postgres "$data"
  as_pg "$bin/initdb" -D "$data" --auth=trust -U postgres -E UTF8 >/dev/null
  as_pg "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
    -o "-p $port -k /tmp -c listen_addresses=127.0.0.1 -c fsync=off" start >&2
fi
echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
