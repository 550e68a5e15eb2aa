#!/usr/bin/env bash
# demo.sh BUILD_DIR - the main job: trains the quick-start MLP locally and prints its
# falling cost.
set -euo pipefail
build=${1:-build}
echo "== Fleet quick start: x[32] -> fc128 tanh -> fc128 tanh -> fc2 softmax, SGD 0.01, batch 128"
"$build"/examples/quick_start/local_train 1001
