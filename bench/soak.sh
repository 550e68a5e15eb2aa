#!/usr/bin/env bash
# bench/soak.sh BUILD [options] - the soak benchmark (not CI; results: BENCHMARKS.md, "Soak").
#
# Four CTR-DNN jobs (examples/ctr/train on fleet-datagen data) run side by side, each under
# `fleetrun --max_restart` with a checkpoint after every epoch, round after round until
# --duration seconds have passed (a round that is running then is let finish):
#   ps_soak    2 servers + 2 workers (async)   disturbed
#   coll_soak  2 collective ranks              disturbed
#   ps_twin, coll_twin                         the same jobs, undisturbed
# "Disturbed": every --kill-every MIN:MAX seconds (random; default 120:240) one process of
# one disturbed job (a server, a worker or a rank, picked at random) gets SIGKILL; and
# bench/soak_flood holds --flood IDLE:SLOW (default 100:100) unauthenticated connections to
# each port those jobs listen on (127.0.0.1 only; bounded; it stops by itself).
# At the end bench/soak_report.py prints: rounds, restarts, kills, lost steps, final test AUC
# disturbed vs undisturbed, peak RSS of each process, fleetrun's open files at the start and
# end of each round, what the flood did, and what was left behind (processes, /dev/shm
# files, listening ports).  Everything is kept in --dir (default a new /tmp/fleet-soak.*).
#
# Options: --duration S (1800)  --kill-every MIN:MAX (120:240)  --flood IDLE:SLOW (100:100)
#          --rows N (100000)  --ps-epochs N (40)  --coll-epochs N (50)  --max-restart N (50)
#          --finish-s S (900: how long rounds still running at the end may take)  --dir DIR
set -uo pipefail
build=${1:-build}
shift || true
duration=1800 kill_every=120:240 flood=100:100 rows=100000 ps_epochs=40 coll_epochs=50 max_restart=50
finish_s=900 W=""
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "soak.sh: $1 expects a value" >&2; exit 2; }
  case "$1" in
    --duration) duration=$2 ;;
    --kill-every) kill_every=$2 ;;
    --flood) flood=$2 ;;
    --rows) rows=$2 ;;
    --ps-epochs) ps_epochs=$2 ;;
    --coll-epochs) coll_epochs=$2 ;;
    --max-restart) max_restart=$2 ;;
    --finish-s) finish_s=$2 ;;
    --dir) W=$2 ;;
    *) echo "soak.sh: unknown option $1 (see the comment at the top of bench/soak.sh)" >&2; exit 2 ;;
  esac
  shift 2
done
for v in duration rows ps_epochs coll_epochs max_restart finish_s; do
  [[ ${!v} =~ ^[0-9]+$ ]] && [ "${!v}" -gt 0 ] || { echo "soak.sh: --${v//_/-} expects a positive integer, got '${!v}'" >&2; exit 2; }
done
[[ $kill_every =~ ^([0-9]+):([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" -gt 0 ] && [ "${BASH_REMATCH[2]}" -ge "${BASH_REMATCH[1]}" ] ||
  { echo "soak.sh: --kill-every expects MIN:MAX seconds, 0 < MIN <= MAX, got '$kill_every'" >&2; exit 2; }
kill_min=${BASH_REMATCH[1]} kill_max=${BASH_REMATCH[2]}
[[ $flood =~ ^([0-9]+):([0-9]+)$ ]] || { echo "soak.sh: --flood expects IDLE:SLOW, got '$flood'" >&2; exit 2; }
f_idle=${BASH_REMATCH[1]} f_slow=${BASH_REMATCH[2]}
cd "$(dirname "$0")/.." || exit 2
for b in tools/fleetrun tools/fleet-datagen examples/ctr/train bench/soak_flood; do
  [ -x "$build/$b" ] || { echo "soak.sh: $build/$b is missing: run make first" >&2; exit 2; }
done
build=$(cd "$build" && pwd)
W=${W:-$(mktemp -d /tmp/fleet-soak.XXXXXX)}
mkdir -p "$W" && W=$(cd "$W" && pwd)
echo "soak: work directory $W; duration $duration s, a kill every $kill_min-$kill_max s, flood $f_idle idle + $f_slow slow per port"

now() { date +%s; }
echo "== data: $rows rows (fleet-datagen)"
"$build"/tools/fleet-datagen criteo --rows "$rows" --files 4 --out "$W/data" --seed 1 --vocab-scale 0.002 \
  --dense-scale 0.1 >"$W/datagen.out" 2>&1 || { cat "$W/datagen.out"; exit 1; }
ls /dev/shm >"$W/shm.before" 2>/dev/null
now >"$W/start"
end=$(($(now) + duration))
echo "$end" >"$W/end"

# One job, round after round until the end; each round in its own directory.
run_job() {
  local name=$1 r=0 d t0 rc
  local -a mode=(--server_num 2 --worker_num 2) extra=() epochs=$ps_epochs
  case $name in coll_*) mode=(--nproc_per_node 2) extra=(--mode collective) epochs=$coll_epochs ;; esac
  mkdir -p "$W/$name"
  while [ "$(now)" -lt "$end" ]; do
    r=$((r + 1))
    d=$W/$name/round$r
    mkdir -p "$d"
    t0=$(date +%s.%N)
    "$build"/tools/fleetrun "${mode[@]}" --max_restart "$max_restart" --job_id "soak-$name-$r" --log_dir "$d/log" \
      "$build"/examples/ctr/train "${extra[@]}" --train_data "$W/data/train" --test_data "$W/data/test" \
      --epochs "$epochs" --thread_num 2 --batch_size 100 --optimizer adam --lr 0.002 --sparse_feature_dim 100001 \
      --hidden 64,64 --print_period 10 --checkpoint_dir "$d/ckpt" --model_dir "$d/model" >"$d/fleetrun.out" 2>&1 &
    echo "$! $r" >"$W/$name/current"
    wait $!
    rc=$?
    rm -f "$W/$name/current"
    echo "$r $rc $t0 $(date +%s.%N)" >>"$W/$name/rounds"
    rm -rf "$d/ckpt" "$d/model" # large, and not needed by the report
  done
}

# The descendants of pid (ps output cached in $PS).
descendants() {
  awk -v root="$1" '{ kids[$2] = kids[$2] " " $1 } END {
    n = split(root, q, " "); while (n) { p = q[n--]; print p; m = split(kids[p], k, " "); for (i = 1; i <= m; i++) q[++n] = k[i] } }' <<<"$PS"
}

# What a process of a job is: fleetrun-guard (fleetrun's own helper), server.N or worker.N
# (from the variables fleetrun gave it; a collective rank is a worker).
role_of() {
  local env ep list
  case $(cat /proc/"$1"/comm 2>/dev/null) in fleetrun*) echo fleetrun-guard; return ;; esac
  env=$(tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null) || return 1
  if grep -qx TRAINING_ROLE=PSERVER <<<"$env"; then
    ep=$(sed -n 's/^PADDLE_CURRENT_ENDPOINT=//p' <<<"$env")
    list=$(sed -n 's/^PADDLE_PSERVERS_IP_PORT_LIST=//p' <<<"$env")
    echo "server.$(awk -F, -v ep="$ep" '{ for (i = 1; i <= NF; i++) if ($i == ep) print i - 1 }' <<<"$list")"
  else
    echo "worker.$(sed -n 's/^PADDLE_TRAINER_ID=//p' <<<"$env")"
  fi
}

# Every 2 s: peak RSS of each process, fleetrun's open files, the ports to flood.
sample() {
  local job cur fr r p key hwm ports pidset
  while [ ! -e "$W/stop" ]; do
    PS=$(ps -e -o pid=,ppid=)
    ports=""
    for job in ps_soak coll_soak ps_twin coll_twin; do
      cur=$(cat "$W/$job/current" 2>/dev/null) || continue
      read -r fr r <<<"$cur"
      echo "fd $job $r $(date +%s) $(ls /proc/"$fr"/fd 2>/dev/null | wc -l)" >>"$W/samples"
      pidset=""
      for p in $(descendants "$fr"); do
        hwm=$(awk '/^VmHWM/ { print $2 }' /proc/"$p"/status 2>/dev/null) || continue
        [ -n "$hwm" ] || continue
        if [ "$p" = "$fr" ]; then key=fleetrun
        else
          key=$(role_of "$p") || continue
          [ "$key" = fleetrun-guard ] || pidset="$pidset $p"
        fi
        echo "rss $job $r $p $key $hwm" >>"$W/samples"
        echo "$p" >>"$W/pids.seen"
      done
      [ -n "$pidset" ] || continue
      for p in $(ss -Hltnp 2>/dev/null | grep -oE ':[0-9]+ .*pid=[0-9]+' |
        sed -E 's/^:([0-9]+) .*pid=([0-9]+).*/\1 \2/' | awk -v s="$pidset " 'index(s, " " $2 " ") { print $1 }'); do
        echo "$job $p" >>"$W/ports.seen"
        case $job in *_soak) ports="$ports$p"$'\n' ;; esac
      done
    done
    printf '%s' "$ports" >"$W/ports.tmp" && mv "$W/ports.tmp" "$W/ports"
    sleep 2
  done
}

# Until the end: SIGKILL to a random process of a disturbed job (the two jobs in turn, the
# first one picked at random).
killer() {
  local wait job cur fr r victims v key turn=$((RANDOM % 2))
  while :; do
    wait=$((kill_min + RANDOM % (kill_max - kill_min + 1)))
    while [ "$wait" -gt 0 ] && [ "$(now)" -lt "$end" ]; do sleep 1; wait=$((wait - 1)); done
    [ "$(now)" -lt "$end" ] || break
    turn=$((1 - turn))
    job=$([ "$turn" -eq 0 ] && echo ps_soak || echo coll_soak)
    cur=$(cat "$W/$job/current" 2>/dev/null) || { echo "$(now) $job - - - no round running" >>"$W/kills"; continue; }
    read -r fr r <<<"$cur"
    PS=$(ps -e -o pid=,ppid=)
    victims=()
    for v in $(descendants "$fr"); do
      [ "$v" != "$fr" ] && key=$(role_of "$v") && [ "$key" != fleetrun-guard ] && victims+=("$v:$key")
    done
    [ ${#victims[@]} -gt 0 ] || { echo "$(now) $job $r - - no process running" >>"$W/kills"; continue; }
    v=${victims[$((RANDOM % ${#victims[@]}))]}
    kill -9 "${v%%:*}" 2>/dev/null && echo "$(now) $job $r ${v%%:*} ${v#*:} killed" >>"$W/kills"
  done
}

echo "== jobs: ps_soak, coll_soak (disturbed), ps_twin, coll_twin (undisturbed), until $(date -d @"$end" +%T)"
pids=()
for job in ps_soak coll_soak ps_twin coll_twin; do
  run_job "$job" &
  pids+=($!)
done
sample &
sampler=$!
killer &
killer_pid=$!
"$build"/bench/soak_flood --ports "$W/ports" --idle "$f_idle" --slow "$f_slow" --duration $((duration + finish_s)) \
  >"$W/flood.out" 2>&1 &
flooder=$!

wait "$killer_pid"
echo "== $(date +%T): the duration is over; waiting up to $finish_s s for the rounds still running"
deadline=$(($(now) + finish_s))
for job in ps_soak coll_soak ps_twin coll_twin; do
  while [ -e "$W/$job/current" ] && [ "$(now)" -lt "$deadline" ]; do sleep 1; done
  if cur=$(cat "$W/$job/current" 2>/dev/null); then # too long: fleetrun stops its job on SIGTERM
    echo "$job round ${cur#* } cut after --finish-s" >>"$W/cut"
    kill -TERM "${cur%% *}" 2>/dev/null
  fi
done
wait "${pids[@]}"
kill -TERM "$flooder" 2>/dev/null
wait "$flooder"
touch "$W/stop"
wait "$sampler"
sleep 2 # processes that outlived their fleetrun would be seen here
ls /dev/shm >"$W/shm.after" 2>/dev/null
pgrep -a -f -- "$W/data/" >"$W/left.procs" 2>/dev/null
: >"$W/left.shm"
sort -u "$W/pids.seen" 2>/dev/null | while read -r p; do ls -d /dev/shm/fleet-coll-"$p"-* 2>/dev/null; done >>"$W/left.shm"
: >"$W/left.ports"
sort -u -k2,2 "$W/ports.seen" 2>/dev/null | while read -r job p; do
  ss -Hltnp "sport = :$p" 2>/dev/null | sed "s/^/$job port $p: /"
done >>"$W/left.ports"
python3 bench/soak_report.py "$W" | tee "$W/report.md"
