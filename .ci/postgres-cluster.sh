#!/usr/bin/env bash
# postgres-cluster.sh: a throwaway PostgreSQL cluster for ThreadKitPostgres's tests, the tour and
# the benchmarks. Used by .ci/run and by the tests' own support (when TK_POSTGRES_URL is unset).
#
#   .ci/postgres-cluster.sh start        initdb + pg_ctl start in a new temporary directory; prints
#                                        shell assignments (TK_POSTGRES_URL, TK_POSTGRES_PGDATA, ...)
#   .ci/postgres-cluster.sh stop DIR     stops the cluster started in DIR and removes DIR
#   .ci/postgres-cluster.sh restart DIR  pg_ctl restart (fast shutdown) of that cluster
#   .ci/postgres-cluster.sh stopserver DIR / startserver DIR   stop or start the server, keep DIR
#
# The server listens on 127.0.0.1 at a free port and on a socket in DIR. Local (socket) connections
# trust the OS user; TCP connections need a password (scram-sha-256), so that the wrong-credentials
# case is real. Role/database `threadkit` (password `threadkit`) is what the tests use; TLS is on
# with a self-signed certificate when openssl exists (TK_POSTGRES_TLS=1 is then printed).
# When run as root, the server runs as the `postgres` user (initdb refuses root).
set -euo pipefail

find_bin() {
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v pg_ctl)")"; return
    fi
    local dir
    dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
    [ -n "$dir" ] && [ -x "$dir/initdb" ] || { echo "postgres-cluster.sh: no initdb found (install Debian's postgresql package)" >&2; exit 3; }
    echo "$dir"
}

as_owner() {   # run a command as the cluster's owner
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
    local port
    for _ in $(seq 1 50); do
        port=$(( 20000 + RANDOM % 30000 ))
        if ! (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then echo "$port"; return; fi
    done
    echo "postgres-cluster.sh: no free port found" >&2; exit 3
}

cmd=${1:-}
bin=$(find_bin)
case "$cmd" in
start)
    dir=$(mktemp -d /tmp/tk-pg.XXXXXX)
    chmod 755 "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; fi
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth-local=trust --auth-host=scram-sha-256 \
        -E UTF8 --no-locale >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    tls=0
    if command -v openssl >/dev/null 2>&1; then
        as_owner openssl req -new -x509 -days 2 -nodes -subj "/CN=localhost" \
            -keyout "$dir/data/server.key" -out "$dir/data/server.crt" >/dev/null 2>&1 && tls=1
        [ $tls = 1 ] && as_owner chmod 600 "$dir/data/server.key"
    fi
    {
        echo "listen_addresses = '127.0.0.1'"
        echo "unix_socket_directories = '$dir'"
        echo "max_connections = 200"
        echo "fsync = off"
        [ $tls = 1 ] && echo "ssl = on"
    } | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null
    started=0
    for _ in 1 2 3 4 5; do
        port=$(free_port)
        echo "port = $port" | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null
        if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start </dev/null >/dev/null 2>&1; then started=1; break; fi
    done
    [ $started = 1 ] || { cat "$dir/server.log" >&2; exit 1; }
    as_owner "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 -q \
        -c "CREATE ROLE threadkit LOGIN PASSWORD 'threadkit'" \
        -c "CREATE DATABASE threadkit OWNER threadkit" >/dev/null
    echo "TK_POSTGRES_URL=postgres://threadkit:threadkit@127.0.0.1:$port/threadkit"
    echo "TK_POSTGRES_ADMIN_URL=postgres://postgres@127.0.0.1:$port/threadkit?host=$dir"
    echo "TK_POSTGRES_CLUSTER=$dir"
    echo "TK_POSTGRES_TLS=$tls"
    ;;
stop)
    dir=${2:?usage: stop DIR}
    [ -d "$dir/data" ] && as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
restart)
    dir=${2:?usage: restart DIR}
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m fast -w -t 60 restart </dev/null >/dev/null 2>&1 || { tail -5 "$dir/server.log" >&2; exit 1; }
    ;;
stopserver)
    dir=${2:?usage: stopserver DIR}
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null
    ;;
startserver)
    dir=${2:?usage: startserver DIR}
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start </dev/null >/dev/null 2>&1 || { tail -5 "$dir/server.log" >&2; exit 1; }
    ;;
*)
    echo "usage: $0 start | stop DIR | restart DIR | stopserver DIR | startserver DIR" >&2; exit 2 ;;
esac
