"""fluid.incubate.fleet (1.x): base.role_maker, parameter_server.distribute_transpiler.fleet
and collective.fleet."""
