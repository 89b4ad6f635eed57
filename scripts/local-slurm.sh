#!/usr/bin/env bash
# Single-node SLURM cluster on localhost, with accounting (slurmdbd + MariaDB) so `sacct`
# works, for the orchestration integration tests.  Idempotent: `start` installs what is
# missing, writes the configs and starts only the daemons that are not running.
#   scripts/local-slurm.sh start | stop | status
# Needs root (apt-get, daemons).  Daemons are started directly (containers have no systemd).
set -euo pipefail

CLUSTER=interpscale
HOST=$(hostname -s)
CONF_DIR=/etc/slurm
STATE=/var/spool/slurm
LOGS=/var/log/slurm
DB_PASS=interpscale-slurmdbd

log() { echo "[local-slurm] $*" >&2; }

running() { pgrep -x "$1" >/dev/null 2>&1; }

install_packages() {
  local need=()
  for cmd in slurmctld slurmd sbatch slurmdbd munged mariadbd; do
    command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ] || need+=("$cmd")
  done
  if [ ${#need[@]} -eq 0 ]; then return; fi
  log "installing SLURM, munge and MariaDB (missing: ${need[*]})"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client slurmdbd munge mariadb-server procps >/dev/null
}

write_configs() {
  local cpus mem
  cpus=$(nproc)
  # leave 1 GiB to the OS; DefMemPerCPU keeps jobs from claiming the whole node
  mem=$(( $(awk '/MemTotal/ {print int($2/1024)}' /proc/meminfo) - 1024 ))
  mkdir -p "$CONF_DIR" "$STATE/ctld" "$STATE/d" "$LOGS" /run/slurm
  chown -R slurm:slurm "$STATE" "$LOGS" /run/slurm
  cat > "$CONF_DIR/slurm.conf" <<CONF
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MaxArraySize=1001
MpiDefault=none
ReturnToService=2
JobRequeue=1
KillWait=10
MinJobAge=300
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobCompType=jobcomp/none
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
  cat > "$CONF_DIR/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurm/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
CONF
  chown slurm:slurm "$CONF_DIR/slurmdbd.conf"
  chmod 600 "$CONF_DIR/slurmdbd.conf"
}

start_munge() {
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge  # clients (slurm user, job steps) must reach the socket
  if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  running munged || setsid runuser -u munge -- /usr/sbin/munged
}

start_mariadb() {
  if ! running mariadbd && ! running mysqld; then
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    # setsid: the server must outlive the shell (and process group) that started it
    (setsid mysqld_safe >/dev/null 2>&1 &)
  fi
  for _ in $(seq 60); do mysqladmin ping >/dev/null 2>&1 && break; sleep 1; done
  mysql -u root <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL
}

start() {
  [ "$(id -u)" -eq 0 ] || { log "must run as root"; exit 1; }
  install_packages
  write_configs
  start_munge
  start_mariadb
  running slurmdbd || /usr/sbin/slurmdbd
  for _ in $(seq 30); do sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 1; done
  sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null 2>&1 || true
  running slurmctld || /usr/sbin/slurmctld
  running slurmd || /usr/sbin/slurmd
  for _ in $(seq 60); do
    if sinfo -h -o %T 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; then
      log "cluster up: $(sinfo -h -o '%P %D %T %c CPUs')"
      return 0
    fi
    scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  log "slurmd did not become idle; see $LOGS"; sinfo || true; exit 1
}

stop_pidfile() {  # stop one daemon by the pid it recorded, never by name
  local pidfile=$1
  if [ -s "$pidfile" ]; then
    local pid
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then kill "$pid" || true; fi
    rm -f "$pidfile"
  fi
}

stop() {
  stop_pidfile /run/slurm/slurmd.pid
  stop_pidfile /run/slurm/slurmctld.pid
  stop_pidfile /run/slurm/slurmdbd.pid
  mysqladmin shutdown >/dev/null 2>&1 || true
  stop_pidfile /run/munge/munged.pid
  log "stopped"
}

status() { sinfo && sacct -n -X -S now-1hours | tail -5; }

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
