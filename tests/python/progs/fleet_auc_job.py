"""paddle.distributed.fleet.metrics.auc: each worker feeds its share of one data set through
a program holding paddle.static.auc, then asks fleet.metrics.auc for the global AUC of the
auc layer's bucket statistics summed over the workers.  It also feeds the whole data set
(every worker's share) through a second program in a scope of its own and prints that
program's own AUC, which the global one must equal.  Runs alone (one worker) or under
fleetrun --nproc_per_node N."""
import numpy as np

import fleet_c as paddle
import fleet_c.static as static
from fleet_c.distributed import fleet

fleet.init(is_collective=True)
r, n = fleet.worker_index(), fleet.worker_num()
rng = np.random.RandomState(11)
rows = 600
label = (rng.rand(rows, 1) < 0.4).astype(np.int64)
p1 = np.clip(0.35 * label[:, 0] + 0.65 * rng.rand(rows), 0.0, 1.0).astype(np.float32)  # informative, overlapping
pred = np.stack([1.0 - p1, p1], axis=1).astype(np.float32)


def build():
    main, startup = static.Program(), static.Program()
    with static.program_guard(main, startup):
        x = static.data("pred", [-1, 2], "float32")
        y = static.data("label", [-1, 1], "int64")
        auc, _, states = static.auc(x, y, num_thresholds=255)
    return main, startup, auc, states


def feed(main, startup, auc, scope, lo, hi):
    exe = static.Executor(paddle.CPUPlace())
    with static.scope_guard(scope):
        exe.run(startup)
        out = None
        for b in range(lo, hi, 50):
            e = min(b + 50, hi)
            out, = exe.run(main, feed={"pred": pred[b:e], "label": label[b:e]}, fetch_list=[auc])
    return float(np.array(out).reshape(-1)[0])


share = rows // n
main, startup, auc, states = build()
mine = static.global_scope()
local_auc = feed(main, startup, auc, mine, r * share, (r + 1) * share)
global_auc = fleet.metrics.auc(states[2], states[3], scope=mine)
by_name = fleet.metrics.auc(states[2].name, states[3].name)

main2, startup2, auc2, _ = build()
union_auc = feed(main2, startup2, auc2, static.Scope(), 0, share * n)
print("rank %d local %.12f global %.12f by_name %.12f union %.12f" % (r, local_auc, global_auc, by_name, union_auc))
