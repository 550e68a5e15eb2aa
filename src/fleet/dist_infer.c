/*
 * dist_infer.c - fleet_dist_infer_program: Paddle's DistributedInfer.get_dist_infer_program,
 * a program for inference over the tables of a fleet's parameter servers.  With parameter
 * servers the program's lookups of the servers' sparse tables become remote lookups in test
 * mode (src/fleet/ps/rewrite.c); in a collective or local fleet every parameter is the
 * worker's own, and the program runs as it is.
 */
#include "fleet_internal.h"
#include "ps/fleet_ps.h"

int fleet_dist_infer_program(fleet_t *f, fl_prog *prog)
{
    if (!f) return fl__err(FL_EINVAL, "fleet_dist_infer_program: fleet is NULL");
    if (!prog) return fl__err(FL_EINVAL, "fleet_dist_infer_program: program is NULL");
    if (!fleet_is_worker(f)) return fl__err(FL_ESTATE, "fleet_dist_infer_program: this process is a server; workers infer");
    if (fleet_is_distributed(f) && !fleet_is_collective(f)) return fl__ps_infer_program(f, prog);
    return FL_OK;
}
