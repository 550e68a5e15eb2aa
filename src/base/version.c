/* version.c - the library's version string, set by the Makefile from its VERSION. */
#include "fleet/base.h"

#ifndef FLEET_VERSION_STRING
#error "FLEET_VERSION_STRING comes from the Makefile (-DFLEET_VERSION_STRING=\"x.y.z\")"
#endif

const char *fl_version(void) { return FLEET_VERSION_STRING; }
