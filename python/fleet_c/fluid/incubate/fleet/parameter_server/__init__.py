"""fluid.incubate.fleet.parameter_server."""
