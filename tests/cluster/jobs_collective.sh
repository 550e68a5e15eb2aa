# shellcheck shell=bash
# jobs_collective.sh - collective (data-parallel) jobs over the bed (sourced by run.sh).
#
# The program is examples/fmnist/train_mlp (Fashion-MNIST, the 784-512-256-10 MLP, Momentum
# lr 0.01): its trainers split each global batch (trainer r takes every n-th image of the
# epoch's fixed permutation), so 2 trainers x --batch B train on exactly the batches of 1
# trainer x --batch 2B.  With --dump PATH the first worker writes the parameters after
# training (safetensors), and st_compare.py compares them with those of one process:
#
#   every launcher's job: 2 trainers (one per host) x --batch 5000, one epoch = 6 steps
#   reference:            1 process x --batch 10000 (the same global batch), made once per run
#   check:                every parameter within 1e-5 (abs + rel, st_compare.py)
#
# Why 6 steps of 10,000 images: the float sums of a 2-rank allreduce round differently from
# one process's batch (about 1e-8 per step), and ReLU turns such a difference into a large
# one when a unit's input sits within it of 0 on some image: then the two runs differ by
# 1e-6..1e-4 from that step on.  The chance grows with the steps, so the job is short:
# measured on this machine, 6 steps of 2 x 5000 stayed within 3e-8 of one process for 8
# of 8 shuffle seeds; 10 steps of 2 x 3000 flipped a unit for 2 of 8 seeds (3e-6, 5e-6),
# 30 steps of 2 x 1000 for 2 of 4 (2e-5), 938 steps of 2 x 32 always.  The 6 steps still move
# the parameters about 1e-2 (halving the learning rate moves them 5e-3), and the check that
# the tolerance tells another global batch apart is made with the reference.
#
# Every job here (and the srun and mpirun ones in slurm.sh and mpi.sh) starts its launcher
# with FMNIST_CMD between fmnist_setup and fmnist_finish.

FMNIST_DATA=${FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
FMNIST_BATCH=5000 # per trainer; 2 trainers
COLL_PORT=6070

fmnist_present() {
  [ -f "$FMNIST_DATA/train-images-idx3-ubyte.gz" ] || [ -f "$FMNIST_DATA/train-images-idx3-ubyte" ]
}

# The reference, made once per run in WORK/fmnist-ref: one.st, the parameters of 1 process
# x --batch 2 * FMNIST_BATCH.  Once, too: a process with another global batch (--batch
# FMNIST_BATCH, twice the steps) must differ from it by far more than 1e-5.
fmnist_ref() {
  local JOBDIR=$WORK/fmnist-ref # seen by start/await (dynamic scope)
  [ -f "$JOBDIR/one.st" ] && return 0
  mkdir -p "$JOBDIR"
  start one h3 "$BUILD/examples/fmnist/train_mlp" --batch $((2 * FMNIST_BATCH)) --dump "$JOBDIR/one.st"
  start half h3 "$BUILD/examples/fmnist/train_mlp" --batch "$FMNIST_BATCH" --dump "$JOBDIR/half.st"
  await 300 one half || { show one half; return 1; }
  [ "$(rc_of one)" = 0 ] && [ -f "$JOBDIR/one.st" ] || { show one; return 1; }
  [ "$(rc_of half)" = 0 ] || { show half; return 1; }
  local rc=0
  python3 "$HERE/st_compare.py" "$JOBDIR/one.st" "$JOBDIR/half.st" 1e-3 >"$JOBDIR/half.cmp" || rc=$?
  if [ $rc != 1 ]; then
    say "FAIL: global batch $FMNIST_BATCH is not told apart from global batch $((2 * FMNIST_BATCH)) at 1e-3" \
      "(st_compare.py status $rc)"
    sed 's/^/    /' "$JOBDIR/half.cmp"
    rm -f "$JOBDIR/one.st"
    return 1
  fi
}

# fmnist_result FILE: "LOSS CORRECT" from the epoch line
fmnist_result() {
  sed -n 's/^epoch 1\/1: loss \([0-9.]*\) .*test_acc [0-9.]*% (\([0-9]*\)\/10000).*/\1 \2/p' "$1" | head -1
}

# fmnist_check FILE: FILE (the first trainer's output of the job) says 2 trainers trained,
# and the parameters the job dumped are those of the reference within 1e-5.
fmnist_check() {
  local ref=$WORK/fmnist-ref
  say "loss, correct test images: this job $(fmnist_result "$1"); 1 process $(fmnist_result "$ref/one.out")"
  expect "2 trainers x batch $FMNIST_BATCH trained" grep -q "\[2 trainers x batch $FMNIST_BATCH\]" "$1" || return 1
  local rc=0
  python3 "$HERE/st_compare.py" "$ref/one.st" "$JOBDIR/params.st" 1e-5 >"$JOBDIR/params.cmp" 2>&1 || rc=$?
  tail -n 1 "$JOBDIR/params.cmp" | sed 's/^ */    /'
  local other
  other=$(tail -n 1 "$ref/half.cmp" | sed 's/^ *[0-9]* tensors,//; s/ (tolerance.*//')
  say "(1 process with global batch $FMNIST_BATCH:$other)"
  expect "parameters = 1 process x batch $((2 * FMNIST_BATCH)) within 1e-5" [ $rc = 0 ] ||
    { cat "$JOBDIR/params.cmp"; return 1; }
}

# fmnist_setup: the data and python3 (or skip), the reference, a fresh secret; T0 = now;
# FMNIST_CMD = the program and its arguments for each trainer
fmnist_setup() {
  fmnist_present || skip "no Fashion-MNIST in $FMNIST_DATA (Debian package dataset-fashion-mnist, or set FMNIST_DIR)"
  command -v python3 >/dev/null || skip "python3 is not installed (it compares the parameter dumps)"
  fmnist_ref
  new_secret
  FMNIST_CMD=("$BUILD/examples/fmnist/train_mlp" --batch "$FMNIST_BATCH" --dump "$JOBDIR/params.st")
  T0=$(now)
}

# fmnist_finish NAME...: the launchers NAME... (started after fmnist_setup) all exit 0, and
# the first one's output and the dump pass fmnist_check
fmnist_finish() {
  local n ok=0
  await 300 "$@" || { show "$@"; return 1; }
  for n in "$@"; do
    expect "$n exited 0 after $(secs_between "$T0" "$(end_of "$n")") s" [ "$(rc_of "$n")" = 0 ] || ok=1
  done
  [ $ok = 0 ] || { show "$@"; return 1; }
  fmnist_check "$JOBDIR/$1.out"
}

# b. 2 hosts x 1 trainer (fleetrun --ips h1,h2 --node_ip on each), TCP ring across the bed.
job_collective_fmnist() {
  local h
  fmnist_setup
  for h in h1 h2; do
    fleetrun_on "coll_$h" "$h" --ips "$(host_ip h1),$(host_ip h2)" --node_ip "$(host_ip "$h")" --nproc_per_node 1 \
      --start_port "$COLL_PORT" "${FMNIST_CMD[@]}"
  done
  fmnist_finish coll_h1 coll_h2
}

# The same, the two fleetruns meeting at --master (h1) with --nnodes 2 instead of --ips.
job_master_collective() {
  local h
  fmnist_setup
  for h in h1 h2; do
    fleetrun_on "coll_$h" "$h" --master "$(host_ip h1):$COLL_PORT" --nnodes 2 --node_ip "$(host_ip "$h")" \
      --nproc_per_node 1 "${FMNIST_CMD[@]}"
  done
  fmnist_finish coll_h1 coll_h2
}
