#!/usr/bin/env bash
# The servers of the cluster tests (tests/cluster), made to answer before the suite runs.
#
#   Redis       CRDT_STATE_TEST_REDIS     a redis URL      (default redis://127.0.0.1:6379/0)
#   PostgreSQL  CRDT_STATE_TEST_POSTGRES  a libpq DSN/URI  (default host=127.0.0.1
#                                                            user=postgres dbname=postgres)
#
# A server named by one of these variables is only checked. For a variable left unset, the
# machine's server is used, and where it is missing or stopped this script installs it with
# apt-get (redis-server, postgresql) and starts it. redis-server and PostgreSQL's server
# binaries are installed in every case: the tests start private instances of both
# (CRDT_STATE_TEST_POSTGRES_BIN names another directory holding initdb and postgres).
# Idempotent and quiet: one line on stderr per action taken, nothing when all is already
# running.
#
# Stdout carries `export NAME=VALUE` lines for the variables the caller must set (only when
# the machine's PostgreSQL had to be reached another way than the default DSN). Use:
#     services_env=$(bash scripts/test-services.sh) && eval "$services_env"
# Exits non-zero, with the reason on stderr, when a server still does not answer.
set -euo pipefail
cd "$(dirname "$0")/.."

DEFAULT_REDIS="redis://127.0.0.1:6379/0"
DEFAULT_POSTGRES="host=127.0.0.1 user=postgres dbname=postgres"
LOG_DIR="${TMPDIR:-/tmp}"

say() { echo "test-services: $*" >&2; }
die() { say "$*"; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo -n "$@"; fi; }

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null || die "apt-get not found: install $* by hand"
    local log="$LOG_DIR/crdt-state-apt.log"
    if [ "$apt_updated" = 0 ]; then
        as_root apt-get update -qq >"$log" 2>&1 || die "apt-get update failed (see $log)"
        apt_updated=1
    fi
    say "installing $* with apt-get"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "$@" >>"$log" 2>&1 || die "apt-get install $* failed (see $log)"
}

redis_answers() {  # URL: 0 when PING answers within 2 s
    python3 - "$1" >/dev/null 2>&1 <<'EOF'
import sys
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
client = redis.Redis.from_url(
    sys.argv[1], socket_timeout=2, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0)
)
client.ping()
EOF
}

postgres_answers() {  # DSN: 0 when a connection and `SELECT 1` succeed within 3 s
    python3 - "$1" >/dev/null 2>&1 <<'EOF'
import sys
import psycopg
with psycopg.connect(sys.argv[1], connect_timeout=3) as conn:
    conn.execute("SELECT 1")
EOF
}

pg_up() {  # PORT: 0 when a server accepts connections there (TCP or socket), auth aside
    pg_isready -q -t 2 -h 127.0.0.1 -p "$1" || pg_isready -q -t 2 -h /var/run/postgresql -p "$1"
}

wait_for() {  # SECONDS CHECK ARG: retry CHECK ARG every 0.2 s for up to SECONDS
    local deadline=$((SECONDS + $1))
    while ! "$2" "$3"; do
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

ensure_redis() {
    command -v redis-server >/dev/null || apt_install redis-server
    if [ -n "${CRDT_STATE_TEST_REDIS:-}" ]; then
        redis_answers "$CRDT_STATE_TEST_REDIS" ||
            die "CRDT_STATE_TEST_REDIS=$CRDT_STATE_TEST_REDIS does not answer PING"
        return
    fi
    redis_answers "$DEFAULT_REDIS" && return
    say "starting redis-server on 127.0.0.1:6379 (keeps nothing on disk)"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save '' \
        --appendonly no --dir "$LOG_DIR" --logfile "$LOG_DIR/crdt-state-redis.log" >/dev/null ||
        die "redis-server did not start (see $LOG_DIR/crdt-state-redis.log)"
    wait_for 10 redis_answers "$DEFAULT_REDIS" ||
        die "redis on 127.0.0.1:6379 does not answer (see $LOG_DIR/crdt-state-redis.log)"
}

ensure_postgres() {
    if [ -n "${CRDT_STATE_TEST_POSTGRES:-}" ]; then
        postgres_answers "$CRDT_STATE_TEST_POSTGRES" ||
            die "CRDT_STATE_TEST_POSTGRES=$CRDT_STATE_TEST_POSTGRES does not answer"
        return
    fi
    postgres_answers "$DEFAULT_POSTGRES" && return
    local installed_now=0
    if ! compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null; then
        apt_install postgresql
        installed_now=1
    fi
    command -v pg_lsclusters >/dev/null || die "pg_lsclusters missing (Debian postgresql-common)"
    if [ -z "$(pg_lsclusters -h)" ]; then
        local version
        version=$(basename "$(compgen -G "/usr/lib/postgresql/*" | sort -V | tail -n 1)")
        say "creating PostgreSQL cluster $version/main"
        as_root pg_createcluster "$version" main >/dev/null
    fi
    local started=0 version name port status
    while read -r version name port status _; do
        if [ "$port" = 5432 ] && [ "$status" != online ]; then
            say "starting PostgreSQL cluster $version/$name on port 5432"
            as_root pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start ||
                die "pg_ctlcluster $version $name start failed"
            started=1
        fi
    done < <(pg_lsclusters -h)
    if [ "$started" = 1 ] || [ "$installed_now" = 1 ]; then
        wait_for 30 pg_up 5432 || die "PostgreSQL on port 5432 did not come up"
        postgres_answers "$DEFAULT_POSTGRES" && return
    fi
    # The server runs but refuses the default DSN (no TCP, or no trust auth for postgres on
    # 127.0.0.1): use the Unix socket as this OS user, creating that role on a server this
    # script installed itself.
    local socket_dsn="host=/var/run/postgresql port=5432 dbname=postgres"
    if ! postgres_answers "$socket_dsn" && [ "$installed_now" = 1 ] && [ "$(id -u)" = 0 ]; then
        say "creating the PostgreSQL superuser role $(id -un) (peer auth on the Unix socket)"
        su postgres -c "createuser --superuser $(id -un)" >/dev/null 2>&1 || true
    fi
    if postgres_answers "$socket_dsn"; then
        say "PostgreSQL answers on its Unix socket only: CRDT_STATE_TEST_POSTGRES='$socket_dsn'"
        echo "export CRDT_STATE_TEST_POSTGRES='$socket_dsn'"
        return
    fi
    die "PostgreSQL does not accept '$DEFAULT_POSTGRES'; set CRDT_STATE_TEST_POSTGRES"
}

ensure_postgres_binaries() {  # tests/cluster/postgres_server.py runs private servers
    if [ -n "${CRDT_STATE_TEST_POSTGRES_BIN:-}" ]; then
        [ -x "$CRDT_STATE_TEST_POSTGRES_BIN/initdb" ] ||
            die "CRDT_STATE_TEST_POSTGRES_BIN=$CRDT_STATE_TEST_POSTGRES_BIN has no initdb"
        return
    fi
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && return
    command -v initdb >/dev/null && return
    apt_install postgresql
}

python3 -c "import redis, psycopg" 2>/dev/null ||
    die "the cluster extra is not installed: pip install -e '.[dev]'"
ensure_redis
ensure_postgres
ensure_postgres_binaries
