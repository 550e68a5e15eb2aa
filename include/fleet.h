/*
 * fleet.h - umbrella header of Fleet in C.  Include this and link with -lfleet
 * (pkg-config --cflags --libs fleet).
 */
#ifndef FLEET_H
#define FLEET_H

#include "fleet/base.h"
#include "fleet/tensor.h"
#include "fleet/graph.h"
#include "fleet/data.h"
#include "fleet/exec.h"
#include "fleet/metrics.h"
#include "fleet/io.h"
#include "fleet/models.h"
#include "fleet/transformer.h"
#include "fleet/app.h"
#include "fleet/net.h"
#include "fleet/coll.h"
#include "fleet/ps.h"
#include "fleet/fleet.h"

#endif
